"""layer_compile: one compiled forward per decoder layer class, taken only inside
compiled_layers(), with each attention layer's index as a tensor (so one graph serves every layer).
Dynamo's own frame counter stands in for inductor: what is checked is what gets traced and when."""
from __future__ import annotations

import threading

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from server.layer_compile import (
    COMPILED_FORWARD,
    compile_layers,
    compiled_layers,
    decoder_layers,
    layer_index,
    restore_layers,
)


class Attention(torch.nn.Module):
    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.proj = torch.nn.Linear(4, 4)


class Layer(torch.nn.Module):
    """Computes with its index, as the cascade attention op reads its layer's prefix."""

    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = Attention(layer_idx)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.self_attn.proj(hidden) * (layer_index(self.self_attn) + 1)


class Decoder(torch.nn.Module):
    def __init__(self, num_layers: int = 3) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(index) for index in range(num_layers))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_one_graph_serves_every_layer_with_its_own_weights_and_index():
    torch.manual_seed(0)
    decoder, hidden, counter = Decoder(), torch.randn(2, 5, 4), CompileCounter()
    expected = decoder(hidden)
    assert compile_layers(decoder, backend=counter, dynamic=True) == 1
    with compiled_layers(), torch.no_grad():  # as the runner's forwards run
        got = decoder(hidden)
    assert counter.frame_count == 1  # traced once; an int index would have taken one trace per layer
    torch.testing.assert_close(got, expected)


def test_layers_run_their_own_forward_outside_compiled_layers():
    decoder, counter = Decoder(), CompileCounter()
    compile_layers(decoder, backend=counter)
    decoder(torch.randn(2, 5, 4))
    assert counter.frame_count == 0
    seen = []
    thread = threading.Thread(target=lambda: seen.append(decoder(torch.randn(2, 5, 4))))
    with compiled_layers():  # this thread's forwards only
        thread.start()
        thread.join()
    assert counter.frame_count == 0 and len(seen) == 1


def test_restore_layers_undoes_the_compile():
    decoder, counter = Decoder(), CompileCounter()
    compile_layers(decoder, backend=counter)
    restore_layers(decoder)
    with compiled_layers():
        decoder(torch.randn(2, 5, 4))
    assert counter.frame_count == 0
    assert all("forward" not in vars(layer) and COMPILED_FORWARD not in vars(layer) for layer in decoder.layers)


def test_layer_index_is_made_once_per_module():
    attention = Attention(7)
    index = layer_index(attention)
    assert index.dim() == 0 and int(index) == 7 and layer_index(attention) is index


def test_a_decoder_without_layers_is_refused():
    assert decoder_layers(torch.nn.Linear(2, 2)) is None
    with pytest.raises(ValueError, match="no `layers`"):
        compile_layers(torch.nn.Linear(2, 2))
