"""The items forward, eager or compiled (`--compile`): torch.compile graphs over dynamic shapes,
warmed before the server is ready, so that no request ever waits on a compile.

Two layouts (the runner picks per forward, model_runner.py): the shared-prefix attention
(`cascade`: own tokens only; each layer's attention an opaque op that reads the prefixes from
cascade_attention.prefix_segments(), so the graph never sees a prefix length or a segment), and the
masked layout (`__call__`: a padded batch cache and additive masks). `compile()` compiles the one
the runner's traffic takes; a forward of the other layout runs eager.

What compiling buys is fusion: a prefill's elementwise work (RMSNorm, rotary, SiLU * up, residual
adds) costs, in a fast dtype, about what its matmuls do, and inductor fuses it into a few loops;
with `freeze`, inductor's freezing also folds the weights into the graph as constants (prepacked for
the CPU's matmul library). Before compiling, the decoder is rewritten where a graph runs it faster
(decoder_rewrites.py: the rotary tables computed once a forward, a gated MLP's gate and up as one
matmul). In the cascade layout the graph is one decoder layer's, which every layer calls with its
own weights (layer_compile.py: a cold compile 2.4x faster, a warm start without seconds of tracing);
the masked layout and a frozen compile take the whole decoder as one graph (`graph_scope`).
The graph is compiled once with symbolic sizes, so the batch shapes a server sees need no
bucket table: `compilable()` keeps to the shapes that one graph covers (each size at least 2,
since torch specializes sizes 0 and 1), and everything else runs eager. After the
warm-up a compile never happens again: calls run under torch's `fail_on_recompile` stance, and a
shape whose guards would still fail runs eager (counted in `num_eager_fallbacks`). The query
(prefix) forwards stay eager: one row of a few hundred tokens, a few % of the time.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from server.attention_kernel import load_joined_attention
from server.cascade_attention import NAME as CASCADE_ATTENTION, PrefixSegments, prefix_segments
from server.decoder_rewrites import fuse_gate_up, realize_rotary_tables
from server.layer_compile import compile_layers, compiled_layers, decoder_layers, restore_layers

log = logging.getLogger(__name__)

CASCADE, MASKED = "cascade", "masked"  # the two layouts of an items forward
# What compile() does to the decoder first (decoder_rewrites.py); part of the compile cache's key.
DECODER_REWRITES = ("rotary tables realized", "gate and up fused")
# How compile() sets torch's tracing (_configure_tracing); part of the compile cache's key too.
TRACING_SETTINGS = ("no duck shapes", "float attributes specialized")
ONE_LAYER, WHOLE_DECODER = "one graph per decoder layer class", "one graph of the whole decoder"  # graph_scope()
MIN_COMPILED_SIZE = 2  # torch specializes sizes 0 and 1: such shapes would need graphs of their own
# Distinct sizes for the warm-up (rows, own tokens, prefix slots), none 0 or 1 and none equal.
WARM_UP_SHAPES = ((3, 7, 5), (4, 11, 6))
# Each shape with its rows under one query and under two: the masked layout's batch cache is one
# query's tensors expanded (stride 0 over the rows) or a tensor filled per row, and dynamo guards
# on that stride, so each needs its graph (without the second, every batch of two requests or more
# ran eager).
WARM_UP_QUERIES = (1, 2)


# Compiling does not freeze the weights by default. Freezing folds them into the graph, prepacked
# for oneDNN on CPU, but prepacked constants cannot be pickled, so inductor's FX graph cache
# bypasses a frozen graph and every start compiles it again (warm compile cache: 78 s against 29 s
# unfrozen, the default model in bf16 on AMX). The unfrozen graph measured as fast there (15.5 vs
# 14.9 items/s: aten::mm as fast as the prepacked linear); freezing buys +12 % only in float32 on
# AVX2 (`compile(freeze=True)`), and on a GPU it would hold the weights twice, out of the KV budget.
FREEZE_WEIGHTS = False


def compile_settings(layout: str, freeze: bool, decoder) -> dict[str, object]:
    """What a compile of `decoder` in `layout` builds, beyond the model: part of the compile cache's key."""
    return {"layout": layout, "freeze": freeze, "graph": graph_scope(layout, freeze, decoder),
            "warm_up": (WARM_UP_SHAPES, WARM_UP_QUERIES), "rewrites": DECODER_REWRITES, "tracing": TRACING_SETTINGS}


