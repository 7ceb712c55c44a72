"""The HTTP contract of the scoring server (SGLang-compatible /v1/score, /get_load, /metrics), through real HTTP.

Scores and tokenization come from a tiny random Llama served once per module (real tokenizer, real
ModelRunner); the failure paths (queue full, timeout, failing forward, disconnect) use a FakeRunner
whose `gate` holds the forward so the test can look at the server mid-batch. Never a mock: each
test talks to a live uvicorn on 127.0.0.1.
"""
from __future__ import annotations

import concurrent.futures
import json
import math
import threading
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.server_process import free_port
from scoringfleet_contract.facts import error_body
from server.__main__ import build_engine, resolve_config
from server.config import ServerConfig
from tests.kit.runners import FakeRunner
from tests.kit.servers import live_server, serving
from tests.kit.waiting import wait_for

LABELS = [5, 17]
QUERY = "What is the capital of California? Answer Yes or No for each of the following options:"
ITEMS = ["Sacramento", "San Jose", "San Francisco"]
MAX_ITEMS = 8


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The tiny model behind a live server, plus its own tokenizer for independent checks."""
    from transformers import AutoTokenizer

    config = resolve_config(ServerConfig(model_path=str(tiny_model_dir), dtype="float32",
                                         served_model_name=("tiny-llama", "my-scorer"),
                                         port=free_port(), max_items_per_request=MAX_ITEMS,
                                         request_timeout_s=10))
    engine = build_engine(config)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with live_server(config, engine) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield SimpleNamespace(client=client, config=config, engine=engine,
                              ids=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"])


def score(client: httpx.Client, **body) -> httpx.Response:
    return client.post("/v1/score", json=body)


def ok_scores(client: httpx.Client, **body) -> list[list[float]]:
    response = score(client, **body)
    assert response.status_code == 200, response.text
    return response.json()["scores"]


def assert_close(rows: list[list[float]], expected: list[list[float]], tol: float = 1e-5) -> None:
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        assert row == pytest.approx(want, abs=tol)


# -- /v1/score: answers ----------------------------------------------------------------------

def test_text_request_answers_one_row_per_item_in_the_contract_shape(tiny):
    response = score(tiny.client, query=QUERY, items=ITEMS, label_token_ids=LABELS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"scores", "model", "usage", "object"}
    assert body["object"] == "scoring"
    assert body["model"] == tiny.config.model_name
    assert [len(row) for row in body["scores"]] == [2, 2, 2]
    assert all(0 < p < 1 for row in body["scores"] for p in row)
    # Query and each item are tokenized separately and joined (contract), so the count is the sum.
    num_tokens = sum(len(tiny.ids(QUERY)) + len(tiny.ids(item)) for item in ITEMS)
    assert body["usage"] == {"prompt_tokens": num_tokens, "completion_tokens": 0,
                             "total_tokens": num_tokens}


def test_model_field_is_echoed(tiny):
    response = score(tiny.client, query=QUERY, items=ITEMS[:1], label_token_ids=LABELS,
                     model="my-scorer")  # the second served name: the base model, echoed as asked
    assert response.json()["model"] == "my-scorer"


def test_a_model_not_served_is_a_404_naming_the_served_names(tiny):
    response = score(tiny.client, query=QUERY, items=ITEMS[:1], label_token_ids=LABELS, model="other")
    assert response.status_code == 404
    assert response.json() == error_body(404, "model 'other' is not served here; served: 'tiny-llama', "
                                              "'my-scorer' (no LoRA adapters)")


def test_token_id_inputs_score_like_the_separately_tokenized_text(tiny):
    by_text = ok_scores(tiny.client, query=QUERY, items=ITEMS, label_token_ids=LABELS)
    by_ids = ok_scores(tiny.client, query=tiny.ids(QUERY), items=[tiny.ids(i) for i in ITEMS],
                       label_token_ids=LABELS)
    assert_close(by_ids, by_text, tol=1e-6)


def test_apply_softmax_rows_sum_to_one_and_renormalize_the_vocabulary_probabilities(tiny):
    full = ok_scores(tiny.client, query=QUERY, items=ITEMS, label_token_ids=LABELS)
    soft = ok_scores(tiny.client, query=QUERY, items=ITEMS, label_token_ids=LABELS,
                     apply_softmax=True)
    assert all(math.isclose(sum(row), 1.0, abs_tol=1e-5) for row in soft)
    assert all(sum(row) < 1 for row in full)  # full vocabulary: the labels hold only part of it
    assert_close(soft, [[p / sum(row) for p in row] for row in full])


def test_item_first_scores_the_item_followed_by_the_query(tiny):
    query, items = tiny.ids(QUERY), [tiny.ids(i) for i in ITEMS]
    flipped = ok_scores(tiny.client, query=query, items=items, label_token_ids=LABELS,
                        item_first=True)
    # Each row must equal a plain request whose query is the item and whose item is the query.
    expected = [ok_scores(tiny.client, query=item, items=[query], label_token_ids=LABELS)[0]
                for item in items]
    assert_close(flipped, expected)
    assert flipped != ok_scores(tiny.client, query=query, items=items, label_token_ids=LABELS)


def test_no_items_give_no_scores(tiny):
    body = score(tiny.client, query=QUERY, items=[], label_token_ids=LABELS).json()
    assert body["scores"] == [] and body["usage"]["prompt_tokens"] == 0


def test_a_single_string_item_is_one_item(tiny):
    single = ok_scores(tiny.client, query=QUERY, items="Sacramento", label_token_ids=LABELS)
    listed = ok_scores(tiny.client, query=QUERY, items=["Sacramento"], label_token_ids=LABELS)
    assert len(single) == 1
    assert_close(single, listed, tol=1e-6)


# -- /v1/score: every bad input is a 400 that says what is wrong ------------------------------

def _json(**body) -> bytes:
    return json.dumps(body).encode()


def _ok(**change) -> bytes:
    """A valid request with some fields changed (None removes the field)."""
    body = {"query": [1, 2, 3], "items": [[4], [5, 6]], "label_token_ids": [1, 2]}
    body.update(change)
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


# (raw body, a word the message must contain)
BAD_INPUTS = {
    "mixed-text-query-token-items": (_ok(query="a question"), "same kind"),
    "mixed-token-query-text-items": (_ok(items=["an item"]), "same kind"),
    "mixed-items": (_ok(items=["an item", [4]]), "items"),
    "missing-query": (_ok(query=None), "query"),
    "missing-items": (_ok(items=None), "items"),
    "missing-label-ids": (_ok(label_token_ids=None), "label_token_ids"),
    "empty-label-ids": (_ok(label_token_ids=[]), "label_token_ids"),
    "negative-label-id": (_ok(label_token_ids=[1, -2]), "label_token_ids"),
    "duplicate-label-ids": (_ok(label_token_ids=[3, 3]), "label_token_ids"),
    "label-id-out-of-vocab": (_ok(label_token_ids=[1, 100_000]), "vocabulary"),
    "label-id-huge": (_ok(label_token_ids=[2 ** 70]), "vocabulary"),
    "label-id-float": (_ok(label_token_ids=[1.5]), "label_token_ids"),
    "label-id-bool": (_ok(label_token_ids=[True]), "label_token_ids"),
    "item-token-out-of-vocab": (_ok(items=[[4], [100_000]]), "vocabulary"),
    "item-token-negative": (_ok(items=[[-4]]), "items"),
    "item-token-float": (_ok(items=[[4.0]]), "items"),
    "query-token-out-of-vocab": (_ok(query=[1, 100_000]), "vocabulary"),
    "sequence-longer-than-context": (_ok(query=[7] * 300), "context"),
    "text-longer-than-context": (_ok(query="apple banana " * 300, items=["fruit"]), "context"),
    "too-many-items": (_ok(items=[[4]] * (MAX_ITEMS + 1)), "max_items_per_request"),
    "query-and-item-both-empty": (_ok(query=[], items=[[]]), "empty"),
    "query-is-a-number": (_ok(query=5), "query"),
    "query-is-null": (_json(query=None, items=[[4]], label_token_ids=[1]), "query"),
    "items-string-mixed-with-ints": (_ok(items=["x", 1]), "items"),
    "items-is-a-number": (_ok(items=5), "items"),
    "items-is-an-object": (_ok(items={"a": [4]}), "items"),
    "label-ids-null": (_json(query=[1], items=[[4]], label_token_ids=None), "label_token_ids"),
    "item-token-nan": (b'{"query": [1], "items": [[NaN]], "label_token_ids": [1]}', "items"),
    "apply-softmax-is-a-string": (_ok(apply_softmax="yes"), "apply_softmax"),
    "item-first-is-a-number": (_ok(item_first=1), "item_first"),
    "model-is-a-number": (_ok(model=5), "model"),
    "body-is-a-list": (b"[1, 2]", "body"),
    "body-is-a-string": (b'"score this"', "body"),
    "body-is-null": (b"null", "body"),
    "body-is-empty": (b"", "body"),
    "malformed-json": (b'{"query": [1, 2', "json"),
    "trailing-garbage": (_ok() + b"}", "json"),
    "deeply-nested-json": (b"[" * 100_000 + b"]" * 100_000, "body"),
    "invalid-utf8": (b'{"query": "\xff\xfe", "items": ["a"], "label_token_ids": [1]}', "body"),
}


@pytest.mark.parametrize("raw, says", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_a_400_with_a_message_that_says_what(tiny, raw, says):
    response = tiny.client.post("/v1/score", content=raw,
                                headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert (body["object"], body["type"], body["code"]) == ("error", "BadRequestError", 400)
    assert says.lower() in body["message"].lower(), body["message"]


def test_text_that_cannot_be_encoded_is_a_400(tiny):
    raw = b'{"query": "\\ud800 capital?", "items": ["a"], "label_token_ids": [1]}'
    response = tiny.client.post("/v1/score", content=raw,
                                headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text


def test_the_server_still_answers_after_the_bad_inputs(tiny):
    assert len(ok_scores(tiny.client, query=[1, 2], items=[[3]], label_token_ids=[1])) == 1


def test_no_query_is_held_once_idle_and_the_cache_keeps_its_budget(tiny):
    ok_scores(tiny.client, query=QUERY, items=ITEMS, label_token_ids=LABELS)
    # The loop releases a request's query once it leaves the scheduler; the query cache keeps
    # the idle ones within its budget (no leak).
    cache = tiny.engine.runner.query_cache
    wait_for(lambda: cache.num_held_tokens == 0, timeout_s=2)
    assert 0 < cache.num_tokens <= cache.max_tokens == tiny.config.query_cache_tokens
    assert tiny.engine.load().num_reqs == 0


def test_a_repeated_query_is_counted_in_cached_tokens_and_the_hit_rate(tiny):
    """Over HTTP: the same query twice; the second request's query tokens are all cached (its
    items' are not), and the gauges the scheduler owns do not count idle cached queries."""
    query = "Zz: is it a city in California? A query no other test of this module sends."
    first = scrape(tiny.client)
    response = score(tiny.client, query=query, items=ITEMS, label_token_ids=LABELS)
    usage = response.json()["usage"]["prompt_tokens"]
    middle = scrape(tiny.client)
    score(tiny.client, query=query, items=ITEMS, label_token_ids=LABELS)
    last = scrape(tiny.client)

    def grown(samples, since, name):
        return samples[f"sglang:{name}"]["value"] - since[f"sglang:{name}"]["value"]

    num_query = len(tiny.ids(query))
    assert grown(middle, first, "cached_tokens_total") == num_query * (len(ITEMS) - 1)
    assert grown(last, middle, "cached_tokens_total") == num_query * len(ITEMS)
    assert grown(last, middle, "prompt_tokens_total") == usage
    hit_rate = last["sglang:cached_tokens_total"]["value"] / last["sglang:prompt_tokens_total"]["value"]
    assert last["sglang:cache_hit_rate"]["value"] == pytest.approx(hit_rate)
    assert last["sglang:num_used_tokens"]["value"] == last["sglang:token_usage"]["value"] == 0
    assert tiny.client.get("/get_load").json()[0]["num_tokens"] == 0


