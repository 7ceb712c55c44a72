"""Copy the ScoringFleet CRD (crds/scoringfleet.yaml, its one source) into the Helm chart.

A chart can only read files inside its own folder, so charts/scoring-fleet/files/ holds a byte-for-byte
copy that templates/crd.yaml renders. Run this after editing the CRD; `--check` exits 1 when the copy
is stale (the packaging tests assert the same).

    python tools/sync_crd.py [--check]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "crds" / "scoringfleet.yaml"
CHART_COPY = ROOT / "charts" / "scoring-fleet" / "files" / "scoringfleet.crd.yaml"


def is_in_sync(source: Path = SOURCE, copy: Path = CHART_COPY) -> bool:
    """True when the chart's copy has exactly the source's bytes."""
    return copy.is_file() and copy.read_bytes() == source.read_bytes()


def sync(source: Path = SOURCE, copy: Path = CHART_COPY) -> bool:
    """Write the copy if it differs; returns whether anything changed."""
    if is_in_sync(source, copy):
        return False
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(source.read_bytes())
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        if is_in_sync():
            return 0
        print(f"{CHART_COPY.relative_to(ROOT)} differs from {SOURCE.relative_to(ROOT)}: "
              "run python tools/sync_crd.py", file=sys.stderr)
        return 1
    changed = sync()
    print(f"{CHART_COPY.relative_to(ROOT)}: {'updated' if changed else 'already in sync'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
