"""The items forward, eager or compiled (`--compile`): one torch.compile graph over dynamic shapes,
warmed before the server is ready, so that no request ever waits on a compile.

What compiling buys is fusion: a prefill's elementwise work (RMSNorm, rotary, SiLU * up, residual
adds) costs, in a fast dtype, about what its matmuls do, and inductor fuses it into a few loops.
The graph is compiled once with symbolic rows, own length and prefix slots, so the batch shapes a
server sees need no bucket table: `compilable()` keeps to the shapes that one graph covers (each of
the three at least 2, since torch specializes sizes 0 and 1), and everything else runs eager.
After the warm-up a compile never happens again: calls run under torch's `fail_on_recompile`
stance, and a shape whose guards would still fail runs eager (counted in `num_eager_fallbacks`).
The query (prefix) forwards stay eager: one row of a few hundred tokens, a few % of the time.
"""
from __future__ import annotations

import logging
import time

import torch

log = logging.getLogger(__name__)

MIN_COMPILED_SIZE = 2  # torch specializes sizes 0 and 1: such shapes would need graphs of their own
# Distinct sizes for the warm-up (rows, own tokens, prefix slots), none 0 or 1 and none equal.
WARM_UP_SHAPES = ((3, 7, 5), (4, 11, 6))


def compilable(rows: int, own_tokens: int, prefix_slots: int) -> bool:
    """True if the compiled graph covers a forward of this shape."""
    return min(rows, own_tokens, prefix_slots) >= MIN_COMPILED_SIZE


class ItemsForward:
    """decoder(items, masks, positions, prefix keys/values) -> last hidden states [rows, own, hidden],
    eager, or compiled once `compile()` has run."""

    def __init__(self, decoder) -> None:
        self._decoder = decoder
        self._compiled = None
        self._warm = False  # until the warm-up is over, compiling is what a call is for
        self.num_eager_fallbacks = 0

    @property
    def is_compiled(self) -> bool:
        return self._compiled is not None

    def __call__(self, input_ids, masks, positions, layers) -> torch.Tensor:
        if self._compiled is None or not compilable(input_ids.shape[0], input_ids.shape[1],
                                                     layers[0][0].shape[2] if layers else 0):
            return _forward(self._decoder, input_ids, masks, positions, layers)
        if not self._warm:
            return self._compiled(self._decoder, input_ids, masks, positions, layers)
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                return self._compiled(self._decoder, input_ids, masks, positions, layers)
        except RuntimeError as error:
            if "fail_on_recompile" not in str(error):
                raise
            self.num_eager_fallbacks += 1
            log.warning("compiled forward refused a shape %s (would recompile); eager instead",
                        tuple(input_ids.shape))
            return _forward(self._decoder, input_ids, masks, positions, layers)

    def cascade(self, input_ids, positions, implementation: str, **attention_kwargs) -> torch.Tensor:
        """The same forward, own tokens only (no mask, no cache), through a registered attention
        `implementation` that reads the prefix from `attention_kwargs` (cascade_attention.py)."""
        config = self._decoder.config
        previous = config._attn_implementation
        config._attn_implementation = implementation  # read by every attention layer, this call only
        try:
            return self._decoder(input_ids=input_ids, position_ids=positions, use_cache=False,
                                 **attention_kwargs).last_hidden_state
        finally:
            config._attn_implementation = previous

    def compile(self, warm_up) -> float:
        """Compile the graph on the first of WARM_UP_SHAPES, then check the others run without a
        compile; `warm_up(rows, own_tokens, prefix_slots)` runs a forward of that shape through
        this object. Returns the seconds it took."""
        # NOTE: without duck shaping, two sizes that happen to be equal in the warm-up (rows and
        # the key/value heads, say) do not become one symbol that a later shape would break.
        torch.fx.experimental._config.use_duck_shape = False
        start = time.perf_counter()
        self._compiled = torch.compile(_forward, dynamic=True)
        first, *others = WARM_UP_SHAPES
        warm_up(*first)  # compiles
        self._warm = True
        for shape in others:  # must not compile again: a fallback here is logged below
            warm_up(*shape)
        elapsed = time.perf_counter() - start
        log.info("compiled the items forward in %.1f s (%d eager fallbacks in the warm-up)",
                 elapsed, self.num_eager_fallbacks)
        return elapsed


def _forward(decoder, input_ids, masks, positions, layers) -> torch.Tensor:
    from transformers import DynamicCache

    cache = DynamicCache(ddp_cache_data=layers) if layers else None
    out = decoder(input_ids=input_ids, attention_mask=masks, position_ids=positions, cache=cache,
                  use_cache=bool(layers))
    return out.last_hidden_state
