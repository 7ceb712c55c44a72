"""spec.server.rerankTemplate: a built-in's name becomes --rerank-template NAME; a ConfigMap key is
mounted read-only and passed as the file; left out, no flag (the server picks by model). The flags
run through the server's own parser, and the Deployment validates against Kubernetes' schema."""
from __future__ import annotations

import kubernetes_validate
import pytest

from fleet_operator.builders import build_deployment
from fleet_operator.spec.fleet import ConfigMapKeyRef, SpecError, parse_fleet
from server.config import parse_args

BASE = {"model": {"source": "Qwen/Qwen3-Reranker-0.6B"}, "image": "registry.example/scoring-fleet:1"}
REF = {"configMapKeyRef": {"name": "rerank", "key": "legal.json"}}


def fleet(template):
    server = {} if template is None else {"rerankTemplate": template}
    return parse_fleet("f", "default", {**BASE, "server": server})


def pod(deployment):
    return deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize("template, parsed", [
    (None, None),
    ({"builtin": "qwen3-reranker"}, "qwen3-reranker"),
    ({"builtin": "yes-no"}, "yes-no"),
    (REF, ConfigMapKeyRef(name="rerank", key="legal.json")),
], ids=["left-out", "qwen3", "yes-no", "config-map"])
def test_the_template_is_parsed(template, parsed):
    assert fleet(template).server.rerank_template == parsed


@pytest.mark.parametrize("template, message", [
    ({}, "spec.server.rerankTemplate takes exactly one of builtin and configMapKeyRef"),
    ({"builtin": "yes-no", **REF}, "takes exactly one of builtin and configMapKeyRef"),
    ({"builtin": "bge"}, "spec.server.rerankTemplate.builtin must be one of qwen3-reranker, yes-no"),
    ({"configMapKeyRef": {"name": "rerank"}}, "spec.server.rerankTemplate.configMapKeyRef.key is required"),
    ({"configMapKeyRef": "rerank"}, "spec.server.rerankTemplate.configMapKeyRef must be an object"),
], ids=["neither", "both", "unknown-builtin", "no-key", "ref-not-object"])
def test_a_bad_template_is_a_spec_error(template, message):
    with pytest.raises(SpecError, match=message):
        fleet(template)


@pytest.mark.parametrize("template, flag", [
    (None, None), ({"builtin": "qwen3-reranker"}, "qwen3-reranker"),
    (REF, "/etc/scoringfleet/rerank/template.json")], ids=["left-out", "builtin", "config-map"])
def test_the_server_gets_the_flag_its_parser_takes(template, flag):
    deployment = build_deployment(fleet(template))
    assert parse_args(pod(deployment)["containers"][0]["args"]).rerank_template == flag


def test_a_config_map_key_is_mounted_read_only_as_the_file():
    spec = pod(build_deployment(fleet(REF)))
    [volume] = [v for v in spec["volumes"] if v["name"] == "rerank-template"]
    assert volume["configMap"] == {"name": "rerank", "items": [{"key": "legal.json", "path": "template.json"}]}
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "rerank-template"]
    assert mount == {"name": "rerank-template", "mountPath": "/etc/scoringfleet/rerank", "readOnly": True}


@pytest.mark.parametrize("template", [None, {"builtin": "yes-no"}], ids=["left-out", "builtin"])
def test_no_volume_without_a_config_map(template):
    spec = pod(build_deployment(fleet(template)))
    assert "rerank-template" not in {v["name"] for v in spec["volumes"]}


def test_the_deployment_with_a_config_map_template_validates():
    kubernetes_validate.validate(build_deployment(fleet(REF)), "1.33.0", strict=True)
