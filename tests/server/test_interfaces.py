"""server/interfaces.py: every member the ScoringService protocol declares is on Engine and on
EngineStartup (loading and loaded), every member of Runner on each runner the engine is given (the
real ones on tiny models, and the fakes), methods with the protocol's parameters: a misspelt or
missing member fails here rather than meeting a default."""
from __future__ import annotations

import inspect

import pytest
import torch

from bench.free_server import FreeRunner
from server.config import ServerConfig
from server.encoder_runner import EncoderRunner
from server.engine import Engine
from server.interfaces import Runner, ScoringService
from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.startup import EngineStartup
from tests.kit.runners import FakeRunner
from tests.kit.servers import cpu_config


def members(protocol: type) -> dict[str, object]:
    """What a protocol declares: its annotated attributes (None) and its methods and properties."""
    declared = {name: None for name in protocol.__annotations__}
    for name, value in vars(protocol).items():
        if not name.startswith("_") and (callable(value) or isinstance(value, property)):
            declared[name] = value
    return declared


def assert_implements(instance, protocol: type) -> None:
    for name, declared in members(protocol).items():
        found = inspect.getattr_static(instance, name, None)
        assert found is not None or name in vars(instance), f"{type(instance).__name__} lacks {name}"
        if inspect.isfunction(declared):
            want = list(inspect.signature(declared).parameters)
            got = list(inspect.signature(getattr(instance, name)).parameters)
            assert got == want[1:], f"{type(instance).__name__}.{name}{got} is not the protocol's {want[1:]}"


def test_the_protocols_declare_what_the_parts_meet_by():
    assert {"runner", "input_limits", "special_tokens", "reranker", "score", "load", "is_ready",
            "load_failed", "begin_drain"} <= set(members(ScoringService))
    assert {"shares_query_in_forward", "special_tokens", "tokenize", "run", "keep_only"} <= set(members(Runner))


async def test_engine_and_engine_startup_are_scoring_services():
    config = cpu_config()
    engine = Engine(config, FakeRunner())
    assert_implements(engine, ScoringService)
    startup = EngineStartup(ServerConfig(), lambda: (config, FakeRunner()))
    assert_implements(startup, ScoringService)  # loading: its members are there, answering 503
    await startup.start()
    await startup._task
    assert startup.engine is not None
    assert_implements(startup, ScoringService)
    await startup.stop()


def test_the_real_runners_and_the_fakes_are_runners(tiny_model_dir, tmp_path):
    from bench.classifier_models import build_classifier

    model, tokenizer = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    encoder = load_model(str(build_classifier(tmp_path / "bert", "bert")), torch.device("cpu"), torch.float32)
    for runner in [ModelRunner(model, tokenizer), EncoderRunner(*encoder), FakeRunner(), FreeRunner()]:
        assert_implements(runner, Runner)


@pytest.mark.parametrize("protocol", [ScoringService, Runner])
def test_a_missing_member_is_caught(protocol):
    class Nothing:
        pass

    with pytest.raises(AssertionError, match="lacks"):
        assert_implements(Nothing(), protocol)
