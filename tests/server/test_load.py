"""The load gauges under concurrent load, through real HTTP: /get_load and /metrics sampled while
requests pour in must show work running AND waiting, agree with themselves in every sample, respect
max_running_requests, and read 0 once the load is over (never stale).

The model is a SlowRunner (a fake whose every forward takes a few milliseconds of wall time), so
requests pile up in waiting while a batch runs. All items have the same length, which makes token
counts an exact function of sequence counts in every sample.
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.kit.runners import SlowRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for

TOKENS_PER_SEQUENCE = 4  # a 3-token query + a 1-token item
MAX_SAMPLING_S = 20.0


def request_body(num_items: int) -> dict:
    return {"query": [1, 2, 3], "items": [[10 + i] for i in range(num_items)],
            "label_token_ids": [1, 2]}


@dataclass
class Samples:
    loads: list[dict] = field(default_factory=list)     # /get_load entries
    gauges: list[dict] = field(default_factory=list)    # /metrics: {gauge name: value}


def read_gauges(client: httpx.Client) -> dict[str, float]:
    text = client.get("/metrics").text
    return {sample.name.removeprefix("sglang:"): sample.value
            for family in text_string_to_metric_families(text) if family.type == "gauge"
            for sample in family.samples}


def sample_until(url: str, done: threading.Event, samples: Samples) -> None:
    """Alternate /get_load and /metrics until `done` (bounded by MAX_SAMPLING_S)."""
    deadline = time.monotonic() + MAX_SAMPLING_S
    with httpx.Client(base_url=url, timeout=5) as client:
        while not done.is_set() and time.monotonic() < deadline:
            samples.loads.append(client.get("/get_load").json()[0])
            samples.gauges.append(read_gauges(client))


def fire(url: str, num_requests: int, num_items: int, samples: Samples) -> list[httpx.Response]:
    """Send the requests concurrently while sampling; return their responses."""
    done = threading.Event()
    sampler = threading.Thread(target=sample_until, args=(url, done, samples))
    sampler.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(num_requests) as pool:
            futures = [pool.submit(httpx.post, f"{url}/v1/score", json=request_body(num_items),
                                   timeout=30) for _ in range(num_requests)]
            return [future.result() for future in futures]
    finally:
        done.set()
        sampler.join(timeout=10)


def load_now(url: str) -> dict:
    return httpx.get(f"{url}/get_load").json()[0]


def test_gauges_show_running_and_waiting_under_load_and_zero_after():
    runner = SlowRunner(delay_s=0.03)
    samples = Samples()
    with serving(runner, max_running_requests=4) as (url, _):
        responses = fire(url, num_requests=8, num_items=10, samples=samples)
        assert [r.status_code for r in responses] == [200] * 8
        # Seconds after the load ends, both endpoints read 0: nothing is left over or stale.
        wait_for(lambda: load_now(url)["num_reqs"] == 0, timeout_s=3)
        with httpx.Client(base_url=url) as client:
            gauges = read_gauges(client)
        assert (gauges["num_running_reqs"], gauges["num_queue_reqs"]) == (0, 0)
        assert (gauges["num_used_tokens"], gauges["token_usage"]) == (0, 0)
        assert load_now(url)["num_tokens"] == 0

    busy_loads = [s for s in samples.loads if s["num_reqs"] > s["num_waiting_reqs"] > 0]
    busy_gauges = [g for g in samples.gauges if g["num_running_reqs"] > 0 and g["num_queue_reqs"] > 0]
    print(f"\n{len(samples.loads)} /get_load samples ({len(busy_loads)} running and waiting), "
          f"{len(samples.gauges)} /metrics samples ({len(busy_gauges)} running and waiting)")
    assert busy_loads and busy_gauges
    for entry in samples.loads:
        running = entry["num_reqs"] - entry["num_waiting_reqs"]
        assert 0 <= running <= 4 and entry["num_waiting_reqs"] >= 0
        # num_reqs counts running + waiting sequences, and num_tokens holds the tokens of both.
        assert entry["num_tokens"] == TOKENS_PER_SEQUENCE * entry["num_reqs"]
    for gauges in samples.gauges:
        assert gauges["num_running_reqs"] <= 4
        assert gauges["num_used_tokens"] == TOKENS_PER_SEQUENCE * gauges["num_running_reqs"]
        assert gauges["token_usage"] == gauges["num_used_tokens"] / gauges["max_total_num_tokens"]


def test_ten_requests_of_ten_items_with_max_running_two_all_finish_and_never_exceed_two():
    runner = SlowRunner(delay_s=0.01)
    samples = Samples()
    with serving(runner, max_running_requests=2) as (url, _):
        responses = fire(url, num_requests=10, num_items=10, samples=samples)
        assert [r.status_code for r in responses] == [200] * 10
        assert all(len(r.json()["scores"]) == 10 for r in responses)
        wait_for(lambda: load_now(url)["num_reqs"] == 0, timeout_s=3)

    assert max(runner.batches) == 2 and sum(runner.batches) == 100
    running_seen = ([s["num_reqs"] - s["num_waiting_reqs"] for s in samples.loads]
                    + [g["num_running_reqs"] for g in samples.gauges])
    print(f"\nbatches: {len(runner.batches)}; samples: {len(running_seen)}; "
          f"max running seen: {max(running_seen)}")
    assert max(running_seen) == 2  # reached, and never more
