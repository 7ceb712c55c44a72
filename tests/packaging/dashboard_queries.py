"""The dashboard's queries as the tests check them: every PromQL expression of
charts/scoring-fleet/files/dashboards/*.json (panel targets and the variables' label_values
selectors), with Grafana's variables substituted, and the metric names an expression reads."""
from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARDS = Path(__file__).resolve().parents[2] / "charts" / "scoring-fleet" / "files" / "dashboards"
# What Grafana puts in before a query reaches Prometheus (examples of each).
SUBSTITUTIONS = {"$__rate_interval": "1m", "$__interval": "15s", "${datasource}": "prometheus",
                 "$namespace": "team-a", "$fleet": "scorer", "$target_load": "32"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "atan2"}
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)$")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def substitute(expr: str) -> str:
    for variable, value in sorted(SUBSTITUTIONS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(variable, value)
    if "$" in expr:
        raise ValueError(f"a variable the tests do not know is left in {expr!r}")
    return expr


def expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL with the variables substituted) for every query the dashboard runs."""
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((f"panel {panel['id']} {panel['title']!r} {target['refId']}",
                          substitute(target["expr"])))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) \
                else variable["query"]
            match = LABEL_VALUES.match(query)
            if match is None:
                raise ValueError(f"variable {variable['name']}: not label_values(selector, label)")
            found.append((f"variable {variable['name']}", substitute(match[1])))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers outside strings, label matchers,
    ranges and grouping clauses, that are not functions, keywords or a number's unit."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*", text):
        is_function = text[match.end():].lstrip().startswith("(")
        if not is_function and match[0].lower() not in KEYWORDS:
            names.add(match[0])
    return names
