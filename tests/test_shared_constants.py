"""Facts spelled in two or three programs that may not import each other.

The import contracts keep the server, the gateway and the operator apart, so where the operator
renders what another program reads (an env var's name) or must wait for what another does (a
shutdown bound), each keeps its own constant and one test here ties them.
"""
from fleet_operator.builders.gateway import GATEWAY_GRACE_S, GATEWAY_SHUTDOWN_S, build_gateway_deployment
from fleet_operator.builders.pods import API_KEY_ENV as OPERATOR_RENDERS
from fleet_operator.spec import parse_fleet
from gateway.config import API_KEY_ENV as GATEWAY_READS
from gateway.connections import SHUTDOWN_TIMEOUT_S
from server.config import API_KEY_ENV as SERVER_READS


def test_the_operator_renders_the_name_the_server_and_the_gateway_read():
    assert OPERATOR_RENDERS == SERVER_READS == GATEWAY_READS == "SCORINGFLEET_API_KEY"


def test_the_gateway_pods_grace_covers_the_gateways_own_shutdown():
    assert GATEWAY_SHUTDOWN_S == SHUTDOWN_TIMEOUT_S
    fleet = parse_fleet("qwen", "team-a", {"model": {"source": "Qwen/Qwen3-0.6B"}, "image": "img:1",
                                           "gateway": {"enabled": True}})
    pod = build_gateway_deployment(fleet)["spec"]["template"]["spec"]
    # the preStop sleep runs first, inside the grace period, then the shutdown
    assert pod["terminationGracePeriodSeconds"] == GATEWAY_GRACE_S > 5 + SHUTDOWN_TIMEOUT_S
    assert pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][0] == "python"
