"""Draw a Grafana dashboard's layout (its panel grid, titles and series) as a PNG, for the docs: no
Grafana here, so this is the layout, not a screenshot. Reads the JSON the chart ships.

    python tools/render_dashboard.py [charts/scoring-fleet/files/dashboards/scoringfleet.json] \
        [--out docs/dashboard.png]
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DASHBOARD = ROOT / "charts" / "scoring-fleet" / "files" / "dashboards" / "scoringfleet.json"
GRID_COLUMNS = 24  # Grafana's grid is 24 columns wide; a row unit is 30 px
COLORS = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1")


def _variables(dashboard: dict) -> str:
    return "   ".join(f"{v.get('label') or v['name']}: [{v['name']}]"
                      for v in dashboard["templating"]["list"])


def _draw_panel(axes, panel: dict, height: int) -> None:
    from matplotlib.patches import Rectangle

    pos = panel["gridPos"]
    x, y, w, h = pos["x"], height - pos["y"] - pos["h"], pos["w"], pos["h"]
    axes.add_patch(Rectangle((x + 0.1, y + 0.1), w - 0.2, h - 0.2, facecolor="#1f1f24",
                             edgecolor="#44444c"))
    axes.text(x + 0.4, y + h - 0.6, panel["title"], color="white", fontsize=9, va="top",
              weight="bold")
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    axes.text(x + w - 0.4, y + h - 0.6, unit, color="#9a9aa0", fontsize=7, va="top", ha="right")
    for i, target in enumerate(panel.get("targets", [])):
        legend = target.get("legendFormat") or target["refId"]
        color = COLORS[i % len(COLORS)]
        line_y = y + h - 2.0 - i * 0.9
        axes.plot([x + 0.5, x + 1.3], [line_y, line_y], color=color, linewidth=2)
        axes.text(x + 1.5, line_y, legend, color="#d8d9da", fontsize=7, va="center")
    description = "\n".join(textwrap.wrap(panel.get("description", ""), width=int(w * 8.5)))
    axes.text(x + 0.4, y + 0.4, description, color="#9a9aa0", fontsize=6, va="bottom")


def render(dashboard: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    figure = plt.figure(figsize=(16, 16 * (height + 2) / GRID_COLUMNS / 1.6), facecolor="#111217")
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, GRID_COLUMNS)
    axes.set_ylim(0, height + 2)
    axes.axis("off")
    axes.text(0.2, height + 1.3, dashboard["title"], color="white", fontsize=14, weight="bold",
              va="center")
    axes.text(0.2, height + 0.5, _variables(dashboard), color="#9a9aa0", fontsize=8, va="center")
    for panel in dashboard["panels"]:
        _draw_panel(axes, panel, height)
    figure.savefig(out, dpi=80, facecolor=figure.get_facecolor())
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dashboard", nargs="?", type=Path, default=DEFAULT_DASHBOARD)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    args = parser.parse_args(argv)
    render(json.loads(args.dashboard.read_text()), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
