"""LoRA adapters in the decoder runner (server/lora.py, server/lora_rows.py): a batch mixing the base
model and two adapters, the same query under each, scores every row as a merged-weights
transformers forward through its own adapter (float32, within 1e-5), in both forward layouts, on a
tiny Llama and a tiny Qwen3 (sliding layers); the query cache never hands one adapter's query to
another; what the runner cannot apply exactly is refused with a reason."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

from bench.lora_models import save_adapter
from server.lora import load_adapter, load_adapters
from server.lora_rows import plan_rows
from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions
from tests.server.lora_support import merged_model, reference_scores

TOLERANCE = 1e-5
LABELS = ScoringOptions((5, 17, 42, 99), False)
SOFTMAX = ScoringOptions((5, 17, 42, 99), True)
QUERY = tuple(range(3, 33))  # 30 tokens
ITEMS = [(50, 51), (60,), (70, 71, 72, 73, 74, 75, 76, 77)]
ADAPTERS = ("sql", "chat")


def tiny_qwen3(vocab_size: int):
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                         tie_word_embeddings=False, initializer_range=0.2, use_sliding_window=True,
                         sliding_window=6, max_window_layers=2)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def family(request, tiny_model_dir, tmp_path_factory):
    """(base model, tokenizer, {adapter name: folder}) for a family."""
    model, tokenizer = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    if request.param == "qwen3":
        model = tiny_qwen3(len(tokenizer))
    folder = tmp_path_factory.mktemp(f"lora-{request.param}")
    adapters = {name: save_adapter(model, folder / name, seed) for seed, name in enumerate(ADAPTERS, start=1)}
    return model, tokenizer, adapters


def runner_of(family, **settings) -> ModelRunner:
    model, tokenizer, folders = family
    adapters = load_adapters({name: str(path) for name, path in folders.items()}, model)
    return ModelRunner(model, tokenizer, adapters=adapters, **settings)


def expected(family, request: Request) -> list[list[float]]:
    model, _, folders = family
    reference = merged_model(model, folders[request.adapter] if request.adapter else None)
    return [reference_scores(reference, [*request.prefix_ids, *seq.own_ids], request.options.label_token_ids,
                             request.options.apply_softmax) for seq in request.sequences]


def worst_error(family, runner: ModelRunner, requests: list[Request]) -> float:
    """Run every request's items in one batch; the largest distance from the merged forwards."""
    sequences = [seq for request in requests for seq in request.sequences]
    scores = runner.run(sequences).scores
    errors = []
    for seq, row in zip(sequences, scores):
        want = expected(family, seq.request)[seq.request.sequences.index(seq)]
        errors.append(max(abs(got - exp) for got, exp in zip(row, want)))
    return max(errors)


@pytest.mark.parametrize("cascade", [True, False], ids=["shared-prefix", "masked"])
def test_a_mixed_batch_scores_each_row_through_its_own_adapter(family, cascade):
    runner = runner_of(family)
    runner.use_cascade = cascade
    requests = [Request.create(QUERY, ITEMS, LABELS, adapter) for adapter in (None, *ADAPTERS)]
    requests.append(Request.create(QUERY[:9], ITEMS[:2], SOFTMAX, "chat"))
    assert worst_error(family, runner, requests) < TOLERANCE


def test_the_adapters_change_the_scores(family):
    """Otherwise the exactness above would hold for a runner that ignores them."""
    runner = runner_of(family)
    rows = [runner.run(Request.create(QUERY, ITEMS, SOFTMAX, adapter).sequences).scores
            for adapter in (None, *ADAPTERS)]
    for one, other in [(0, 1), (0, 2), (1, 2)]:
        assert max(abs(a - b) for x, y in zip(rows[one], rows[other]) for a, b in zip(x, y)) > 1e-3


def test_the_query_cache_never_gives_one_adapters_query_to_another(family):
    # each later request finds the same query (or a head of it) cached by an earlier one under
    # another adapter: taken, its scores would be that adapter's keys and values
    runner = runner_of(family, query_cache_tokens=1000)
    for adapter in (None, "sql", "chat", None):
        requests = [Request.create(QUERY, ITEMS, LABELS, adapter),
                    Request.create(QUERY + (7, 8), ITEMS, LABELS, adapter)]
        assert worst_error(family, runner, requests) < TOLERANCE
    assert runner.num_cached_prefixes == 6  # two queries under each of base, sql and chat


@pytest.mark.parametrize(("adapters", "plan"), [
    ([None, None], []),
    (["a", "a"], [("a", slice(0, 2))]),
    ([None, "a", "a", "b", None], [("a", slice(1, 3)), ("b", slice(3, 4))]),  # as the runner sorts them
    (["a", None, "a"], [("a", slice(0, 1)), ("a", slice(2, 3))]),  # unsorted: still right, a run each
], ids=["base-only", "one-adapter", "sorted", "unsorted"])
def test_plan_rows(adapters, plan):
    assert plan_rows(adapters) == plan


@pytest.fixture(scope="module")
def llama(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize(("settings", "says"), [
    ({"use_dora": True}, "DoRA"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"bias": "lora_only"}, "bias='lora_only'"),
    ({"target_modules": ["lm_head"]}, "lm_head"),  # peft saves its weight too: refused by either check
    ({"target_modules": ["embed_tokens"]}, "is not a LoRA A or B matrix"),
], ids=["dora", "modules-to-save", "bias", "lm-head", "embedding"])
def test_what_the_runner_cannot_apply_is_refused_with_why(llama, tmp_path, settings, says):
    folder = save_adapter(llama, tmp_path / "adapter", seed=1, **settings)
    with pytest.raises(ValueError, match=says):
        load_adapter("x", str(folder), llama)


def test_an_adapter_of_another_base_model_is_refused(llama, tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    folder = save_adapter(tiny_qwen3(len(tokenizer)), tmp_path / "qwen3-adapter", seed=1)
    with pytest.raises(ValueError, match=r"--lora-paths q=.*(do not fit|does not have).*another base model"):
        load_adapters({"q": str(folder)}, llama)


def test_a_folder_without_an_adapter_is_refused(llama, tmp_path):
    with pytest.raises(ValueError, match="has no adapter_config.json"):
        load_adapter("x", str(tmp_path), llama)
