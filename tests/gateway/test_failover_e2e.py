"""Workers dying under the gateway: a worker killed mid-run costs no client a failure (the request
is retried on another), and with no worker left a request waits, counted, then gets 503."""
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from bench.server_process import stop
from tests.gateway.support import gateway_process, sample, score_body, start_worker
from tests.kit.runners import SlowRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for, wait_http

G = "scoringfleet_gateway"


def keep_sending(gateway: str, stop_event: threading.Event) -> list[int]:
    codes = []
    with httpx.Client(base_url=gateway, timeout=10) as client:
        while not stop_event.is_set():
            codes.append(client.post("/v1/score", json=score_body(4)).status_code)
    return codes


def test_killed_workers_cost_no_client_a_failure_then_requests_wait_and_get_503(tmp_path):
    # One worker is a process (to be SIGKILLed), two serve in this process (a process each would
    # cost a torch import each); every batch takes 50 ms, so requests are in flight at the kill.
    victim, victim_url = start_worker(hold_s=0.05, log_path=tmp_path / "victim.log")
    with contextlib.ExitStack() as in_process:
        urls = [victim_url] + [in_process.enter_context(serving(SlowRunner(delay_s=0.05)))[0]
                               for _ in range(2)]
        wait_http(f"{victim_url}/health", timeout_s=60, process=victim)
        with gateway_process("--worker-urls", *urls, "--queue-timeout", "2",
                             log_path=tmp_path / "gateway.log") as gateway:
            wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 3)
            stopping = threading.Event()
            with ThreadPoolExecutor(6) as pool:
                clients = [pool.submit(keep_sending, gateway, stopping) for _ in range(6)]
                wait_for(lambda: sample(gateway, f"{G}_routed_total", worker=victim_url) >= 5)
                victim.kill()  # SIGKILL with requests in flight on it
                time.sleep(1.0)
                stopping.set()
                codes = [code for client in clients for code in client.result()]
            assert codes and set(codes) == {200}, f"{len(codes)} answers: {sorted(set(codes))}"
            assert sum(sample(gateway, f"{G}_retries_total", reason=reason)
                       for reason in ("reset", "refused")) >= 1
            assert sample(gateway, f"{G}_workers", state="ready") == 2

            in_process.close()  # the other two stop: no worker left
            wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 0)
            with ThreadPoolExecutor(1) as pool:
                started = time.monotonic()
                waiting = pool.submit(httpx.post, f"{gateway}/v1/score", json=score_body(),
                                      timeout=10)
                wait_for(lambda: sample(gateway, f"{G}_waiting_requests") == 1)
                answer = waiting.result()
            assert time.monotonic() - started >= 1.5  # it waited its --queue-timeout
            assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
            assert answer.json()["type"] == "ServiceUnavailableError"
            assert sample(gateway, f"{G}_waiting_requests") == 0
    stop(victim)


def test_two_workers_draining_at_once_cost_no_client_a_503(tmp_path):
    # Two of three workers begin draining (as on SIGTERM) and stay in rotation, as they do between
    # the signal and the watch event that drops them (for good here: static workers). A draining
    # worker's 503 (Connection: close) does not use up the one retry: the request moves on to a
    # worker not yet tried. Round robin makes every pair of choices happen; with one retry only,
    # a request sent to one draining worker and retried on the other got their 503.
    with contextlib.ExitStack() as servers:
        started = [servers.enter_context(serving(SlowRunner(delay_s=0.01))) for _ in range(3)]
        urls = sorted(url for url, _ in started)
        with gateway_process("--worker-urls", *urls, "--policy", "round_robin",
                             log_path=tmp_path / "gateway.log") as gateway:
            wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 3)
            engines = dict(started)
            for url in urls[:2]:
                engines[url].begin_drain()
            with httpx.Client(base_url=gateway, timeout=10) as client:
                codes = [client.post("/v1/score", json=score_body()).status_code for _ in range(12)]
            assert codes == [200] * 12
            assert sample(gateway, f"{G}_retries_total", reason="draining") >= 4
            # every answer came from the one worker still admitting
            assert sample(gateway, f"{G}_routed_total", worker=urls[2]) == 12
