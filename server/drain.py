"""DrainingServer: uvicorn, with a SIGTERM that drains while still listening.

uvicorn's own SIGTERM closes the listening socket at once, so probes, scrapes and new requests got
"connection refused" while admitted work was still running. Here the first SIGTERM (or SIGINT)
only tells the engine to refuse new work (503, not ready); uvicorn keeps serving /metrics,
/get_load and the probes until the engine holds no sequence or the drain timeout passes, and only
then runs its shutdown. A second signal means now. Hooks: uvicorn's handle_exit and on_tick.
"""
from __future__ import annotations

import enum
import logging
import signal
import time

import uvicorn

from server.interfaces import ScoringService

log = logging.getLogger(__name__)


class DrainOutcome(enum.Enum):
    DRAINED = "drained"      # every admitted request was answered
    TIMED_OUT = "timed out"  # the drain timeout passed; what was left got 503
    FORCED = "forced"        # a second signal: exit now


def drain_outcome(num_sequences: int, now_s: float, deadline_s: float) -> DrainOutcome | None:
    """None while the drain goes on; otherwise how it ends. Pure."""
    if num_sequences == 0:
        return DrainOutcome.DRAINED
    if now_s >= deadline_s:
        return DrainOutcome.TIMED_OUT
    return None


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, engine: ScoringService,
                 drain_timeout_s: float) -> None:
        super().__init__(config)
        self.engine = engine
        self.drain_timeout_s = drain_timeout_s
        self.drain_started_s: float | None = None
        self.outcome: DrainOutcome | None = None  # set when a drain ends

    def handle_exit(self, sig: int, frame) -> None:
        # Runs in the signal handler: set state only; on_tick (on the event loop) acts on it.
        # NOTE: no super(): uvicorn would close the listener now and re-raise the signal at exit.
        if self.drain_started_s is None:
            self.drain_started_s = time.monotonic()
            self.engine.begin_drain()
            log.info("%s: draining (at most %.1f s); new requests get 503",
                     signal.Signals(sig).name, self.drain_timeout_s)
        else:
            log.warning("%s again: exiting now", signal.Signals(sig).name)
            self.outcome = DrainOutcome.FORCED
            self.should_exit = self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        """Called by uvicorn every 0.1 s; True ends its main loop (then it stops listening)."""
        if self.engine.load_failed:  # its ERROR line is written; nothing was admitted
            self.should_exit = True
        if self.drain_started_s is not None and self.outcome is None:
            now_s = time.monotonic()
            num_left = self.engine.load().num_reqs
            self.outcome = drain_outcome(num_left, now_s,
                                         self.drain_started_s + self.drain_timeout_s)
            if self.outcome is DrainOutcome.DRAINED:
                log.info("drained in %.1f s", now_s - self.drain_started_s)
            elif self.outcome is DrainOutcome.TIMED_OUT:
                log.warning("drain timed out after %.1f s; %d sequences left get 503",
                            now_s - self.drain_started_s, num_left)
            if self.outcome is not None:
                self.should_exit = True
        if self.outcome in (DrainOutcome.TIMED_OUT, DrainOutcome.FORCED):
            await self.engine.stop()  # answer what is left (503) before the connections close
        return await super().on_tick(counter)

    @property
    def exit_code(self) -> int:
        """0 when every admitted request was answered (or no signal came); 1 when work was cut;
        2 when the model did not load."""
        if self.engine.load_failed:
            return 2
        return 1 if self.outcome in (DrainOutcome.TIMED_OUT, DrainOutcome.FORCED) else 0
