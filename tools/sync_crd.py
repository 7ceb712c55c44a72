"""Copy the ScoringFleet CRD (crds/scoringfleet.yaml, its one source) into the Helm chart and the operator.

A chart can only read files inside its own folder, so charts/scoring-fleet/files/ holds a byte-for-byte
copy that templates/crd.yaml renders; fleet_operator/ holds another, package data that the operator's
parser reads its defaults and bounds from (fleet_operator/spec/crd.py). Run this after editing the CRD;
`--check` exits 1 when a copy is stale (the packaging and operator tests assert the same).

    python tools/sync_crd.py [--check]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "crds" / "scoringfleet.yaml"
CHART_COPY = ROOT / "charts" / "scoring-fleet" / "files" / "scoringfleet.crd.yaml"
PACKAGE_COPY = ROOT / "fleet_operator" / "scoringfleet.crd.yaml"
COPIES = (CHART_COPY, PACKAGE_COPY)


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
        stale = [copy for copy in COPIES if not is_in_sync(SOURCE, copy)]
        for copy in stale:
            print(f"{copy.relative_to(ROOT)} differs from {SOURCE.relative_to(ROOT)}: "
                  "run python tools/sync_crd.py", file=sys.stderr)
        return 1 if stale else 0
    for copy in COPIES:
        changed = sync(SOURCE, copy)
        print(f"{copy.relative_to(ROOT)}: {'updated' if changed else 'already in sync'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
