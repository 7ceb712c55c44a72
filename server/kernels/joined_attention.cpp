// The joined attention of the cascade (server/cascade_attention.py) for bfloat16 on CPUs with AMX:
// each row's queries over its request's prefix keys then its own keys, causal on the own part.
//
// torch's CPU flash kernel takes its packed AMX path for float16 only; for bfloat16 it computes
// each 32-query block with cpublas::gemm, whose AVX-512 bf16 dot products cost about as much per
// score as the softmax (1-1.4 G scores/s at our sizes). Here both products run on AMX tiles
// (cpublas::brgemm over VNNI-packed keys and values, packed once per row and kv head), a block of
// queries sees only the own keys up to its last query (no masked block beyond it is computed),
// and the softmax is a max pass and an exp pass over a block's scores held in L2, then their
// conversion to bfloat16. Built and loaded by server/attention_kernel.py.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using at::BFloat16;
using Vec = at::vec::Vectorized<float>;

constexpr int64_t kQueryBlock = 96;  // queries a block: its scores (96 x keys, float32) stay in L2

struct Strides {
  int64_t row, head, token;
};

Strides strides_of(const at::Tensor& t) {  // [rows, heads, tokens, dim], dim contiguous
  return {t.stride(0), t.stride(1), t.stride(2)};
}

// K^T as VNNI pairs [dim / 2][keys] (a pair of adjacent dims read as one 32-bit word, transposed),
// and V as [keys / 2][dim][2]; a key past the last (odd count) is zero.
void pack_keys_values(const BFloat16* const* key_rows, const BFloat16* const* value_rows, int64_t num_keys,
                      int64_t padded_keys, int64_t dim, uint32_t* keys_t, BFloat16* values) {
  const int64_t pairs = dim / 2;
  for (int64_t n = 0; n < num_keys; n++) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(key_rows[n]);
    for (int64_t d2 = 0; d2 < pairs; d2++) keys_t[d2 * padded_keys + n] = src[d2];
  }
  for (int64_t n = num_keys; n < padded_keys; n++)
    for (int64_t d2 = 0; d2 < pairs; d2++) keys_t[d2 * padded_keys + n] = 0;
  for (int64_t n2 = 0; n2 < padded_keys / 2; n2++) {
    const BFloat16* a = value_rows[2 * n2];
    const BFloat16* b = 2 * n2 + 1 < num_keys ? value_rows[2 * n2 + 1] : nullptr;
    BFloat16* dst = values + n2 * dim * 2;
    for (int64_t d = 0; d < dim; d++) {
      dst[2 * d] = a[d];
      dst[2 * d + 1] = b ? b[d] : BFloat16(0.f);
    }
  }
}

// One query's scores s[lo, hi) -> exp(scale * (s - max)) in p (bfloat16), zero outside [lo, hi) up
// to `width`; returns 1 / their sum, which the output is scaled by (a row of dim, not of keys).
// A masked lane is -inf, whose exp is 0.
float softmax_row(float* s, int64_t lo, int64_t hi, int64_t width, float scale, BFloat16* p) {
  const Vec neg_inf(-std::numeric_limits<float>::infinity());
  const int64_t n = Vec::size();
  Vec vmax = neg_inf;
  int64_t j = lo;
  for (; j + n <= hi; j += n) vmax = at::vec::maximum(vmax, Vec::loadu(s + j));
  if (j < hi) vmax = at::vec::maximum(vmax, Vec::set(neg_inf, Vec::loadu(s + j, hi - j), hi - j));
  const float max = at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, vmax);
  const Vec shift(max * scale), vscale(scale);
  Vec vsum(0.f);
  for (j = lo; j + n <= hi; j += n) {
    Vec e = (Vec::loadu(s + j) * vscale - shift).exp_u20();
    vsum = vsum + e;
    e.store(s + j);
  }
  if (j < hi) {
    Vec e = (Vec::set(neg_inf, Vec::loadu(s + j, hi - j), hi - j) * vscale - shift).exp_u20();
    vsum = vsum + e;
    e.store(s + j, hi - j);
  }
  std::memset(p, 0, lo * sizeof(BFloat16));
  at::vec::convert(s + lo, p + lo, hi - lo);
  std::memset(p + hi, 0, (width - hi) * sizeof(BFloat16));
  return 1.f / at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, vsum);
}

// out = o * inverse (o scaled in place), rounded to bfloat16.
void scaled_row(float* o, float inverse, int64_t dim, BFloat16* out) {
  const Vec vinverse(inverse);
  int64_t d = 0;
  for (; d + Vec::size() <= dim; d += Vec::size()) (Vec::loadu(o + d) * vinverse).store(o + d);
  for (; d < dim; d++) o[d] *= inverse;
  at::vec::convert(o, out, dim);
}

}  // namespace

