"""`helm lint` through the real Helm library: the chart is clean, and a broken one is caught."""
from __future__ import annotations

import shutil

from tests.packaging.helm_tool import CHART, SEVERITY_WARNING


def _problems(report: dict) -> list[dict]:
    # helm-sdkpy returns the messages with empty error texts: judge by severity.
    return [m for m in report["Messages"] if m["Severity"] >= SEVERITY_WARNING]


def test_chart_lints_clean(helm):
    report = helm.lint(CHART)
    assert report["TotalChartsLinted"] == 1
    assert not report["Errors"]
    assert _problems(report) == []


def test_lint_catches_a_broken_template(helm, tmp_path):
    # Counterfactual for the test above: lint really renders the templates.
    broken = tmp_path / "scoring-fleet"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "broken.yaml").write_text("{{ .Values.nope.deeper }}\n")
    assert _problems(helm.lint(broken)) != []