# -- other endpoints on the tiny model ---------------------------------------------------------

def test_get_load_has_exactly_the_sglang_fields(tiny):
    entries = tiny.client.get("/get_load").json()
    assert isinstance(entries, list) and len(entries) == 1
    entry = entries[0]
    assert set(entry) == {"rid", "http_worker_ipc", "dp_rank", "num_reqs", "num_waiting_reqs",
                          "num_tokens", "ts_tic"}
    assert entry["rid"] is None and entry["http_worker_ipc"] is None
    assert (entry["num_reqs"], entry["num_waiting_reqs"], entry["num_tokens"]) == (0, 0, 0)
    assert isinstance(entry["ts_tic"], float)
    assert tiny.client.get("/get_load").json()[0]["ts_tic"] > entry["ts_tic"]


def test_get_load_dp_rank_is_null_as_in_the_contract(tiny):
    assert tiny.client.get("/get_load").json()[0]["dp_rank"] is None


GAUGES = ["num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage",
          "max_total_num_tokens", "cache_hit_rate"]
COUNTERS = ["prompt_tokens_total", "num_requests_total", "num_aborted_requests_total",
            "cached_tokens_total"]
HISTOGRAMS = ["e2e_request_latency_seconds", "queue_time_seconds"]


def scrape(client: httpx.Client) -> dict[str, dict]:
    """/metrics -> {sample name: {"labels": ..., "value": ...}} (the last sample of each name)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[sample.name] = {"labels": sample.labels, "value": sample.value}
    return samples


def test_metrics_have_every_contract_name_with_the_sglang_labels(tiny):
    ok_scores(tiny.client, query=QUERY, items=ITEMS, label_token_ids=LABELS)
    samples = scrape(tiny.client)
    names = ([f"sglang:{g}" for g in GAUGES] + [f"sglang:{c}" for c in COUNTERS]
             + [f"sglang:{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")])
    assert [name for name in names if name not in samples] == []
    for name in names:
        labels = samples[name]["labels"]
        assert {"model_name", "engine_type", "tp_rank", "pp_rank"} <= set(labels), name
        assert labels["engine_type"] == "unified" and labels["model_name"] == tiny.config.model_name
    assert samples["sglang:num_requests_total"]["value"] >= 1
    assert samples["sglang:prompt_tokens_total"]["value"] > 0
    assert samples["sglang:max_total_num_tokens"]["value"] == tiny.config.max_total_tokens
    assert samples["sglang:num_running_reqs"]["value"] == 0
    assert samples["sglang:num_queue_reqs"]["value"] == 0
    # Items of one request share the query's key/values, so some prompt tokens were cached.
    assert 0 < samples["sglang:cache_hit_rate"]["value"] < 1


def test_health_readiness_and_models(tiny):
    assert tiny.client.get("/health").status_code == 200
    assert tiny.client.get("/health_generate").status_code == 200
    models = tiny.client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["root"], m["parent"]) for m in models["data"]] == [
        ("tiny-llama", tiny.config.model_path, None), ("my-scorer", tiny.config.model_path, None)]


def test_server_info_shows_the_effective_arguments(tiny):
    info = tiny.client.get("/get_server_info").json()
    assert info["model_path"] == tiny.config.model_path
    assert info["max_items_per_request"] == MAX_ITEMS
    assert info["max_running_requests"] == tiny.config.max_running_requests
    assert info["request_timeout_s"] == 10
    assert info["dtype"] == "float32" and info["context_length"] == 256


# -- limits and failures, with a gated fake model ----------------------------------------------

def post(url: str, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}/v1/score", json=body, **{"timeout": 10, **kwargs})


def token_body(num_items: int, first_item: int = 10) -> dict:
    return {"query": [1, 2, 3], "items": [[first_item + i] for i in range(num_items)],
            "label_token_ids": [1, 2]}


def load(url: str) -> dict:
    return httpx.get(f"{url}/get_load").json()[0]


def running(entry: dict) -> int:
    return entry["num_reqs"] - entry["num_waiting_reqs"]


def test_body_over_the_byte_limit_is_a_413():
    with serving(FakeRunner(), max_request_bytes=1000) as (url, _):
        response = httpx.post(f"{url}/v1/score", content=b" " * 2000,
                              headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.json()["code"] == 413 and "1000 bytes" in response.json()["message"]
        assert post(url, token_body(2)).status_code == 200


def test_chunked_body_over_the_byte_limit_is_a_413():
    with serving(FakeRunner(), max_request_bytes=1000) as (url, _):
        chunks = iter([b'{"query": "', b"x" * 800, b"x" * 800, b'"}'])  # no Content-Length
        response = httpx.post(f"{url}/v1/score", content=chunks,
                              headers={"content-type": "application/json"})
        assert response.status_code == 413, response.text


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_compressed_body_is_a_415_valid_or_not(encoding):
    import gzip
    body = json.dumps(token_body(1)).encode()
    with serving(FakeRunner()) as (url, _):
        for content in (gzip.compress(body), b"not compressed at all"):
            response = httpx.post(f"{url}/v1/score", content=content,
                                  headers={"content-type": "application/json",
                                           "content-encoding": encoding})
            assert response.status_code == 415, response.text
            assert response.json()["code"] == 415 and encoding in response.json()["message"]
        identity = httpx.post(f"{url}/v1/score", content=body,
                              headers={"content-type": "application/json",
                                       "content-encoding": "identity"})
        assert identity.status_code == 200


def test_a_second_content_encoding_header_is_read_too():
    # gzip, then identity: reading only the last header (a dict of them) let the gzip through (400)
    import gzip
    with serving(FakeRunner()) as (url, _):
        response = httpx.post(f"{url}/v1/score", content=gzip.compress(b"{}"),
                              headers=[("content-type", "application/json"),
                                       ("content-encoding", "gzip"),
                                       ("content-encoding", "identity")])
    assert response.status_code == 415, response.text
    assert response.json() == {"object": "error", "type": "BadRequestError", "param": None,
                               "code": 415, "message": response.json()["message"]}


def test_a_sequence_over_the_token_budget_is_a_400_naming_the_limit():
    with serving(FakeRunner(), max_total_tokens=8, max_prefill_tokens=8) as (url, _):
        response = post(url, {"query": [1] * 6, "items": [[2], [3] * 3], "label_token_ids": [1]})
        assert response.status_code == 400
        assert "item 1: 9 tokens" in response.json()["message"]
        assert "max_total_tokens" in response.json()["message"]


def test_a_sequence_over_the_prefill_budget_runs_alone():
    runner = FakeRunner()
    with serving(runner, max_prefill_tokens=8) as (url, _):
        response = post(url, {"query": [1] * 6, "items": [[2], [3] * 3, [4]], "label_token_ids": [1]})
        assert response.status_code == 200 and len(response.json()["scores"]) == 3
    assert runner.batches == [1, 1, 1]  # 7 fits alone; 9 > 8 runs alone; 7 again alone


def test_counters_and_histograms_add_up_the_finished_requests():
    with serving(FakeRunner()) as (url, _), httpx.Client(base_url=url) as client:
        usages = [post(url, token_body(n)).json()["usage"]["prompt_tokens"] for n in (1, 4)]
        samples = scrape(client)
    assert samples["sglang:num_requests_total"]["value"] == 2
    assert samples["sglang:scored_items_total"]["value"] == 1 + 4
    assert samples["sglang:prompt_tokens_total"]["value"] == sum(usages) == 4 + 16
    assert samples["sglang:e2e_request_latency_seconds_count"]["value"] == 2
    assert samples["sglang:queue_time_seconds_count"]["value"] == 2
    assert samples["sglang:num_aborted_requests_total"]["value"] == 0


def test_full_queue_is_a_503_with_retry_after():
    gate = threading.Event()
    with serving(FakeRunner(gate=gate), max_running_requests=1, max_queued_requests=3,
                 max_items_per_request=3) as (url, _), \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(post, url, token_body(1))
            wait_for(lambda: running(load(url)) == 1)
            second = pool.submit(post, url, token_body(3))
            wait_for(lambda: load(url)["num_waiting_reqs"] == 3)
            refused = post(url, token_body(1))
            assert refused.status_code == 503
            assert int(refused.headers["retry-after"]) >= 1
            assert "queue full" in refused.json()["message"]
        finally:
            gate.set()
        assert first.result().status_code == 200 and second.result().status_code == 200


def test_timeout_is_a_504_and_its_sequences_leave_the_scheduler():
    gate = threading.Event()
    with serving(FakeRunner(gate=gate), max_running_requests=1, request_timeout_s=0.3) as \
            (url, engine):
        try:
            response = post(url, token_body(3))  # 1 held in the forward, 2 waiting
            assert response.status_code == 504
            assert response.json()["type"] == "TimeoutError"
            assert load(url)["num_waiting_reqs"] == 0 and not engine.scheduler.waiting
        finally:
            gate.set()
        wait_for(lambda: load(url)["num_reqs"] == 0)
        with httpx.Client(base_url=url) as client:
            assert scrape(client)["sglang:num_aborted_requests_total"]["value"] == 1
        assert post(url, token_body(2)).status_code == 200


def test_a_failing_forward_fails_only_its_own_batch():
    poisoned = 99
    runner = FakeRunner(fail_when=lambda seqs: any(poisoned in seq.own_ids for seq in seqs))
    with serving(runner, max_running_requests=2) as (url, _):
        bad = post(url, {"query": [1], "items": [[poisoned], [4], [5], [6]],
                         "label_token_ids": [1]})
        assert bad.status_code == 500
        assert bad.json()["type"] == "InternalServerError"
        assert "forward pass failed" in bad.json()["message"]
        assert load(url)["num_reqs"] == 0  # its waiting items left with it
        assert runner.batches == [2]       # nothing else of that request ran
        assert post(url, token_body(4)).status_code == 200
        assert httpx.get(f"{url}/health_generate").status_code == 200


def test_api_key_guards_scoring_but_not_health_or_metrics():
    with serving(FakeRunner(), api_key="s3cret") as (url, _):
        assert post(url, token_body(1)).status_code == 401
        wrong = post(url, token_body(1), headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["code"] == 401
        right = post(url, token_body(1), headers={"authorization": "Bearer s3cret"})
        assert right.status_code == 200
        for path in ("/health", "/health_generate", "/metrics", "/get_load"):
            assert httpx.get(f"{url}{path}").status_code == 200, path
        info = httpx.get(f"{url}/get_server_info")
        assert "s3cret" not in info.text and info.json()["api_key"] != "s3cret"


def test_a_non_ascii_api_key_is_a_401():
    with serving(FakeRunner(), api_key="s3cret") as (url, _):
        response = post(url, token_body(1), headers={"authorization": b"Bearer s3cr\xe9t"})
        assert response.status_code == 401, response.text


def test_client_disconnect_removes_its_waiting_sequences():
    gate = threading.Event()
    with serving(FakeRunner(gate=gate), max_running_requests=1, request_timeout_s=10) as \
            (url, engine), concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            holder = pool.submit(post, url, token_body(1))
            wait_for(lambda: running(load(url)) == 1)
            with pytest.raises(httpx.ReadTimeout):  # the client gives up and hangs up
                post(url, token_body(3), timeout=0.5)
            wait_for(lambda: load(url)["num_waiting_reqs"] == 0)
            assert not engine.scheduler.waiting and len(engine.scheduler.running) == 1
            with httpx.Client(base_url=url) as client:
                assert scrape(client)["sglang:num_aborted_requests_total"]["value"] == 1
        finally:
            gate.set()
        assert holder.result().status_code == 200
        wait_for(lambda: load(url)["num_reqs"] == 0)


def test_draining_server_is_not_ready_and_refuses_new_work():
    with serving(FakeRunner()) as (url, engine):
        assert httpx.get(f"{url}/health_generate").status_code == 200
        engine.begin_drain()
        not_ready = httpx.get(f"{url}/health_generate")
        assert not_ready.status_code == 503 and "draining" in not_ready.json()["message"]
        refused = post(url, token_body(1))
        assert refused.status_code == 503 and "retry-after" in refused.headers
        assert httpx.get(f"{url}/health").status_code == 200
