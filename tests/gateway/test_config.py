"""gateway.config: flags -> GatewayConfig; a bad flag exits 2 with a message."""
import pytest

from gateway.config import FleetSource, GatewayConfig, build_parser, parse_args
from scoringfleet_contract.facts import API_KEY_ENV


def test_defaults_follow_the_contract():
    config, _ = parse_args(["--worker-urls", "http://127.0.0.1:30001/"])
    assert config == GatewayConfig(worker_urls=("http://127.0.0.1:30001",))
    assert (config.host, config.port, config.policy) == ("127.0.0.1", 30080, "power_of_two")
    assert (config.load_interval_s, config.queue_timeout_s) == (0.05, 30.0)
    assert (config.max_waiting_requests, config.request_timeout_s) == (1024, 120.0)


def test_cache_aware_flags():
    config, _ = parse_args(["--worker-urls", "http://a:1", "--policy", "cache_aware"])
    assert (config.policy, config.recompute_charge) == ("cache_aware", 3.0)
    config, _ = parse_args(["--worker-urls", "http://a:1", "--recompute-charge", "0",
                            "--max-tracked-queries", "100"])
    assert (config.recompute_charge, config.max_tracked_queries) == (0.0, 100)


def test_the_old_balance_thresholds_are_accepted_and_not_used():
    # A command line of the count-threshold version still starts (any value); routing ignores them.
    config, _ = parse_args(["--worker-urls", "http://a:1", "--policy", "cache_aware",
                            "--balance-abs-threshold", "-1", "--balance-rel-threshold", "0.5"])
    assert config.policy == "cache_aware"
    assert "not used" in build_parser().format_help()


def test_fleet_discovery_flags():
    config, _ = parse_args(["--fleet", "f", "--namespace", "ns", "--host", "0.0.0.0"])
    assert (config.fleet, config.namespace, config.worker_urls) == (("f",), "ns", ())


@pytest.mark.parametrize("argv, message", [
    ([], "exactly one of --worker-urls or --fleet"),
    (["--fleet", "f", "--worker-urls", "http://a:1"], "exactly one of"),
    (["--worker-urls", "a:1"], "not an http(s)://host:port URL"),
    (["--worker-urls", "http://a:1", "--load-interval", "0"], "--load-interval must be > 0"),
    (["--worker-urls", "http://a:1", "--queue-timeout", "-1"], "--queue-timeout must be >= 0"),
    (["--worker-urls", "http://a:1", "--max-waiting-requests", "-1"], "must be >= 0"),
    (["--worker-urls", "http://a:1", "--port", "0"], "--port must be in 1..65535"),
    (["--worker-urls", "http://a:1", "--policy", "random"], "invalid choice"),
    (["--worker-urls", "http://a:1", "--recompute-charge", "-1"], "--recompute-charge must be >= 0"),
    (["--worker-urls", "http://a:1", "--recompute-charge", "nan"], "--recompute-charge must be >= 0"),
    (["--worker-urls", "http://a:1", "--max-tracked-queries", "0"], "--max-tracked-queries must be >= 1"),
], ids=["no-workers", "both", "no-scheme", "interval", "timeout", "waiting", "port", "policy",
        "charge-negative", "charge-nan", "tracked-queries"])
def test_bad_flag_exits_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_flags_defaults_are_the_configs():
    # each default is written once, in GatewayConfig's field; a source of workers is required
    assert parse_args(["--fleet", "f"], environ={}) == (GatewayConfig(fleet=("f",)), "info")
    config, _ = parse_args(["--worker-urls", "http://a:1/"], environ={})
    assert config == GatewayConfig(worker_urls=("http://a:1",))  # a tuple, the trailing / gone


@pytest.mark.parametrize("argv, environ, key", [
    ([], {API_KEY_ENV: "from-env"}, "from-env"),
    ([], {API_KEY_ENV: ""}, None),                                          # empty: no key
    (["--api-key", "from-flag"], {API_KEY_ENV: "from-env"}, "from-flag"),   # the flag wins
], ids=["env", "empty-env", "flag-wins"])
def test_the_api_key_comes_from_the_env_var_unless_the_flag_gives_one(argv, environ, key):
    config, _ = parse_args(["--worker-urls", "http://a:1", *argv], environ)
    assert config.api_key == key
    assert "from-" not in repr(config)            # never in a log line or a traceback


@pytest.mark.parametrize("flag, value, message", [
    ("--max-request-bytes", "0", "--max-request-bytes must be >= 1"),
    ("--max-connections", "0", "--max-connections must be >= 1"),
    ("--header-timeout", "0", "--header-timeout must be > 0"),
    ("--api-key", "", "must not be empty"),
    ("--api-key", "key\n", "nor begin or end with whitespace"),
    ("--api-key", " key", "nor begin or end with whitespace"),
], ids=["bytes", "connections", "header-timeout", "empty-key", "trailing-newline", "leading-space"])
def test_bad_door_flags_exit_2(flag, value, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--worker-urls", "http://a:1", flag, value], environ={})
    assert exited.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, fleets", [
    (["--worker-urls", "http://a:1/"], [FleetSource("default", ("http://a:1",))]),
    (["--fleet", "a", "--fleet", "b=http://b:1,http://b:2/"],
     [FleetSource("a", None), FleetSource("b", ("http://b:1", "http://b:2"))]),
    (["--fleet", "a", "--fleet-model", "a=m1,m2", "--fleet-model", "a=m3"],
     [FleetSource("a", None, ("m1", "m2", "m3"))]),
    (["--worker-urls", "http://a:1", "--fleet-model", "default=m"], [FleetSource("default", ("http://a:1",), ("m",))]),
], ids=["worker-urls", "discovered-and-static", "models-repeated", "models-of-default"])
def test_fleets_from_the_flags(argv, fleets):
    config, _ = parse_args(argv, environ={})
    assert list(config.fleets) == fleets


@pytest.mark.parametrize("argv, message", [
    (["--fleet", "a", "--fleet", "a"], "that name twice"),
    (["--fleet", "=http://a:1"], "a name is required"),
    (["--fleet", "a="], "names no URL"),
    (["--fleet", "a=ftp://x"], "--fleet: 'ftp://x' is not an http"),
    (["--fleet", "a", "--fleet-model", "b=m"], "for a fleet given (a)"),
    (["--fleet", "a", "--fleet-model", "a="], "NAME=MODEL"),
], ids=["twice", "no-name", "no-url", "bad-url", "model-of-unknown-fleet", "no-model"])
def test_bad_fleet_flags_exit_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, environ={})
    assert exited.value.code == 2 and message in capsys.readouterr().err