// query [rows, heads, L, dim], key/value [rows, kv heads, L, dim] (the rows' own), prefix keys and
// values [1, kv heads, P, dim]; -> [rows, L, heads, dim]. Query i of a row sees the whole prefix
// (except the last row where last_is_query: the prefix's own query row sees only itself) and its
// own keys 0..i.
at::Tensor joined_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                            const at::Tensor& prefix_keys, const at::Tensor& prefix_values, double scale,
                            bool last_is_query) {
  for (const at::Tensor* t : {&query, &key, &value, &prefix_keys, &prefix_values}) {
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 && t->dim() == 4 && t->stride(3) == 1,
                "joined_attention: bfloat16 [rows, heads, tokens, dim] tensors, dim contiguous");
  }
  const int64_t rows = query.size(0), heads = query.size(1), length = query.size(2), dim = query.size(3);
  const int64_t kv_heads = key.size(1), prefix = prefix_keys.size(2), group = heads / kv_heads;
  TORCH_CHECK(dim % 2 == 0 && heads % kv_heads == 0 && key.size(2) == length && prefix_keys.size(1) == kv_heads,
              "joined_attention: an even head dim, query heads a multiple of the kv heads");
  const int64_t num_keys = prefix + length, padded_keys = (num_keys + 1) / 2 * 2;
  auto out = at::empty({rows, length, heads, dim}, query.options());
  const Strides q = strides_of(query), k = strides_of(key), v = strides_of(value);
  const Strides pk = strides_of(prefix_keys), pv = strides_of(prefix_values);
  const BFloat16* q_data = query.const_data_ptr<BFloat16>();
  const BFloat16* k_data = key.const_data_ptr<BFloat16>();
  const BFloat16* v_data = value.const_data_ptr<BFloat16>();
  const BFloat16* pk_data = prefix_keys.const_data_ptr<BFloat16>();
  const BFloat16* pv_data = prefix_values.const_data_ptr<BFloat16>();
  BFloat16* out_data = out.data_ptr<BFloat16>();
  const float scale_f = static_cast<float>(scale);
  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<const BFloat16*> key_rows(num_keys), value_rows(num_keys);
    std::vector<uint32_t> keys_t(dim / 2 * padded_keys);
    std::vector<BFloat16> values(padded_keys * dim), probs(kQueryBlock * padded_keys);
    std::vector<float> scores(kQueryBlock * padded_keys), outputs(kQueryBlock * dim), inverse_sums(kQueryBlock);
    for (int64_t task = begin; task < end; task++) {
      const int64_t row = task / kv_heads, kv_head = task % kv_heads;
      for (int64_t n = 0; n < num_keys; n++) {
        key_rows[n] = n < prefix ? pk_data + kv_head * pk.head + n * pk.token
                                 : k_data + row * k.row + kv_head * k.head + (n - prefix) * k.token;
        value_rows[n] = n < prefix ? pv_data + kv_head * pv.head + n * pv.token
                                   : v_data + row * v.row + kv_head * v.head + (n - prefix) * v.token;
      }
      pack_keys_values(key_rows.data(), value_rows.data(), num_keys, padded_keys, dim, keys_t.data(), values.data());
      const BFloat16* packed_keys = reinterpret_cast<const BFloat16*>(keys_t.data());
      const int64_t first_seen = last_is_query && row == rows - 1 ? prefix : 0;
      for (int64_t head = kv_head * group; head < (kv_head + 1) * group; head++) {
        for (int64_t start = 0; start < length; start += kQueryBlock) {
          const int64_t stop = std::min(length, start + kQueryBlock), m = stop - start;
          const int64_t seen = (prefix + stop + 1) / 2 * 2;  // no query of the block sees beyond
          at::native::cpublas::brgemm(m, seen, dim, q.token, padded_keys, padded_keys, false,
                                      q_data + row * q.row + head * q.head + start * q.token, packed_keys,
                                      scores.data(), true);
          for (int64_t i = 0; i < m; i++) {
            inverse_sums[i] = softmax_row(scores.data() + i * padded_keys, first_seen, prefix + start + i + 1, seen,
                                          scale_f, probs.data() + i * padded_keys);
          }
          at::native::cpublas::brgemm(m, dim, seen, padded_keys, dim, dim, false, probs.data(), values.data(),
                                      outputs.data(), true);
          for (int64_t i = 0; i < m; i++) {
            scaled_row(outputs.data() + i * dim, inverse_sums[i], dim,
                       out_data + ((row * length + start + i) * heads + head) * dim);
          }
        }
      }
    }
    at::native::cpublas::brgemm_release(true);
  });
  return out;
}

// Whether this CPU runs bfloat16 brgemm on AMX tiles (the packed path): otherwise the kernel would
// gain nothing over torch's.
bool amx_bfloat16() { return at::native::cpublas::could_pack(at::kBFloat16); }

TORCH_LIBRARY(scoringfleet_kernels, m) {
  m.def("joined_attention(Tensor query, Tensor key, Tensor value, Tensor prefix_keys, Tensor prefix_values, "
        "float scale, bool last_is_query) -> Tensor");
  m.def("amx_bfloat16() -> bool", &amx_bfloat16);
}

TORCH_LIBRARY_IMPL(scoringfleet_kernels, CPU, m) { m.impl("joined_attention", &joined_attention); }
