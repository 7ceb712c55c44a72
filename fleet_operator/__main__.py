"""`python -m fleet_operator [kopf run options]`, e.g. `--standalone -A` or `-n NS --liveness=...`.

Every option is kopf's own `kopf run` option, passed through; the handlers come from a fresh
registry (not kopf's process-global one) and the settings below.
"""
from __future__ import annotations

import logging
import os
import sys

import kopf
from kopf import cli

from fleet_operator import handlers, peering_watch
from fleet_operator.context import OperatorConfig
from fleet_operator.names import ANNOTATION_PREFIX
from fleet_operator.peering import IDENTITY_ENV, PeeringConfig

# A fleet deleted while one of its timers runs a handler (a tick mid-scrape) keeps its finalizer
# until kopf looks again: every 60 s by default, so a `kubectl delete` could wait a minute. Looking
# every second bounds a deletion by the running tick (a scrape times out within 2 s) plus a second.
CANCELLATION_POLLING_S = 1.0


def make_settings(peering: PeeringConfig | None = None) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # kopf's bookkeeping in our own annotations, not in .status (the CRD's schema would prune it).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    # Timers make kopf put a finalizer on each fleet: name it after us, not after kopf.
    settings.persistence.finalizer = f"{ANNOTATION_PREFIX}/finalizer"
    # The operator posts its own Events (InvalidSpec, Reconciled); kopf's per-handler ones are noise.
    settings.posting.level = logging.WARNING
    settings.background.cancellation_polling = CANCELLATION_POLLING_S
    if peering is not None:
        # kopf's keep-alive: every lifetime - 5..10 s (at least 1 s); a dead peer is noticed after
        # its lifetime, a leaving one at once (it writes itself out).
        settings.peering.lifetime = peering.lifetime_s
        settings.peering.priority = peering.priority
    return settings


def kopf_run_params(args: list[str]) -> dict:
    """`kopf run`'s options as kopf itself will read them: the command line, then the KOPF_RUN_*
    environment (kopf's group gives `run` that prefix: KOPF_RUN_STANDALONE=1 is --standalone)."""
    return cli.run.make_context("run", list(args), resilient_parsing=True,
                                auto_envvar_prefix="KOPF_RUN").params


def make_registry(config: OperatorConfig, peering: PeeringConfig | None = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    handlers.register(registry, config)
    peering_watch.register(registry, peering or PeeringConfig())  # after: it wraps start's client
    return registry


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    peering = PeeringConfig.from_run_args(kopf_run_params(args))
    os.environ[IDENTITY_ENV] = peering.identity  # kopf names this peer by it too
    controls = cli.CLIControls(registry=make_registry(OperatorConfig.from_env(), peering),
                               settings=make_settings(peering))
    cli.main(args=["run", *args], obj=controls, prog_name="python -m fleet_operator")


if __name__ == "__main__":
    main()
