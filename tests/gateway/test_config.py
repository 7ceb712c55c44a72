"""gateway.config: flags -> GatewayConfig; a bad flag exits 2 with a message."""
import pytest

from gateway.config import GatewayConfig, parse_args


def test_defaults_follow_the_contract():
    config, _ = parse_args(["--worker-urls", "http://127.0.0.1:30001/"])
    assert config == GatewayConfig(worker_urls=("http://127.0.0.1:30001",))
    assert (config.host, config.port, config.policy) == ("127.0.0.1", 30080, "power_of_two")
    assert (config.load_interval_s, config.queue_timeout_s) == (0.05, 30.0)
    assert (config.max_waiting_requests, config.request_timeout_s) == (1024, 120.0)


def test_fleet_discovery_flags():
    config, _ = parse_args(["--fleet", "f", "--namespace", "ns", "--host", "0.0.0.0"])
    assert (config.fleet, config.namespace, config.worker_urls) == ("f", "ns", ())


@pytest.mark.parametrize("argv, message", [
    ([], "exactly one of --worker-urls or --fleet"),
    (["--fleet", "f", "--worker-urls", "http://a:1"], "exactly one of"),
    (["--worker-urls", "a:1"], "not an http(s)://host:port URL"),
    (["--worker-urls", "http://a:1", "--load-interval", "0"], "--load-interval must be > 0"),
    (["--worker-urls", "http://a:1", "--queue-timeout", "-1"], "--queue-timeout must be >= 0"),
    (["--worker-urls", "http://a:1", "--max-waiting-requests", "-1"], "must be >= 0"),
    (["--worker-urls", "http://a:1", "--port", "0"], "--port must be in 1..65535"),
    (["--worker-urls", "http://a:1", "--policy", "random"], "invalid choice"),
], ids=["no-workers", "both", "no-scheme", "interval", "timeout", "waiting", "port", "policy"])
def test_bad_flag_exits_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
