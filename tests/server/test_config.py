"""ServerConfig: the device-dependent defaults are filled once, by resolve(), before anything is
built; the drain and header timeouts come from the command line with their defaults."""
from __future__ import annotations

import pytest

from scoringfleet_contract.facts import API_KEY_ENV
from server.config import COMPILE_ENV, ServerConfig, parse_args

RESOLVE_CASES = {
    "cpu-default-budget": ({}, "cpu", 4096),
    "cuda-default-budget": ({}, "cuda", 16384),
    "explicit-budget-kept-on-cpu": ({"max_prefill_tokens": 100}, "cpu", 100),
    "explicit-budget-kept-on-cuda": ({"max_prefill_tokens": 100}, "cuda", 100),
}


@pytest.mark.parametrize("fields, device, budget", RESOLVE_CASES.values(), ids=RESOLVE_CASES.keys())
def test_resolve_fills_what_depends_on_the_device(fields, device, budget):
    config = ServerConfig(**fields)
    assert not config.is_resolved
    resolved = config.resolve(device, "bfloat16")
    assert (resolved.device, resolved.dtype, resolved.max_prefill_tokens) == (device, "bfloat16",
                                                                              budget)
    assert resolved.is_resolved and resolved.to_dict()["device"] == device


@pytest.mark.parametrize("device, dtype", [("auto", "float32"), ("cpu", "auto"), ("tpu", "float32")])
def test_resolve_needs_a_concrete_device_and_dtype(device, dtype):
    with pytest.raises(ValueError, match="concrete device"):
        ServerConfig().resolve(device, dtype)


def test_the_drain_timeout_defaults_to_the_request_timeout():
    assert parse_args(["--request-timeout", "12"]).drain_timeout_s == 12
    assert parse_args(["--request-timeout", "12", "--drain-timeout", "3"]).drain_timeout_s == 3
    assert parse_args(["--drain-timeout", "0"]).drain_timeout_s == 0  # no waiting at all


def test_the_flags_defaults_are_the_configs():
    # each default is written once, in ServerConfig's field (header timeout, body limit, ...)
    assert parse_args([], environ={}) == ServerConfig()


def test_the_header_timeout_flag():
    assert parse_args(["--header-timeout", "0.5"]).header_timeout_s == 0.5


@pytest.mark.parametrize("argv, environ, key", [
    ([], {}, None),
    ([], {API_KEY_ENV: "from-env"}, "from-env"),
    ([], {API_KEY_ENV: ""}, None),                              # empty: no key
    (["--api-key", "from-flag"], {API_KEY_ENV: "from-env"}, "from-flag"),  # the flag wins
], ids=["none", "env", "empty-env", "flag-wins"])
def test_the_api_key_comes_from_the_env_var_unless_the_flag_gives_one(argv, environ, key):
    assert parse_args(argv, environ).api_key == key


@pytest.mark.parametrize(("argv", "environ"), [
    (["--api-key", ""], {}),
    ([], {API_KEY_ENV: "s3cret\n"}),  # a Secret made from a file that ends in a newline
    (["--api-key", " s3cret"], {}),
], ids=["empty-flag", "env-trailing-newline", "flag-leading-space"])
def test_a_key_no_header_could_match_is_a_usage_error(argv, environ, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, environ)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "API key must not be empty" in error and "s3cret" not in error


def test_the_api_key_is_never_in_the_config_repr():
    config = parse_args([], {API_KEY_ENV: "s3cret"})
    assert "s3cret" not in repr(config) and "s3cret" not in str(config.to_dict())


@pytest.mark.parametrize("argv, device, tokens", [
    ([], "cpu", 8192),
    ([], "cuda", 32768),
    (["--query-cache-tokens", "0"], "cuda", 0),                   # off
    (["--query-cache-tokens", "100"], "cpu", 100),
    (["--max-total-tokens", "5000"], "cuda", 5000),               # a default never above the pool
], ids=["cpu-default", "cuda-default", "off", "explicit", "default-capped"])
def test_the_query_cache_budget_is_filled_by_device(argv, device, tokens):
    config = parse_args(argv)
    assert not config.is_resolved or config.query_cache_tokens is not None
    assert config.resolve(device, "float32").query_cache_tokens == tokens


@pytest.mark.parametrize("argv", [["--query-cache-tokens", "-1"],
                                  ["--query-cache-tokens", "70000", "--max-total-tokens", "65536"]],
                         ids=["negative", "above-the-pool"])
def test_a_query_cache_budget_outside_the_token_pool_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert "query_cache_tokens must be in 0..max_total_tokens" in capsys.readouterr().err


@pytest.mark.parametrize("argv, environ, mode", [
    ([], {}, "auto"),
    (["--compile"], {}, "on"),                                    # the old switch still means on
    (["--compile", "off"], {}, "off"),
    ([], {COMPILE_ENV: "off"}, "off"),
    (["--compile", "auto"], {COMPILE_ENV: "off"}, "auto"),        # the flag wins
], ids=["default-auto", "bare-flag-on", "off", "env", "flag-wins"])
def test_compile_is_auto_unless_the_flag_or_its_env_var_says(argv, environ, mode):
    assert parse_args(argv, environ).compile == mode


@pytest.mark.parametrize("argv, environ", [(["--compile", "yes"], {}), ([], {COMPILE_ENV: "fast"})],
                         ids=["flag", "env"])
def test_an_unknown_compile_mode_is_a_usage_error(argv, environ, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, environ)
    assert exited.value.code == 2
    assert "compile" in capsys.readouterr().err
