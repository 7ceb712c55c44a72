"""The API key's env var is spelled in three programs that may not import each other.

The operator renders it from the fleet's Secret into the server's and the gateway's pods; each program
reads it by its own constant (the import contracts keep them apart), so one test ties the three.
"""
from fleet_operator.builders.deployment import API_KEY_ENV as OPERATOR_RENDERS
from gateway.config import API_KEY_ENV as GATEWAY_READS
from server.config import API_KEY_ENV as SERVER_READS


def test_the_operator_renders_the_name_the_server_and_the_gateway_read():
    assert OPERATOR_RENDERS == SERVER_READS == GATEWAY_READS == "SCORINGFLEET_API_KEY"
