"""Our joined attention (server/attention_kernel.py, kernels/joined_attention.cpp) against torch's
flash kernel and float32: in bfloat16 it errs no more than torch's kernel does, on every layout the
cascade hands it; the runner's items forward passes it down; a build that fails is a reason, never
an error. The kernel itself runs where it is built: AVX-512 with AMX or bf16 dot products, and a
C++ compiler."""
from __future__ import annotations

import pytest
import torch

from server import attention_kernel, cascade_attention as cascade_module
from server.attention_kernel import build, kernels_folder, library_name, load_joined_attention, probe
from server.cascade_attention import PrefixSegments, _attend_joined, cascade_attention, prefix_segments
from server.compile_start import has_cpp_compiler
from server.model_runner import ModelRunner
from tests.server.test_cascade_attention import (
    DIM,
    HEADS,
    LAYOUTS,
    OWN,
    QUERY_ROW_LAYOUTS,
    ROWS,
    Layer,
    random_case,
    reference,
)
from tests.server.test_model_zoo import tiny_model, zoo_requests


@pytest.fixture(scope="module")
def kernel():
    op, why = load_joined_attention()
    if op is None:
        pytest.skip(f"our joined attention does not run here: {why}")
    return op


# rows, prefix, own tokens, heads, kv heads, head dim, last row the query's
SHAPES = {
    "serving-size-10-items-and-their-query-row": (11, 120, 180, 9, 3, 64, True),
    "tiny-and-an-odd-number-of-keys": (4, 5, 7, 6, 2, 8, False),
    "no-grouped-heads-a-wide-head": (3, 7, 37, 4, 4, 128, True),
    "a-head-dim-no-multiple-of-the-vector": (2, 1, 100, 8, 2, 80, False),
    "one-row-several-query-blocks-one-kv-head": (1, 30, 200, 6, 1, 64, False),
    # the query's row skips the prefix from the pair of keys its first own key is in
    "an-odd-prefix-before-the-query-row": (3, 121, 50, 9, 3, 64, True),
}


