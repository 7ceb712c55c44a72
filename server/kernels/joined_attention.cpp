// The joined attention of the cascade (server/cascade_attention.py) for bfloat16 on CPUs with AMX
// or AVX-512 bf16: each row's queries over its request's prefix keys then its own keys, causal on
// the own part.
//
// torch's CPU flash kernel takes its packed AMX path for float16 only; for bfloat16 it computes
// each 32-query block with cpublas::gemm, whose AVX-512 bf16 dot products cost about as much per
// score as the softmax (1-1.4 G scores/s at our sizes on a Xeon, 0.3-0.4 on an AMD Zen 4). Here
// both products run through cpublas::brgemm (oneDNN's brgemm: on AMX tiles, else on AVX-512 bf16
// dot products) over VNNI-packed keys and values, packed once per row and kv head, a block of
// queries sees only the own keys up to its last query (no masked block beyond it is computed),
// and the softmax is a max pass, then one pass that takes the exp (a polynomial fit, as exact as
// bfloat16 needs), sums it and writes it in bfloat16 (the CPU's own conversion), over a block's
// scores held in L2. Built and loaded by server/attention_kernel.py.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using at::BFloat16;
using Vec = at::vec::Vectorized<float>;

// Queries a block. A block's queries of every head of a kv head's group are stacked into one product
// (their keys and values are the same): 288 rows for a group of 3, not three products of 96, so a
// packed key tile is loaded once for all of them and the products are called a third as often (on
// an AMD Zen 5: 1.08-1.09x at 40 rows, the same within 4 % at 6 and 11; bit for bit the same).
// At the default model's sizes the block's scores (float32) and probabilities stay in L2 (~0.5 MB);
// at thousands of keys they spill to L3, measured no slower than a block of one head.
constexpr int64_t kQueryBlock = 96;

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
  for (int64_t d2 = 0; d2 < pairs; d2++) {
    uint32_t* dst = keys_t + d2 * padded_keys;
    for (int64_t n = 0; n < num_keys; n++) dst[n] = reinterpret_cast<const uint32_t*>(key_rows[n])[d2];
    for (int64_t n = num_keys; n < padded_keys; n++) dst[n] = 0;
  }
  const std::vector<BFloat16> zeros(dim, BFloat16(0.f));
  for (int64_t n2 = 0; n2 < padded_keys / 2; n2++) {
    const BFloat16* a = value_rows[2 * n2];
    const BFloat16* b = 2 * n2 + 1 < num_keys ? value_rows[2 * n2 + 1] : zeros.data();
    BFloat16* dst = values + n2 * dim * 2;
    int64_t d = 0;
    for (; d + 16 <= dim; d += 16) {  // 16 dims of a key and of the next, as 16 pairs
      const __m512i low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + d)));
      const __m512i high = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + d)));
      _mm512_storeu_si512(dst + 2 * d, _mm512_or_si512(low, _mm512_slli_epi32(high, 16)));
    }
    for (; d < dim; d++) {
      dst[2 * d] = a[d];
      dst[2 * d + 1] = b[d];
    }
  }
}

// Floats rounded to bfloat16 (to nearest even) by the CPU's own instruction: at::vec's conversion
// emulates it in ~8 integer operations a vector, a sixth of the softmax's pass (the kernel 5 % faster
// on an AMD Zen 5, bit for bit the same). The kernel is loaded only where the CPU has AVX-512 bf16.
__m512i to_bf16(__m512 low, __m512 high) { return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low)); }
__m256i to_bf16(__m512 values) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values)); }

// 2^t for t <= 0, to ~3e-6 (a degree-4 fit of 2^f on [-0.5, 0.5], scaled by 2^n with scalef: 8
// operations a vector against exp_u20's ~14; bfloat16 keeps 8 bits). Below 2^-125 it is 2^-125, a
// normal float: nothing it adds is denormal, which Intel's cores take microcode assists for.
__m512 exp2_nonpositive(__m512 t) {
  t = _mm512_max_ps(t, _mm512_set1_ps(-125.f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(0.009560510516166687f), _mm512_set1_ps(0.05591703951358795f));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(0.24024981260299683f));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(0.6931219696998596f));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(0.9999991655349731f));
  return _mm512_scalef_ps(p, n);
}

// One query's scores s[lo, hi) -> exp(scale * (s - max)) in p (bfloat16), zero outside [lo, hi) up
// to `width`; returns 1 / their sum, which the output is scaled by (a row of dim, not of keys).
// Raw AVX-512 where at::vec would cost: four independent maxima (one is a chain of 4-cycle
// latencies), and masked loads for a row's tail (at::vec's partial load copies through a buffer).
float softmax_row(float* s, int64_t lo, int64_t hi, int64_t from, int64_t width, float scale, BFloat16* p) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  int64_t j = lo;
  for (; j + 64 <= hi; j += 64) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(s + j));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(s + j + 16));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(s + j + 32));
    m3 = _mm512_max_ps(m3, _mm512_loadu_ps(s + j + 48));
  }
  for (; j + 16 <= hi; j += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(s + j));
  const __mmask16 tail = static_cast<__mmask16>((1u << (hi - j)) - 1);
  if (j < hi) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(neg_inf, tail, s + j));
  const float max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
  // exp(scale * (s - max)) = 2^(s * scale * log2(e) - max * scale * log2(e)): one fused multiply-subtract
  constexpr float kLog2e = 1.4426950408889634f;
  const __m512 vscale = _mm512_set1_ps(scale * kLog2e), shift = _mm512_set1_ps(max * scale * kLog2e);
  Vec sum0(0.f), sum1(0.f);
  std::memset(p + from, 0, (lo - from) * sizeof(BFloat16));
  for (j = lo; j + 32 <= hi; j += 32) {
    const Vec e0 = exp2_nonpositive(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), vscale, shift));
    const Vec e1 = exp2_nonpositive(_mm512_fmsub_ps(_mm512_loadu_ps(s + j + 16), vscale, shift));
    sum0 = sum0 + e0;
    sum1 = sum1 + e1;
    _mm512_storeu_si512(p + j, to_bf16(e0, e1));
  }
  for (; j + 16 <= hi; j += 16) {
    const Vec e = exp2_nonpositive(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), vscale, shift));
    sum0 = sum0 + e;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), to_bf16(e));
  }
  if (j < hi) {
    // lanes past the row are zero (masked off after the exp: a zero score would give exp(-max))
    const __m512 exponent = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(tail, s + j), vscale, shift);
    const Vec e(_mm512_maskz_mov_ps(tail, exp2_nonpositive(exponent)));
    sum1 = sum1 + e;
    _mm256_mask_storeu_epi16(p + j, tail, to_bf16(e));
  }
  std::memset(p + hi, 0, (width - hi) * sizeof(BFloat16));
  return 1.f / _mm512_reduce_add_ps(sum0 + sum1);
}

