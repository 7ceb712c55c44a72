"""Sequence classifiers on the runners: tiny random cross-encoders (BERT, XLM-RoBERTa) and
decoders with a last-token head (Qwen3, Qwen2, Llama, Mistral, Gemma), loaded as the server loads
them, each (query, document) pair scored as the server batches it (several requests in one batch,
padded), against a plain transformers forward of the tokenizer's own pair encoding: float32,
within 1e-5, after the checkpoint's activation (one label: sigmoid)."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from bench.classifier_models import DECODERS, ENCODERS, build_classifier
from server.__main__ import build_reranker, build_runner
from server.classifier import Classifier
from server.config import ServerConfig
from server.encoder_runner import EncoderRunner
from server.inputs import InputLimits, prepare
from server.model_loader import ModelLoadError, load_model
from server.model_runner import ModelRunner
from server.sequence import Request

TOLERANCE = 1e-5
QUERY = "What is the capital of California?"
OTHER_QUERY = "Is this a fruit? Answer:"
DOCUMENTS = ["Sacramento", "San Jose San Francisco Los Angeles Yes No apple banana fruit car red fast",
             "The quick brown fox", "apple"]


@pytest.fixture(scope="module", params=ENCODERS + DECODERS)
def served(request, tmp_path_factory):
    folder = build_classifier(tmp_path_factory.mktemp(request.param), request.param)
    config = ServerConfig(model_path=str(folder)).resolve("cpu", "float32")
    runner = build_runner(config)
    return request.param, folder, runner, build_reranker(config, runner)


@torch.inference_mode()
def reference(folder, runner, query: str, document: str, raw: bool = False) -> float:
    """transformers alone: the tokenizer's pair encoding, model(**inputs).logits, the activation."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    logits = runner.model(**tokenizer(query, document, return_tensors="pt")).logits[0].float()
    return logits[0].item() if raw else torch.sigmoid(logits)[0].item()


def score_pairs(runner, classifier: Classifier, queries: list[str], raw: bool = False) -> list[list[float]]:
    """Every query against DOCUMENTS, one request each, all in one batch."""
    limits = InputLimits(runner.vocab_size, runner.max_context_tokens, 4096, 64)
    requests = []
    for query in queries:
        body = classifier.pair_request(query, DOCUMENTS, runner.tokenize, limits, raw=raw)
        prepared = prepare(body, runner.tokenize, limits)
        requests.append(Request.create(prepared.prefix_ids, prepared.own_ids, prepared.options))
    scores = runner.run([seq for request in requests for seq in request.sequences]).scores
    return [[row[0] for row in scores[k * len(DOCUMENTS):(k + 1) * len(DOCUMENTS)]] for k in range(len(queries))]


def test_the_runner_fits_the_family(served):
    family, _, runner, classifier = served
    assert isinstance(runner, EncoderRunner if family in ENCODERS else ModelRunner)
    assert isinstance(classifier, Classifier) and classifier.is_reranker
    assert classifier.activation == "sigmoid" and classifier.labels == ("LABEL_0",)


def test_pairs_score_as_transformers_does(served):
    _, folder, runner, classifier = served
    served_scores = score_pairs(runner, classifier, [QUERY, OTHER_QUERY])
    for query, row in zip([QUERY, OTHER_QUERY], served_scores):
        expected = [reference(folder, runner, query, document) for document in DOCUMENTS]
        assert row == pytest.approx(expected, abs=TOLERANCE)
    assert len({round(score, 4) for score in served_scores[0]}) > 1  # the documents differ


def test_raw_scores_are_the_logits(served):
    _, folder, runner, classifier = served
    (row,) = score_pairs(runner, classifier, [QUERY], raw=True)
    assert row == pytest.approx([reference(folder, runner, QUERY, d, raw=True) for d in DOCUMENTS], abs=TOLERANCE)


def test_a_decoder_classifier_computes_the_query_once(served):
    family, _, runner, classifier = served
    if family in ENCODERS:
        pytest.skip("an encoder's query sees the document: nothing to share")
    score_pairs(runner, classifier, [QUERY])  # now cached
    assert runner.num_cached_prefixes >= 1


def test_an_encoder_without_a_classification_head_is_refused(tmp_path):
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="only as a cross-encoder"):
        load_model(str(tmp_path), torch.device("cpu"), torch.float32)


def test_a_classifier_of_an_unserved_family_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    GPT2ForSequenceClassification(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2)).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="sequence classification is served for"):
        load_model(str(tmp_path), torch.device("cpu"), torch.float32)
