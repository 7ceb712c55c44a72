"""`python -m fleet_operator [kopf run options]`, e.g. `--standalone -A` or `-n NS --liveness=...`.

Every option is kopf's own `kopf run` option, passed through; the handlers come from a fresh
registry (not kopf's process-global one) and the settings below.
"""
from __future__ import annotations

import logging
import sys

import kopf
from kopf import cli

from fleet_operator import handlers
from fleet_operator.context import OperatorConfig
from fleet_operator.names import ANNOTATION_PREFIX


def make_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # kopf's bookkeeping in our own annotations, not in .status (the CRD's schema would prune it).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    # Timers make kopf put a finalizer on each fleet: name it after us, not after kopf.
    settings.persistence.finalizer = f"{ANNOTATION_PREFIX}/finalizer"
    # The operator posts its own Events (InvalidSpec, Reconciled); kopf's per-handler ones are noise.
    settings.posting.level = logging.WARNING
    return settings


def make_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    handlers.register(registry, config)
    return registry


def main(argv: list[str] | None = None) -> None:
    registry = make_registry(OperatorConfig.from_env())
    controls = cli.CLIControls(registry=registry, settings=make_settings())
    cli.main(args=["run", *(sys.argv[1:] if argv is None else argv)], obj=controls,
             prog_name="python -m fleet_operator")


if __name__ == "__main__":
    main()
