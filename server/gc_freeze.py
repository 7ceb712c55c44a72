"""freeze_gc(): what SGLang's POST /freeze_gc does in each of its processes (gc.freeze()).

Moves every object alive now (the model's modules, the tokenizer, everything imports made: hundreds
of thousands) into the collector's permanent generation, so that its full collections stop walking
them; SGLang measured 100-300 ms gen2 pauses without it. Meant for after a warm-up, when what is
alive is what lives for good. Owns nothing; logs the generations' sizes before and after.
"""
from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def generation_sizes() -> tuple[int, int, int]:
    """Objects the collector tracks in each of its three generations."""
    return tuple(len(gc.get_objects(generation=i)) for i in range(3))  # type: ignore[return-value]


def freeze_gc(context: str) -> int:
    """gc.freeze(); returns the objects now frozen (gc.get_freeze_count())."""
    before = generation_sizes()
    gc.freeze()
    after = generation_sizes()
    frozen = gc.get_freeze_count()
    log.info("froze the garbage collector (%s): gen0 %d->%d, gen1 %d->%d, gen2 %d->%d; %d objects "
             "frozen", context, before[0], after[0], before[1], after[1], before[2], after[2], frozen)
    return frozen
