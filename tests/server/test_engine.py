"""The engine's loop with a free fake model: limits under concurrency, truthful load mid-batch,
timeouts, failures contained to their batch, cancellation, and draining."""
from __future__ import annotations

import asyncio
import threading

import pytest

from server.config import ServerConfig
from server.engine import Engine
from server.errors import InternalError, RequestTimeout, ServiceUnavailable
from server.schemas import ScoreRequest
from tests.kit.runners import FakeRunner
from tests.kit.servers import cpu_config


def body(num_items: int = 3, query=(1, 2, 3)) -> ScoreRequest:
    return ScoreRequest(query=list(query), items=[[10 + i] for i in range(num_items)],
                        label_token_ids=[1, 2])


async def started(runner: FakeRunner, **limits) -> Engine:
    engine = Engine(cpu_config(**limits), runner)
    await engine.start()
    return engine


async def wait_until(predicate, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def test_many_concurrent_requests_all_finish_within_the_running_limit():
    runner = FakeRunner()
    engine = await started(runner, max_running_requests=2)
    results = await asyncio.gather(*(engine.score(body(10)) for _ in range(10)))
    assert all(len(result.scores) == 10 for result in results)
    assert max(runner.batches) <= 2 and sum(runner.batches) == 100
    assert engine.load().num_reqs == 0
    await engine.stop()


async def test_load_is_true_while_a_forward_runs_and_zero_after():
    gate = threading.Event()
    engine = await started(FakeRunner(gate=gate), max_running_requests=4)
    tasks = [asyncio.create_task(engine.score(body(3))) for _ in range(3)]
    await wait_until(lambda: engine.load().num_running == 4)
    load = engine.load()
    assert (load.num_running, load.num_waiting, load.num_reqs) == (4, 5, 9)
    gate.set()
    await asyncio.gather(*tasks)
    assert engine.load().num_reqs == 0 and engine.load().num_tokens == 0
    await engine.stop()


async def test_timeout_is_504_and_its_sequences_leave_the_scheduler():
    gate = threading.Event()
    engine = await started(FakeRunner(gate=gate), max_running_requests=1, request_timeout_s=0.2)
    with pytest.raises(RequestTimeout, match="0.2 s"):
        await engine.score(body(3))
    assert engine.load().num_waiting == 0  # the 2 waiting ones left at once
    gate.set()
    await wait_until(lambda: engine.load().num_reqs == 0)
    assert engine.metrics.num_aborted_requests == 1
    await engine.stop()


async def test_a_failing_forward_fails_only_its_batch():
    runner = FakeRunner(fail_when=lambda seqs: any(seq.own_ids == (99,) for seq in seqs))
    engine = await started(runner)
    bad = ScoreRequest(query=[1], items=[[99], [98]], label_token_ids=[1])
    with pytest.raises(InternalError, match="injected forward failure"):
        await engine.score(bad)
    good = await engine.score(body(2))
    assert len(good.scores) == 2
    assert engine.load().num_reqs == 0 and engine.is_ready
    await engine.stop()


async def test_a_cancelled_request_leaves_nothing_behind():
    gate = threading.Event()
    runner = FakeRunner(gate=gate)
    engine = await started(runner, max_running_requests=1)
    task = asyncio.create_task(engine.score(body(4)))
    await wait_until(lambda: engine.load().num_running == 1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert engine.load().num_waiting == 0
    gate.set()
    await wait_until(lambda: engine.load().num_reqs == 0)
    await wait_until(lambda: runner.kept == set())  # its cached query is forgotten too
    await engine.stop()


async def test_queue_full_is_503_with_retry_after():
    gate = threading.Event()
    engine = await started(FakeRunner(gate=gate), max_running_requests=1, max_queued_requests=4,
                           max_items_per_request=4)
    first = asyncio.create_task(engine.score(body(4)))
    await wait_until(lambda: engine.load().num_running == 1)
    second = asyncio.create_task(engine.score(body(1)))
    await wait_until(lambda: engine.load().num_waiting == 4)  # 3 + 1: at the cap
    with pytest.raises(ServiceUnavailable, match="queue full") as refused:
        await engine.score(body(1))
    assert refused.value.retry_after_s >= 1
    gate.set()
    await asyncio.gather(first, second)
    await engine.stop()


async def test_draining_refuses_new_work_and_finishes_admitted_work():
    gate = threading.Event()
    engine = await started(FakeRunner(gate=gate))
    admitted = asyncio.create_task(engine.score(body(2)))
    await wait_until(lambda: engine.load().num_running == 2)
    engine.begin_drain()
    assert not engine.is_ready
    with pytest.raises(ServiceUnavailable, match="shutting down"):
        await engine.score(body(1))
    gate.set()
    assert len((await admitted).scores) == 2
    await engine.stop()
    assert not engine.is_loop_alive


async def test_no_items_answers_without_scheduling():
    runner = FakeRunner()
    engine = await started(runner)
    result = await engine.score(body(0))
    assert (result.scores, result.num_prompt_tokens, runner.batches) == ([], 0, [])
    await engine.stop()


@pytest.mark.parametrize("device, expected", [("cpu", 4096), ("cuda", 16384)])
def test_the_prefill_budget_defaults_by_device(device, expected):
    runner = FakeRunner()
    resolved = ServerConfig().resolve(device, "float32")
    assert Engine(resolved, runner).scheduler.limits.max_prefill_tokens == expected
    assert ServerConfig(max_prefill_tokens=100).resolve(device, "float32").max_prefill_tokens == 100


def test_an_unresolved_config_is_refused():
    with pytest.raises(ValueError, match="resolved config"):
        Engine(ServerConfig(), FakeRunner())
