"""The Grafana dashboard (charts/scoring-fleet/files/dashboards/): its panels and variables, every
query through promtool (`promtool check rules` on a rule file made of them, variables substituted),
and every metric name it reads exported by a live server's /metrics, a live gateway's /metrics, the
chart's recording rules, or (named here, only for the replicas panels) kube-state-metrics."""
from __future__ import annotations

import os
import shutil
import subprocess

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.support import gateway_process, score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving
from tests.packaging.dashboard_queries import DASHBOARDS, expressions, load, metric_names

RULES = DASHBOARDS.parent / "prometheus-rules.yaml"
# kube-state-metrics' Deployment series: the only names the dashboard takes from outside the
# project (desired vs ready replicas, and its changes: the scale decisions carried out).
KUBE_STATE_METRICS = {"kube_deployment_spec_replicas", "kube_deployment_status_replicas_ready"}
SAMPLE_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
                                                                    "_created"),
                   "summary": ("", "_count", "_sum", "_created"), "gauge": ("",)}
FILES = sorted(DASHBOARDS.glob("*.json"))


def test_the_chart_ships_a_dashboard():
    assert [path.name for path in FILES] == ["scoringfleet.json"]


@pytest.fixture(scope="module", params=FILES, ids=lambda path: path.name)
def dashboard(request) -> dict:
    return load(request.param)


def test_it_has_the_panels_the_issue_asks_for(dashboard):
    titles = [panel["title"] for panel in dashboard["panels"]]
    assert len(titles) >= 8 and len(set(titles)) == len(titles)
    wanted = ["requests/s by code", "errors/s by code", "Gateway: latency P50 / P99",
              "Server: latency P50 / P99", "Running and waiting per pod", "Fleet load vs target",
              "desired vs ready", "Scale decisions", "Items/s and tokens/s", "Padding share",
              "queue time"]
    assert [w for w in wanted if not any(w.lower() in t.lower() for t in titles)] == []
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(titles)


def test_every_query_is_scoped_by_the_namespace_and_fleet_variables(dashboard):
    names = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert {"namespace", "fleet", "datasource"} <= names
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert 'namespace="$namespace"' in target["expr"] and '="$fleet"' in target["expr"], \
                (panel["title"], target["expr"])


def test_panels_do_not_overlap_on_the_grid(dashboard):
    cells = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not mine & cells, panel["title"]
        cells |= mine


@pytest.fixture(scope="module")
def promtool() -> str:
    # Not a skip: an unchecked query is what this test is about (as test_prometheus_rules).
    path = shutil.which(os.environ.get("PROMTOOL", "promtool"))
    if path is None:
        pytest.fail("promtool not found: `make setup` installs Debian's prometheus package, or set "
                    "PROMTOOL to a promtool binary", pytrace=False)
    return path


def _check_rules(promtool: str, tmp_path, exprs: list[str]) -> subprocess.CompletedProcess:
    rules = [{"record": f"dashboard:query_{i}:check", "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)


def test_every_query_passes_promtool(dashboard, promtool, tmp_path):
    found = expressions(dashboard)
    out = _check_rules(promtool, tmp_path, [expr for _, expr in found])
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(found)} rules found" in out.stdout, out.stdout


def test_promtool_rejects_a_broken_query(promtool, tmp_path):
    """The check above can fail: a query with a stray parenthesis does not pass."""
    out = _check_rules(promtool, tmp_path, ["sum(rate(sglang:num_requests_total[1m])"])
    assert out.returncode != 0


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (code) (rate(scoringfleet_gateway_requests_total{namespace="a", code!~"2.."}[1m]))',
     {"scoringfleet_gateway_requests_total"}),
    ("histogram_quantile(0.99, sum by (le) (rate(sglang:queue_time_seconds_bucket[5m])))",
     {"sglang:queue_time_seconds_bucket"}),
    ("32 * sum(scoringfleet:pod_up:min) offset 1m", {"scoringfleet:pod_up:min"}),
    ("a / on (pod) group_left (x) b and c unless d or bool e", {"a", "b", "c", "d", "e"}),
    ('up{job="sum(fake_metric)"}', {"up"}),
])
def test_metric_names_finds_the_selected_names(expr, names):
    assert metric_names(expr) == names


def _exported(text: str) -> set[str]:
    """Every sample name a /metrics text can carry: a labelled family with no child yet (a
    counter by code before its first answer) still declares its name and type."""
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))}
        names |= {sample.name for sample in family.samples}
    return names


@pytest.fixture(scope="module")
def exported_names(tmp_path_factory) -> set[str]:
    """What a live server and a live gateway in front of it export, after one score request,
    plus the chart's recording rules."""
    log = tmp_path_factory.mktemp("gateway") / "gateway.log"
    with serving(FakeRunner()) as (worker, _), \
            gateway_process("--worker-urls", worker, log_path=log) as gateway:
        assert httpx.post(f"{gateway}/v1/score", json=score_body(), timeout=10).status_code == 200
        server_text = httpx.get(f"{worker}/metrics", timeout=5).text
        gateway_text = httpx.get(f"{gateway}/metrics", timeout=5).text
    rules = yaml.safe_load(RULES.read_text())
    recorded = {rule["record"] for group in rules["groups"] for rule in group["rules"]
                if "record" in rule}
    return _exported(server_text) | _exported(gateway_text) | recorded


def test_every_metric_the_dashboard_reads_is_exported_or_recorded(dashboard, exported_names):
    unknown = {where: sorted(metric_names(expr) - exported_names - KUBE_STATE_METRICS)
               for where, expr in expressions(dashboard)}
    assert {where: names for where, names in unknown.items() if names} == {}
    read = set().union(*(metric_names(expr) for _, expr in expressions(dashboard)))
    # The names this dashboard is for: the gateway's histogram, the recorded load, padding.
    assert {"scoringfleet_gateway_request_duration_seconds_bucket", "scoringfleet:load:sum",
            "sglang:padding_tokens_total", "sglang:computed_tokens_total",
            "sglang:e2e_request_latency_seconds_bucket", "sglang:queue_time_seconds_bucket"} <= read


def test_a_name_nobody_exports_is_caught(exported_names):
    assert metric_names("rate(sglang:no_such_metric_total[1m])") - exported_names == \
        {"sglang:no_such_metric_total"}


def test_the_layout_renders_as_a_png(tmp_path):
    from tools import render_dashboard

    out = tmp_path / "dashboard.png"
    assert render_dashboard.main([str(FILES[0]), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