def compile_cache_counts() -> tuple[int, int]:
    """(graphs taken from inductor's on-disk caches, graphs compiled) in this process so far, as
    torch's AOT autograd cache counts them (it holds inductor's FX graph cache's entries)."""
    from torch._dynamo.utils import counters

    return counters["aot_autograd"]["autograd_cache_hit"], counters["aot_autograd"]["autograd_cache_miss"]


def compilable(rows: int, own_tokens: int, prefix_slots: int) -> bool:
    """True if the compiled graph covers a forward of this shape."""
    return min(rows, own_tokens, prefix_slots) >= MIN_COMPILED_SIZE


class ItemsForward:
    """decoder(items, ...) -> last hidden states [rows, own, hidden] in either layout, eager, or
    compiled in one layout once `compile()` has run."""

    def __init__(self, decoder) -> None:
        self._decoder = decoder
        self._layout: str | None = None  # the compiled one
        self._compiled: Callable | None = None
        self._warm = False  # until the warm-up is over, compiling is what a call is for
        self.num_eager_fallbacks = 0
        self.joined_kernel: Callable | None = None  # the cascade's joined attention, where ours runs
        self._attention_why = "our kernel not loaded"  # what use_joined_attention() found

    @property
    def is_compiled(self) -> bool:
        return self._compiled is not None

    @property
    def compiled_layout(self) -> str | None:
        return self._layout

    def __call__(self, input_ids, masks, positions, layers) -> torch.Tensor:
        """The masked layout: the rows' prefixes in the batch cache `layers`, hidden by `masks`."""
        covered = compilable(input_ids.shape[0], input_ids.shape[1], layers[0][0].shape[2] if layers else 0)
        return self._run(MASKED, covered, _forward, self._decoder, input_ids, masks, positions, layers)

    def cascade(self, input_ids, positions, segments: PrefixSegments) -> torch.Tensor:
        """The same forward, own tokens only (no mask, no cache), through the shared-prefix
        attention (registered by cascade_attention.register()), which reads `segments`."""
        covered = compilable(input_ids.shape[0], input_ids.shape[1], MIN_COMPILED_SIZE)
        with prefix_segments(segments, self.joined_kernel), _attention(self._decoder.config, CASCADE_ATTENTION):
            return self._run(CASCADE, covered, _cascade_forward, self._decoder, input_ids, positions)

    def _run(self, layout: str, covered: bool, eager: Callable, *args) -> torch.Tensor:
        if self._compiled is None or layout != self._layout or not covered:
            return eager(*args)
        if not self._warm:
            return self._compiled(*args)
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                return self._compiled(*args)
        except RuntimeError as error:
            if "fail_on_recompile" not in str(error):
                raise
            self.num_eager_fallbacks += 1
            log.warning("compiled forward refused a shape %s (would recompile); eager instead",
                        tuple(args[1].shape))
            return eager(*args)

    def compile(self, warm_up: Callable[[int, int, int, int], None], layout: str, freeze: bool = False) -> float:
        """Compile the graph of `layout` on the first of WARM_UP_SHAPES, then check the others run
        without a compile; `warm_up(rows, own_tokens, prefix_slots, num_queries)` runs a forward
        of that shape, its rows split among that many queries, in that layout through this object.
        Returns the seconds it took."""
        _configure_tracing()
        # NOTE: dynamo keeps compiled code per function, not per torch.compile call: a second
        # runner compiled in this process (tests, benchmarks) would reuse the first's graph and
        # its settings (freezing). A server compiles once; a clean slate costs it nothing.
        torch._dynamo.reset()
        cached_before = compile_cache_counts()
        start = time.perf_counter()
        self._layout, scope = layout, graph_scope(layout, freeze, self._decoder)
        first, *others = WARM_UP_SHAPES
        try:
            rotary, fused = realize_rotary_tables(self._decoder), fuse_gate_up(self._decoder)
            log.info("decoder rewritten for the compile: %d rotary modules' tables realized, %d MLPs' gate "
                     "and up fused", rotary, fused)
            self._compiled = self._compile_graph(layout, scope)
            self.use_joined_attention()
            with torch._inductor.config.patch(freezing=freeze):  # read when a call compiles
                for num_queries in WARM_UP_QUERIES:
                    warm_up(*first, num_queries)
        except BaseException:
            self._layout = self._compiled = None  # eager, as before: no compile under traffic
            restore_layers(self._decoder)
            raise
        self._warm = True
        for shape in others:  # must not compile again: a fallback here is logged below
            for num_queries in WARM_UP_QUERIES:
                warm_up(*shape, num_queries)
        elapsed = time.perf_counter() - start
        hits, misses = (now - before for now, before in zip(compile_cache_counts(), cached_before))
        log.info("compiled the items forward (%s layout, %s%s) in %.1f s; graphs: %d from the compile cache, %d "
                 "compiled (%d eager fallbacks in the warm-up)", layout, scope,
                 ", weights frozen" if freeze else "", elapsed, hits, misses, self.num_eager_fallbacks)
        return elapsed

    def _compile_graph(self, layout: str, scope: str) -> Callable:
        """The compiled forward of `layout`: its decoder's layers compiled one at a time where one
        graph serves every layer (`scope`, layer_compile.py), else the whole decoder as one graph."""
        restore_layers(self._decoder)
        if scope == WHOLE_DECODER:
            return torch.compile(_cascade_forward if layout == CASCADE else _forward, dynamic=True)
        compile_layers(self._decoder, dynamic=True)
        return _with_compiled_layers(_cascade_forward)

    def use_joined_attention(self, folder: Path | None = None) -> None:
        """Every forward, eager or compiled, takes our joined attention where the decoder runs in
        bfloat16 on CPU and the kernel loads (attention_kernel.py; its library built in `folder`,
        None: beside inductor's kernels), else torch's flash kernel; the log says which and why.
        compile() calls it; an eager server calls it at start."""
        weight = next(self._decoder.parameters(), None)
        if weight is None or weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
            self.joined_kernel, self._attention_why = None, "our kernel computes bfloat16 on CPU only"
            return
        self.joined_kernel, self._attention_why = load_joined_attention(folder)
        log.info("joined attention: %s (%s)", "ours" if self.joined_kernel is not None else "torch's flash kernel",
                 self._attention_why)

    @property
    def attention(self) -> tuple[str, str]:
        """/get_server_info's attention_backend ("scoringfleet": ours, else "torch") and why."""
        return ("scoringfleet" if self.joined_kernel is not None else "torch"), self._attention_why


