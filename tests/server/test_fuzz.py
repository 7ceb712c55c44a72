"""Hostile input: schemathesis generates requests from the server's own OpenAPI schema.
No input may produce a 5xx, and every response must conform to the schema.

Cases come from each operation's hypothesis strategy (the schemathesis pytest plugin does not
support pytest 9 yet).
"""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from bench.classifier_models import build_classifier
from bench.server_process import free_port
from server.__main__ import build_reranker, build_runner
from server.engine import Engine
from server.rerank import Reranker
from server.rerank_templates import parse_template
from tests.kit.runners import FakeRunner
from tests.kit.servers import cpu_config, live_server


@pytest.fixture(scope="module")
def base_url():
    config = cpu_config(port=free_port(), max_items_per_request=64, max_queued_requests=4096)
    runner = FakeRunner()
    template = parse_template({"query": "{query}", "document": "{document}", "yes": "y", "no": "n"}, "fuzz")
    with live_server(config, Engine(config, runner), Reranker.create(template, runner.tokenize)) as url:
        yield url


@pytest.fixture(scope="module")
def api_schema(base_url):
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


@pytest.fixture(scope="module")
def classifier_url(tmp_path_factory):
    """A tiny random BERT cross-encoder on the real loader and runner (the classifier routes)."""
    folder = build_classifier(tmp_path_factory.mktemp("fuzz-bert"), "bert")
    config = cpu_config(model_path=str(folder), port=free_port(), max_items_per_request=16)
    runner = build_runner(config)
    with live_server(config, Engine(config, runner), build_reranker(config, runner)) as url:
        yield url


@pytest.mark.parametrize("path, method", [
    ("/v1/score", "POST"), ("/v1/rerank", "POST"), ("/v2/rerank", "POST"), ("/rerank", "POST"),
    ("/score", "POST"), ("/classify", "POST"), ("/get_load", "GET"),
    ("/metrics", "GET"), ("/health", "GET"),
    ("/health_generate", "GET"), ("/v1/models", "GET"), ("/get_server_info", "GET"),
    ("/freeze_gc", "POST"), ("/freeze_gc", "GET"),
])
def test_no_input_is_a_server_error_and_responses_match_the_schema(api_schema, base_url, path, method):
    operation = api_schema[path][method]

    @given(case=operation.as_strategy())
    @settings(max_examples=60 if method == "POST" else 5, deadline=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        # Schema-valid bodies may still be 400: the vocabulary, the context length and "not both
        # empty" are facts of the loaded model the static schema cannot carry (test_inputs.py
        # covers each such 400). Everything else is checked, not_a_server_error first.
        case.call_and_validate(base_url=base_url,
                               excluded_checks=[checks.positive_data_acceptance])

    check()


@pytest.mark.parametrize("path", ["/v1/score", "/score", "/rerank", "/classify", "/v1/classify", "/v1/rerank",
                                  "/v2/rerank"])
def test_no_input_to_a_classifier_is_a_server_error(classifier_url, path):
    operation = schemathesis.openapi.from_url(f"{classifier_url}/openapi.json")[path]["POST"]

    @given(case=operation.as_strategy())
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case):
        case.call_and_validate(base_url=classifier_url, excluded_checks=[checks.positive_data_acceptance])

    check()