// out = o * inverse, rounded to bfloat16.
void scaled_row(const float* o, float inverse, int64_t dim, BFloat16* out) {
  const Vec vinverse(inverse);
  int64_t d = 0;
  for (; d + 32 <= dim; d += 32) {
    const __m512i pair = to_bf16(Vec::loadu(o + d) * vinverse, Vec::loadu(o + d + 16) * vinverse);
    _mm512_storeu_si512(out + d, pair);
  }
  for (; d < dim; d++) out[d] = BFloat16(o[d] * inverse);
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
  // Tasks are claimed one at a time, not split in even ranges: the query's row costs less than an
  // item's, and 33 tasks on 2 threads would leave one idle for a whole task.
  const int64_t num_tasks = rows * kv_heads;
  std::atomic<int64_t> next_task{0};
  at::parallel_for(0, std::min<int64_t>(at::get_num_threads(), num_tasks), 1, [&](int64_t, int64_t) {
    std::vector<const BFloat16*> key_rows(num_keys), value_rows(num_keys);
    std::vector<uint32_t> keys_t(dim / 2 * padded_keys);
    const int64_t block_rows = group * kQueryBlock;  // a block's queries of every head of the group
    std::vector<BFloat16> values(padded_keys * dim), probs(block_rows * padded_keys), queries(block_rows * dim);
    std::vector<float> scores(block_rows * padded_keys), outputs(block_rows * dim), inverse_sums(block_rows);
    for (int64_t task = next_task++; task < num_tasks; task = next_task++) {
      const int64_t kv_head = task / rows, row = task % rows;
      for (int64_t n = 0; n < num_keys; n++) {
        key_rows[n] = n < prefix ? pk_data + kv_head * pk.head + n * pk.token
                                 : k_data + row * k.row + kv_head * k.head + (n - prefix) * k.token;
        value_rows[n] = n < prefix ? pv_data + kv_head * pv.head + n * pv.token
                                   : v_data + row * v.row + kv_head * v.head + (n - prefix) * v.token;
      }
      pack_keys_values(key_rows.data(), value_rows.data(), num_keys, padded_keys, dim, keys_t.data(), values.data());
      const BFloat16* packed_keys = reinterpret_cast<const BFloat16*>(keys_t.data());
      // The query's own row sees none of the prefix: its products start at the first key it sees
      // (an even key: values are packed in pairs of keys).
      const int64_t first_seen = last_is_query && row == rows - 1 ? prefix : 0, first_pair = first_seen / 2 * 2;
      for (int64_t start = 0; start < length; start += kQueryBlock) {
        const int64_t stop = std::min(length, start + kQueryBlock), m = stop - start, gm = group * m;
        const int64_t seen = (prefix + stop + 1) / 2 * 2;  // no query of the block sees beyond
        // row i of the stacked block: query start + i % m of head kv_head * group + i / m
        for (int64_t g = 0; g < group; g++) {
          const BFloat16* head_queries = q_data + row * q.row + (kv_head * group + g) * q.head + start * q.token;
          for (int64_t i = 0; i < m; i++) {
            std::memcpy(queries.data() + (g * m + i) * dim, head_queries + i * q.token, dim * sizeof(BFloat16));
          }
        }
        at::native::cpublas::brgemm(gm, seen - first_pair, dim, dim, padded_keys, padded_keys, false,
                                    queries.data(), packed_keys + 2 * first_pair, scores.data() + first_pair, true);
        for (int64_t i = 0; i < gm; i++) {
          inverse_sums[i] = softmax_row(scores.data() + i * padded_keys, first_seen, prefix + start + i % m + 1,
                                        first_pair, seen, scale_f, probs.data() + i * padded_keys);
        }
        at::native::cpublas::brgemm(gm, dim, seen - first_pair, padded_keys, dim, dim, false,
                                    probs.data() + first_pair, values.data() + first_pair * dim, outputs.data(),
                                    true);
        for (int64_t i = 0; i < gm; i++) {
          const int64_t head = kv_head * group + i / m;
          scaled_row(outputs.data() + i * dim, inverse_sums[i], dim,
                     out_data + ((row * length + start + i % m) * heads + head) * dim);
        }
      }
    }
    at::native::cpublas::brgemm_release(true);
  });
  return out;
}

TORCH_LIBRARY(scoringfleet_kernels, m) {
  m.def("joined_attention(Tensor query, Tensor key, Tensor value, Tensor prefix_keys, Tensor prefix_values, "
        "float scale, bool last_is_query) -> Tensor");
}

TORCH_LIBRARY_IMPL(scoringfleet_kernels, CPU, m) { m.impl("joined_attention", &joined_attention); }