def joined_case(rows, prefix, own, heads, kv_heads, dim):
    generator = torch.Generator().manual_seed(1)

    def draw(*shape):
        return torch.randn(*shape, generator=generator).to(torch.bfloat16)

    # as the decoder gives them: a projection [rows, own, heads, dim] viewed into heads
    return (draw(rows, own, heads, dim).transpose(1, 2), draw(rows, own, kv_heads, dim).transpose(1, 2),
            draw(rows, own, kv_heads, dim).transpose(1, 2), draw(1, kv_heads, prefix, dim),
            draw(1, kv_heads, prefix, dim))


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_the_kernel_errs_no_more_than_torchs_against_float32(kernel, shape):
    *sizes, last_is_query = shape
    case = joined_case(*sizes)
    scale = sizes[-1] ** -0.5
    exact = _attend_joined(*(t.float() for t in case), scale, last_is_query)
    torchs = _attend_joined(*case, scale, last_is_query).float()
    ours = kernel(*case, scale, last_is_query)
    rows, _, own, heads, _, dim = sizes
    assert ours.shape == (rows, own, heads, dim) and ours.dtype == torch.bfloat16
    ours_error, torchs_error = (ours.float() - exact).abs(), (torchs - exact).abs()
    assert ours_error.max() <= 1.5 * torchs_error.max() + 1e-3
    assert ours_error.mean() <= 1.5 * torchs_error.mean() + 1e-5


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_cascade_through_the_kernel_equals_masked_attention(kernel, layout):
    query, keys, values, prefixes = random_case(torch.bfloat16)
    segments = PrefixSegments(tuple((start, end) for start, end, _ in layout),
                              (tuple(prefixes[name] for _, _, name in layout),))
    with prefix_segments(segments, kernel):
        out, _ = cascade_attention(Layer(), query, keys, values, None, scaling=0.3)
    assert out.shape == (ROWS, OWN, HEADS, DIM)
    prefix_of = {row: prefixes[name] for start, end, name in layout for row in range(start, end)}
    for row in range(ROWS):
        expected = reference(query[row:row + 1], keys[row:row + 1], values[row:row + 1], prefix_of.get(row), 0.3)
        torch.testing.assert_close(out[row:row + 1].transpose(1, 2).float(), expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("segment, query_row, length", QUERY_ROW_LAYOUTS.values(), ids=QUERY_ROW_LAYOUTS.keys())
def test_through_the_kernel_a_query_row_sees_only_itself(kernel, segment, query_row, length):
    query, keys, values, _ = random_case(torch.bfloat16)
    with prefix_segments(PrefixSegments((segment,), ((None,),), ((query_row, length),)), kernel):
        out, _ = cascade_attention(Layer(), query, keys, values, None, scaling=0.3)
    prefix = (keys[query_row:query_row + 1, :, :length], values[query_row:query_row + 1, :, :length])
    for row in range(ROWS):
        sees = prefix if segment[0] <= row < segment[1] else None
        expected = reference(query[row:row + 1], keys[row:row + 1], values[row:row + 1], sees, 0.3)
        torch.testing.assert_close(out[row:row + 1].transpose(1, 2).float(), expected, atol=2e-2, rtol=2e-2)


class Counted:
    """A stand-in kernel: torch's joined attention, counted (so the plumbing is tested anywhere)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, query, key, value, prefix_keys, prefix_values, scale, last_is_query):
        self.calls += 1
        return _attend_joined(query, key, value, prefix_keys, prefix_values, scale, last_is_query)


def test_the_runners_items_forward_hands_its_kernel_to_every_joined_call(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    runner = ModelRunner(tiny_model("llama", len(tokenizer)).to(torch.bfloat16), tokenizer)
    sequences = [seq for request in zoo_requests(runner) for seq in request.sequences]
    before = runner.run(sequences).scores
    counted = runner._items_forward.joined_kernel = Counted()
    after = runner.run(sequences).scores
    assert counted.calls > 0
    for row_before, row_after in zip(before, after, strict=True):
        assert row_after == pytest.approx(row_before, abs=1e-6)


class CountedOp:
    """A real op, its calls counted."""

    def __init__(self, op):
        self.op, self.calls = op, 0

    def __call__(self, *args):
        self.calls += 1
        return self.op(*args)


def test_an_eager_server_takes_our_kernel_where_it_runs(kernel, tiny_model_dir, tmp_path):
    """--compile off (as LoRA adapters and a failed compile leave a server): its eager forwards'
    joined calls go through our kernel too, scoring as torch's kernel does within bfloat16."""
    from transformers import AutoTokenizer

    from server.__main__ import load
    from server.config import ServerConfig

    config, runner, _ = load(ServerConfig(model_path=str(tiny_model_dir), dtype="bfloat16", compile="off",
                                          compile_cache_dir=str(tmp_path)))
    assert config.compile == "off" and runner._items_forward.joined_kernel is kernel
    assert config.attention_backend == "scoringfleet" and config.attention_backend_reason.startswith("on ")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    runner = ModelRunner(tiny_model("llama", len(tokenizer)).to(torch.bfloat16), tokenizer)
    sequences = [seq for request in zoo_requests(runner) for seq in request.sequences]
    torchs = runner.run(sequences).scores
    runner.use_attention_kernel(tmp_path)
    counted = runner._items_forward.joined_kernel = CountedOp(runner._items_forward.joined_kernel)
    ours = runner.run(sequences).scores
    assert counted.calls > 0
    for row_torchs, row_ours in zip(torchs, ours, strict=True):
        assert row_ours == pytest.approx(row_torchs, abs=2e-3)


def test_a_float32_runner_loads_no_kernel(tiny_model_dir, monkeypatch):
    from transformers import AutoTokenizer

    from server import compiled_forward

    monkeypatch.setattr(compiled_forward, "load_joined_attention", lambda folder=None: pytest.fail("loaded"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    runner = ModelRunner(tiny_model("llama", len(tokenizer)), tokenizer)
    runner.use_attention_kernel()
    assert runner._items_forward.joined_kernel is None


def test_a_read_only_folder_builds_where_this_process_can_write(monkeypatch, tmp_path):
    built = []

    def build_here(folder, compiler):
        if folder == tmp_path / "read-only":
            raise PermissionError(f"[Errno 13] Permission denied: '{folder}'")
        built.append(folder)
        return folder / "joined_attention.so"
    monkeypatch.setattr(attention_kernel, "build", build_here)
    library = "joined_attention.so"
    assert attention_kernel._build_where_writable(tmp_path / "read-only", "g++") == kernels_folder() / library
    assert attention_kernel._build_where_writable(tmp_path / "volume", "g++") == tmp_path / "volume" / library
    assert built == [kernels_folder(), tmp_path / "volume"]


@pytest.mark.parametrize("case", [
    pytest.param([t.float() for t in joined_case(2, 3, 5, 4, 2, 8)], id="float32"),
    pytest.param(joined_case(2, 3, 5, 4, 2, 7), id="an-odd-head-dim"),
])
def test_what_the_kernel_does_not_compute_keeps_torchs_kernel(case):
    def refuse(*args):
        raise AssertionError("the kernel computes bfloat16 with an even head dim only")
    torch.testing.assert_close(_attend_joined(*case, 0.3, kernel=refuse), _attend_joined(*case, 0.3))


def test_a_failed_build_raises_and_leaves_no_library(tmp_path):
    with pytest.raises(RuntimeError, match="false failed"):
        build(tmp_path, "false")
    assert list(tmp_path.iterdir()) == []


def test_an_images_prebuilt_library_is_taken_and_nothing_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(attention_kernel, "PREBUILT", tmp_path / "prebuilt")
    compiler, *flags = attention_kernel.build_flags("false")
    prebuilt = tmp_path / "prebuilt" / library_name(attention_kernel.SOURCE.read_text(), [compiler, *flags])
    prebuilt.parent.mkdir()
    prebuilt.write_bytes(b"a library")
    assert build(tmp_path / "volume", "false") == prebuilt  # `false` would fail any build
    assert not (tmp_path / "volume").exists()


def test_an_image_build_that_cannot_build_the_library_says_so_and_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(attention_kernel, "PREBUILT", tmp_path / "prebuilt")
    monkeypatch.setattr("torch._inductor.cpp_builder.get_cpp_compiler", lambda: "false")
    assert attention_kernel.main() == 0
    assert capsys.readouterr().out.startswith("not built (false failed")


def test_a_folder_it_cannot_write_is_a_permission_error_before_any_build(tmp_path, monkeypatch):
    monkeypatch.setattr(attention_kernel.os, "access", lambda path, mode: False)  # root may write anywhere
    with pytest.raises(PermissionError, match="cannot write the kernel's library"):
        build(tmp_path, "false")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_build_is_a_reason_to_keep_torchs_kernel(monkeypatch):
    def fails(folder, compiler):
        raise RuntimeError("c++ failed: no such header")
    monkeypatch.setattr(attention_kernel, "build", fails)
    monkeypatch.setattr(attention_kernel, "_loaded_op", lambda: None)  # as in a fresh process
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(attention_kernel, "bf16_products", lambda: "AMX tiles")
    assert load_joined_attention.__wrapped__() == (None, "not built: c++ failed: no such header")


def test_where_torch_runs_no_avx512_kernels_nothing_is_built(monkeypatch):
    monkeypatch.setattr(attention_kernel, "build", lambda *args: pytest.fail("built"))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    op, why = load_joined_attention.__wrapped__()
    assert op is None and "AVX2" in why


def test_on_avx512_without_bf16_dot_products_nothing_is_built(monkeypatch):
    """Skylake and Ice Lake Xeons: a cold start must not spend its seconds building a kernel the
    CPU cannot run."""
    monkeypatch.setattr(attention_kernel, "build", lambda *args: pytest.fail("built"))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    op, why = load_joined_attention.__wrapped__()
    assert op is None and why == "this CPU has no AVX-512 bf16, which the kernel needs"


@pytest.mark.parametrize(("amx", "avx512_bf16", "expected"), [
    (True, True, "AMX tiles"), (False, True, "AVX-512 bf16 dot products"), (False, False, None),
    (True, False, None)])  # no CPU is known to have AMX without AVX-512 bf16: the kernel needs both
def test_the_products_run_on_amx_tiles_where_there_are_any(monkeypatch, amx, avx512_bf16, expected):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    assert attention_kernel.bf16_products() == expected


def test_the_probe_passes_the_kernel(kernel):
    assert probe(kernel) is None


def test_an_op_that_computes_wrong_or_is_refused_fails_the_probe():
    def refused(*args):
        raise RuntimeError("Brgemm is not supported on\n current CPU")
    assert probe(refused) == "refused on this CPU: Brgemm is not supported on current CPU"
    assert probe(lambda query, *rest: torch.zeros(2, 5, 2, 64, dtype=torch.bfloat16)).startswith(
        "computes wrong on this CPU (off by ")


def test_an_op_the_probe_fails_keeps_torchs_kernel(monkeypatch):
    monkeypatch.setattr(attention_kernel, "build", lambda *args: "/nowhere/joined_attention.so")
    monkeypatch.setattr(attention_kernel, "_loaded_op", lambda: None)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(attention_kernel, "bf16_products", lambda: "AMX tiles")
    monkeypatch.setattr(torch.ops, "load_library", lambda path: None)
    monkeypatch.setattr(attention_kernel, "probe", lambda op: "refused on this CPU: no tiles granted")
    assert load_joined_attention.__wrapped__() == (None, "refused on this CPU: no tiles granted")


def test_the_library_is_named_by_its_source_torch_and_flags():
    name = library_name("source", ["g++", "-O3"])
    assert name == library_name("source", ["g++", "-O3"])
    assert name != library_name("source 2", ["g++", "-O3"]) != library_name("source", ["g++", "-O2"])


def test_a_built_library_is_loaded_again_not_rebuilt(kernel):
    library = build(kernels_folder(), "g++")
    modified = library.stat().st_mtime_ns
    assert build(kernels_folder(), "g++") == library and library.stat().st_mtime_ns == modified


def test_the_cascade_module_keeps_no_kernel_between_forwards(kernel):
    with prefix_segments(PrefixSegments((), ()), kernel):
        pass
    assert cascade_module._forward.joined_kernel is None


def test_where_the_cpu_could_run_the_kernel_it_loads():
    """The kernel's tests skip where it does not load: a build that broke (a missing symbol, say)
    must fail here, not skip them all."""
    if attention_kernel.bf16_products() is None or torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("no AVX-512 bf16 here: the kernel is never built")
    if not has_cpp_compiler():
        pytest.skip("no C++ compiler here")
    op, why = load_joined_attention()
    assert op is not None, why
