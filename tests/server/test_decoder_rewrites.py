"""decoder_rewrites: every zoo family's decoder computes the same after the rewrites; a gated MLP's
gate and up become views of one stacked weight; an MLP whose forward is anything else, and every
module that is not a rotary embedding, is left as it was."""
from __future__ import annotations

import copy

import pytest
import torch
import transformers

from server.decoder_rewrites import fuse_gate_up, realize_rotary_tables
from tests.server.test_model_zoo import ZOO, tiny_model

VOCAB = 64


def decoder_output(model, input_ids) -> torch.Tensor:
    with torch.no_grad():
        return model.get_decoder()(input_ids=input_ids, use_cache=False).last_hidden_state


@pytest.mark.parametrize("family", sorted(ZOO))
def test_every_family_computes_the_same_rewritten(family):
    model = tiny_model(family, VOCAB)
    rewritten = copy.deepcopy(model)
    realize_rotary_tables(rewritten.get_decoder())
    fuse_gate_up(rewritten.get_decoder())
    input_ids = torch.randint(VOCAB, (2, 11), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(decoder_output(rewritten, input_ids), decoder_output(model, input_ids),
                               rtol=1e-6, atol=1e-6)


def test_a_gated_mlp_reads_one_stacked_weight_with_no_copy_kept():
    model = tiny_model("llama", VOCAB)
    decoder = model.get_decoder()
    assert fuse_gate_up(decoder) == len(decoder.layers)
    assert realize_rotary_tables(decoder) == 1
    mlp = decoder.layers[0].mlp
    stacked = mlp._scoringfleet_gate_up
    rows = mlp.gate_proj.out_features
    assert stacked.shape == (2 * rows, mlp.gate_proj.in_features)
    assert mlp.gate_proj.weight.data_ptr() == stacked.data_ptr()
    assert mlp.up_proj.weight.data_ptr() == stacked[rows:].data_ptr()
    # idempotent: a second compile in the process rewrites nothing again
    assert fuse_gate_up(decoder) == len(decoder.layers) and realize_rotary_tables(decoder) == 1
    assert len(decoder.rotary_emb._forward_hooks) == 1


class UpGatedMLP(transformers.models.llama.modeling_llama.LlamaMLP):
    """A gated MLP with the roles swapped: act(up) * gate, not what fuse_gate_up computes."""

    def forward(self, x):
        return self.down_proj(self.act_fn(self.up_proj(x)) * self.gate_proj(x))


def test_an_mlp_computing_anything_else_keeps_its_forward():
    model = tiny_model("llama", VOCAB)
    decoder = model.get_decoder()
    for layer in decoder.layers:
        swapped = UpGatedMLP(model.config)
        swapped.load_state_dict(layer.mlp.state_dict())
        layer.mlp = swapped
    expected = decoder_output(model, torch.arange(9)[None])
    assert fuse_gate_up(decoder) == 0
    assert not hasattr(decoder.layers[0].mlp, "_scoringfleet_gate_up")
    torch.testing.assert_close(decoder_output(model, torch.arange(9)[None]), expected, rtol=0, atol=0)


def test_the_realized_tables_compile_into_a_graph_that_computes_the_same():
    model = tiny_model("llama", VOCAB)
    decoder = model.get_decoder()
    realize_rotary_tables(decoder)
    fuse_gate_up(decoder)
    input_ids = torch.randint(VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    expected = decoder_output(model, input_ids)
    torch._dynamo.reset()
    compiled = torch.compile(lambda ids: decoder(input_ids=ids, use_cache=False).last_hidden_state,
                             backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(input_ids), expected, rtol=1e-6, atol=1e-6)


class RoutedMLP(transformers.models.llama.modeling_llama.LlamaMLP):
    """Gate, up and down projections, but a forward that needs more than the hidden states."""

    def forward(self, x, routing_weights):
        return super().forward(x) * routing_weights


def test_an_mlp_whose_forward_takes_more_than_the_hidden_states_is_left_alone():
    mlp = RoutedMLP(tiny_model("llama", VOCAB).config)
    assert fuse_gate_up(mlp) == 0 and not hasattr(mlp, "_scoringfleet_gate_up")
