"""`python -m gateway` over three real servers (the real app and scheduler over a free runner):
load-aware routing, 4xx and API keys passed through, and the metrics that tell it."""
import contextlib
import threading

import httpx

from tests.gateway.support import gateway_process, sample, score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for

KEY = "secret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
G = "scoringfleet_gateway"


def num_reqs(url: str) -> int:
    return httpx.get(f"{url}/get_load", timeout=5).json()[0]["num_reqs"]


def test_requests_go_around_the_worker_holding_30_sequences(tmp_path):
    gate = threading.Event()  # holds every forward of the busy worker until set
    with serving(FakeRunner(gate=gate), api_key=KEY) as (busy, _), \
            serving(FakeRunner(), api_key=KEY) as (second, _), \
            serving(FakeRunner(), api_key=KEY) as (third, _):
        holder = threading.Thread(target=httpx.post, args=(f"{busy}/v1/score",),
                                  kwargs={"json": score_body(30), "headers": AUTH, "timeout": 30})
        holder.start()
        try:
            wait_for(lambda: num_reqs(busy) == 30)
            with gateway_process("--worker-urls", busy, second, third, "--api-key", KEY,
                                 log_path=tmp_path / "gateway.log") as gateway:
                wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 3)
                assert sample(gateway, f"{G}_worker_load", worker=busy) == 30
                with httpx.Client(base_url=gateway, headers=AUTH, timeout=10) as client:
                    answers = [client.post("/v1/score", json=score_body(2)) for _ in range(20)]
                assert [a.status_code for a in answers] == [200] * 20
                assert all(len(a.json()["scores"]) == 2 for a in answers)
                routed = {url: sample(gateway, f"{G}_routed_total", worker=url)
                          for url in (busy, second, third)}
                assert routed[busy] == 0 and routed[second] + routed[third] == 20
                assert routed[second] > 0 and routed[third] > 0  # not all on one of the two
        finally:
            gate.set()
            holder.join(timeout=30)


def test_client_errors_and_api_key_pass_through(tmp_path):
    with serving(FakeRunner(), api_key=KEY) as (worker, _), \
            gateway_process("--worker-urls", worker, "--api-key", KEY,
                            log_path=tmp_path / "gateway.log") as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
        bad = {"query": [1], "items": [[2]], "label_token_ids": []}
        through = httpx.post(f"{gateway}/v1/score", json=bad, headers=AUTH)
        direct = httpx.post(f"{worker}/v1/score", json=bad, headers=AUTH)
        assert through.status_code == direct.status_code == 400
        assert through.json() == direct.json() and through.json()["object"] == "error"
        assert through.headers["content-type"] == direct.headers["content-type"]
        refused = httpx.post(f"{gateway}/v1/score", json=score_body())
        assert refused.status_code == 401 and refused.json()["type"] == "AuthenticationError"
        ok = httpx.post(f"{gateway}/v1/score", json=score_body(), headers=AUTH)
        assert ok.status_code == 200  # the worker requires the key too: it was passed on
        assert httpx.get(f"{gateway}/ready").status_code == 200
        for code, count in (("400", 1), ("401", 1), ("200", 1)):
            assert sample(gateway, f"{G}_requests_total", code=code) == count
        assert sample(gateway, f"{G}_retries_total", reason="503") == 0  # a 4xx is no retry
        assert sample(gateway, f"{G}_waiting_requests") == 0


def test_a_503_is_retried_once_on_another_worker_else_passed_back(tmp_path):
    gate = threading.Event()  # the full worker runs one sequence, queues one, refuses the rest
    with contextlib.ExitStack() as other, \
            serving(FakeRunner(gate=gate), max_running_requests=1, max_queued_requests=1) as (full, _):
        spare = other.enter_context(serving(FakeRunner()))[0]
        holders = [threading.Thread(target=httpx.post, args=(f"{full}/v1/score",),
                                    kwargs={"json": score_body(1), "timeout": 30}) for _ in range(2)]
        try:
            for holder in holders:
                holder.start()
            wait_for(lambda: num_reqs(full) == 2)
            direct = httpx.post(f"{full}/v1/score", json=score_body(1))
            assert direct.status_code == 503
            with gateway_process("--worker-urls", full, spare, "--policy", "round_robin",
                                 log_path=tmp_path / "gateway.log") as gateway:
                wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 2)
                codes = [httpx.post(f"{gateway}/v1/score", json=score_body(1)).status_code
                         for _ in range(4)]
                assert codes == [200] * 4
                assert sample(gateway, f"{G}_retries_total", reason="503") == 2  # half went to full
                other.close()  # the spare stops: nobody else to retry on
                wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
                answer = httpx.post(f"{gateway}/v1/score", json=score_body(1))
                assert (answer.status_code, answer.json()) == (503, direct.json())
                assert answer.headers["retry-after"] == direct.headers["retry-after"]
        finally:
            gate.set()
            for holder in holders:
                holder.join(timeout=30)
