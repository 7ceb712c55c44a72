"""/get_server_info names the model as gateways list it (SGLang's reads served_model_name)."""
import pytest

from server.config import ServerConfig


@pytest.mark.parametrize("config, name", [
    (ServerConfig(), "SmolLM2-135M-Instruct"),            # the embedded model, not "default"
    (ServerConfig(model_path="/models/qwen"), "/models/qwen"),
    (ServerConfig(served_model_name="scorer"), "scorer"),
], ids=["embedded", "path", "served-name"])
def test_served_model_name_is_the_name_clients_see(config, name):
    info = config.to_dict()
    assert info["served_model_name"] == config.model_name == name
    assert info["model_path"] == config.model_path  # the effective argument, unchanged
