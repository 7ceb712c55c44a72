"""One compiled graph for every decoder layer (regional compilation), in place of one graph over
the whole decoder: dynamo traces a layer's forward once, not once per layer, and inductor compiles
one layer's graph, which every layer then calls with its own weights. For the default model (30
layers, bf16, an AMD Zen 5 with 2 cores) a cold compile took 23 s in place of 55, and a warm start
traces for well under a second in place of ~9 s; a forward runs the same kernels, as fast
(docs/performance.md). The embeddings, the rotary tables and the final norm stay eager: a few
elementwise passes a forward.

A layer runs its compiled forward only inside `compiled_layers()` on the calling thread; anywhere
else (the query forwards, the shapes the graph does not cover, a forward that falls back) it runs
its own. One graph serves every layer only where every layer computes the same code on its own
weights: an attention layer's index reaches the graph as a tensor (`layer_index`), not as a
constant of each layer. compiled_forward.py compiles the whole decoder where that does not hold:
the masked layout indexes the batch cache by layer, and freezing folds one layer's weights into
the graph as constants.
"""
from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Iterator

import torch

LAYER_INDEX = "_scoringfleet_layer_index"  # on an attention module: its layer_idx as a 0-d tensor
COMPILED_FORWARD = "_scoringfleet_compiled_forward"  # on a decoder layer: its class's compiled forward

_thread = threading.local()  # .compiled: this thread's forwards run the layers' compiled forward


def layer_index(module: torch.nn.Module) -> torch.Tensor:
    """module.layer_idx as a 0-d CPU tensor kept on the module (made on first use): a graph input
    that each layer passes with its own value, where the int would be a constant of the graph."""
    index = getattr(module, LAYER_INDEX, None)
    if index is None:
        index = torch.tensor(module.layer_idx)
        setattr(module, LAYER_INDEX, index)
    return index


def decoder_layers(decoder: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The decoder's stack of layers (transformers' `layers`), or None where it has none."""
    layers = getattr(decoder, "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0 else None


def compile_layers(decoder: torch.nn.Module, **compile_options) -> int:
    """Give every layer of `decoder` its class's forward under torch.compile(**compile_options),
    one compiled function per layer class, run inside compiled_layers(); returns how many classes.
    The attention modules' indices are made here, before any trace reads them."""
    layers = decoder_layers(decoder)
    if layers is None:
        raise ValueError(f"{type(decoder).__name__} has no `layers` to compile one at a time")
    for module in decoder.modules():
        if isinstance(getattr(module, "layer_idx", None), int):
            layer_index(module)
    compiled: dict[type, object] = {}
    for layer in layers:
        kind = type(layer)
        if kind not in compiled:
            compiled[kind] = torch.compile(kind.forward, **compile_options)
        setattr(layer, COMPILED_FORWARD, compiled[kind])
        layer.forward = types.MethodType(_either_forward, layer)
    return len(compiled)


def restore_layers(decoder: torch.nn.Module) -> None:
    """Undo compile_layers(): every layer runs its class's forward again."""
    for layer in decoder_layers(decoder) or ():
        layer.__dict__.pop("forward", None)
        layer.__dict__.pop(COMPILED_FORWARD, None)


def _either_forward(self, *args, **kwargs):
    if getattr(_thread, "compiled", False):
        return getattr(self, COMPILED_FORWARD)(self, *args, **kwargs)
    return type(self).forward(self, *args, **kwargs)


@contextlib.contextmanager
def compiled_layers() -> Iterator[None]:
    """The forwards this thread runs in this block take the layers' compiled forward."""
    before = getattr(_thread, "compiled", False)
    _thread.compiled = True
    try:
        yield
    finally:
        _thread.compiled = before
