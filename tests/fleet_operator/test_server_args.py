"""The flags the operator builds are flags the server accepts: the Deployment's args run through the
server's own command-line parser, so a fleet the operator calls valid never crash-loops on start."""
from __future__ import annotations

import pytest

from fleet_operator.builders import build_deployment
from fleet_operator.builders.gateway import gateway_args
from fleet_operator.spec.fleet import SpecError, parse_fleet
from server.config import parse_args
from tests.fleet_operator.crd_schema import EXAMPLES, load_yaml


def server_config_of(spec: dict):
    deployment = build_deployment(parse_fleet("f", "default", spec))
    return parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_gives_flags_the_server_accepts(path):
    doc = load_yaml(path)
    config = server_config_of(doc["spec"])
    assert config.host == "0.0.0.0"
    assert config.port == doc["spec"].get("server", {}).get("port", 30000)


@pytest.mark.parametrize("server, expected_items", [
    pytest.param({"maxQueuedRequests": 9}, 9, id="small-queue-caps-items"),
    pytest.param({"maxQueuedRequests": 1}, 1, id="queue-of-one"),
    pytest.param({"maxQueuedRequests": 5000}, 1024, id="large-queue"),
])
def test_a_small_queue_is_a_working_server_not_a_crash_loop(server, expected_items):
    spec = {"model": {"source": "m.gguf"}, "image": "x", "server": server}
    assert server_config_of(spec).max_items_per_request == expected_items


@pytest.mark.parametrize("timeout_s", [1, 60], ids=["1s", "default"])
def test_the_server_drains_as_long_as_a_request_may_take_within_the_grace_period(timeout_s):
    spec = {"model": {"source": "m.gguf"}, "image": "x", "server": {"requestTimeoutSeconds": timeout_s}}
    deployment = build_deployment(parse_fleet("f", "default", spec))
    config = parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert config.drain_timeout_s == config.request_timeout_s == timeout_s
    # a drain lasts at most drain timeout + 5 s (server/drain.py); the preStop sleep (5 s) comes first
    grace_s = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s > 5 + config.drain_timeout_s + 5


def test_aliases_and_lora_adapters_reach_the_server_and_the_gateway():
    spec = {"model": {"source": "Qwen/Qwen3-0.6B", "name": "scorer", "aliases": ["qwen3", "org/qwen3"],
                      "loraAdapters": [{"name": "sql", "path": "/cache/adapters/sql"},
                                       {"name": "chat", "path": "/cache/adapters/chat"}]},
            "image": "x", "gateway": {"enabled": True}}
    config = server_config_of(spec)  # the server's own parser checks the names' rules too
    assert config.served_names == ("scorer", "qwen3", "org/qwen3")
    assert config.lora_paths == ("sql=/cache/adapters/sql", "chat=/cache/adapters/chat")
    args = gateway_args(parse_fleet("f", "default", spec))
    assert args[args.index("--fleet-model") + 1] == "f=scorer,qwen3,org/qwen3,sql,chat"


@pytest.mark.parametrize("model, message", [
    ({"name": "m", "aliases": ["m"]}, "given twice"),
    ({"loraAdapters": [{"name": "f", "path": "/a"}]}, "given twice"),  # the fleet's own name
    ({"aliases": ["a,b"]}, "may not hold ','"),
    ({"loraAdapters": [{"name": "base:sql", "path": "/a"}]}, "may not hold ':'"),
    ({"loraAdapters": [{"name": "sql"}]}, "needs a name and a path"),
], ids=["alias-is-the-name", "adapter-is-the-name", "comma", "colon", "no-path"])
def test_names_the_server_or_gateway_would_refuse_are_refused_at_the_door(model, message):
    with pytest.raises(SpecError, match=message):
        parse_fleet("f", "default", {"model": {"source": "m.gguf", **model}, "image": "x"})