def graph_scope(layout: str, freeze: bool, decoder) -> str:
    """What one compiled graph covers: a decoder layer (every layer calls it) in the cascade
    layout, unless frozen, whose constants would be one layer's weights; else the whole decoder
    (the masked layout's batch cache is indexed by layer, a constant of each layer's code)."""
    one_layer = layout == CASCADE and not freeze and decoder_layers(decoder) is not None
    return ONE_LAYER if one_layer else WHOLE_DECODER


def _with_compiled_layers(forward: Callable) -> Callable:
    def run(*args) -> torch.Tensor:
        with compiled_layers():
            return forward(*args)
    return run


def _configure_tracing() -> None:
    """TRACING_SETTINGS, process-wide (read whenever dynamo traces)."""
    # NOTE: without duck shaping, two sizes that happen to be equal in the warm-up (rows and
    # the key/value heads, say) do not become one symbol that a later shape would break.
    torch.fx.experimental._config.use_duck_shape = False
    # NOTE: the model's float attributes (RMSNorm's epsilon, the attention's scale, the rotary
    # scaling) are constants of a model, not inputs. Traced as symbols, they reach the attention
    # op's float argument, where inductor cannot turn them into tensors: dynamo then threw the
    # whole trace away and traced again with them fixed (a warm start compiled for 33 s, 24 of
    # them the discarded attempt; 9 s with them fixed from the start).
    torch._dynamo.config.specialize_float = True


@contextlib.contextmanager
def _attention(config, implementation: str) -> Iterator[None]:
    """Every attention layer reads config._attn_implementation: switched for one call only."""
    previous = config._attn_implementation
    config._attn_implementation = implementation
    try:
        yield
    finally:
        config._attn_implementation = previous


def _forward(decoder, input_ids, masks, positions, layers) -> torch.Tensor:
    from transformers import DynamicCache

    cache = DynamicCache(ddp_cache_data=layers) if layers else None
    out = decoder(input_ids=input_ids, attention_mask=masks, position_ids=positions, cache=cache,
                  use_cache=bool(layers))
    return out.last_hidden_state


def _cascade_forward(decoder, input_ids, positions) -> torch.Tensor:
    return decoder(input_ids=input_ids, position_ids=positions, use_cache=False).last_hidden_state
