"""`python -m gateway` over two fleets of real servers (the real app and scheduler over a free
runner), each under its own served name: a request reaches only the fleet that serves its model,
an unknown model is a 404 naming the served ones, /v1/models lists both, and a fleet with no ready
worker holds its own requests while the other fleet's are answered."""
import contextlib
import socket
import threading

import httpx
import pytest

from server.engine import Engine
from tests.gateway.support import gateway_process, sample, score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import cpu_config, live_server, serving
from tests.kit.waiting import wait_for

G = "scoringfleet_gateway"


@pytest.fixture
def two_fleets(tmp_path):
    """Fleet `a`: two workers serving `scorer-a`; fleet `b`: one serving `ranker-b` (another vocabulary)."""
    with serving(FakeRunner(), served_model_name="scorer-a") as (a1, _), \
            serving(FakeRunner(), served_model_name="scorer-a") as (a2, _), \
            serving(FakeRunner(vocab_size=64), served_model_name="ranker-b") as (b1, _), \
            gateway_process("--fleet", f"a={a1},{a2}", "--fleet", f"b={b1}",
                            log_path=tmp_path / "gateway.log") as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 3)
        # the names come from each worker's /v1/models, asked once it serves
        wait_for(lambda: {m["id"] for m in httpx.get(f"{gateway}/v1/models").json()["data"]}
                   == {"scorer-a", "ranker-b"})
        yield gateway, (a1, a2), b1


def routed(gateway: str, url: str) -> float:
    return sample(gateway, f"{G}_routed_total", worker=url)


def test_each_models_requests_reach_only_its_fleet(two_fleets):
    gateway, fleet_a, b1 = two_fleets
    with httpx.Client(base_url=gateway, timeout=10) as client:
        to_a = [client.post("/v1/score", json=score_body(model="scorer-a")) for _ in range(6)]
        to_b = [client.post("/v1/score", json=score_body(model="ranker-b")) for _ in range(4)]
        # llm-d's header names the model too (a body without one goes on as sent: its worker's default)
        by_header = client.post("/v1/score", json=score_body(), headers={"x-gateway-model-name": "ranker-b"})
        unnamed = client.post("/v1/score", json=score_body())  # no model: the first fleet
    assert [a.status_code for a in to_a + to_b + [by_header, unnamed]] == [200] * 12
    assert routed(gateway, b1) == 5  # 4 by body, 1 by header; none of a's
    assert sum(routed(gateway, url) for url in fleet_a) == 7
    assert sample(gateway, f"{G}_requests_total", code="200", model="ranker-b") == 5
    assert sample(gateway, f"{G}_requests_total", code="200", model="scorer-a") == 7


def test_an_unknown_model_is_a_404_naming_the_served_models(two_fleets):
    gateway, fleet_a, b1 = two_fleets
    answer = httpx.post(f"{gateway}/v1/score", json=score_body(model="gpt-4"), timeout=10)
    assert answer.status_code == 404, answer.text
    body = answer.json()
    assert body["type"] == "NotFoundError" and body["code"] == 404
    assert "'gpt-4'" in body["message"] and "scorer-a" in body["message"] and "ranker-b" in body["message"]
    assert sum(routed(gateway, url) for url in (*fleet_a, b1)) == 0  # no worker saw it
    assert sample(gateway, f"{G}_requests_total", code="404", model="") == 1  # never the client's text


def test_models_lists_every_fleets_models_once(two_fleets):
    gateway, fleet_a, b1 = two_fleets
    listed = httpx.get(f"{gateway}/v1/models", timeout=10).json()
    assert listed["object"] == "list"
    assert sorted(model["id"] for model in listed["data"]) == ["ranker-b", "scorer-a"]
    # each entry as its worker wrote it
    assert httpx.get(f"{b1}/v1/models").json()["data"][0] in listed["data"]


@contextlib.contextmanager
def late_worker(port: int, name: str):
    """A server that appears on `port` only now (a fleet woken from zero)."""
    config = cpu_config(port=port, served_model_name=name)
    with live_server(config, Engine(config, FakeRunner())) as url:
        yield url


def test_a_fleet_without_a_ready_worker_holds_only_its_own_requests(tmp_path):
    # Fleet `b` is at zero: its one address refuses connections until its worker starts (the port
    # held, bound but not listening, so that no other server of the test takes it meanwhile);
    # --fleet-model makes it routable.
    reserved = socket.socket()
    reserved.bind(("127.0.0.1", 0))
    b_port = reserved.getsockname()[1]
    b_url = f"http://127.0.0.1:{b_port}"
    with contextlib.closing(reserved), serving(FakeRunner(), served_model_name="scorer-a") as (a1, _), \
            gateway_process("--fleet", f"a={a1}", "--fleet", f"b={b_url}", "--fleet-model", "b=ranker-b",
                            "--queue-timeout", "60", log_path=tmp_path / "gateway.log") as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
        held: list[httpx.Response] = []
        client = threading.Thread(target=lambda: held.append(httpx.post(
            f"{gateway}/v1/score", json=score_body(model="ranker-b"), timeout=60)))
        client.start()
        try:
            wait_for(lambda: sample(gateway, f"{G}_waiting_requests", fleet="b") == 1)
            # the other fleet's requests flow meanwhile, and its waiting room stays empty
            answers = [httpx.post(f"{gateway}/v1/score", json=score_body(model="scorer-a"), timeout=5)
                       for _ in range(3)]
            assert [a.status_code for a in answers] == [200] * 3
            assert sample(gateway, f"{G}_waiting_requests", fleet="a") == 0 and not held
            listed = {m["id"] for m in httpx.get(f"{gateway}/v1/models", timeout=10).json()["data"]}
            assert listed == {"scorer-a", "ranker-b"}  # a fleet at zero still lists its model
            reserved.close()
            with late_worker(b_port, "ranker-b"):
                client.join(timeout=30)
                assert held and held[0].status_code == 200, held and held[0].text
                assert sample(gateway, f"{G}_waiting_requests", fleet="b") == 0
                assert routed(gateway, b_url) == 1
        finally:
            client.join(timeout=60)
