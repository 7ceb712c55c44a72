"""Which requests the gateway's access log (aiohttp's `aiohttp.access`) writes a line for.

Probes (/health, /ready, /health_generate), /metrics scrapes and /get_load come many times a second
and would bury the score requests' lines, so by default they write none; `--access-log-all` keeps
every line. Owns only that choice (an aiohttp access-logger class); lines are INFO.
"""
from __future__ import annotations

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_log import AccessLogger

from scoringfleet_contract.facts import is_quiet


class QuietAccessLogger(AccessLogger):
    """aiohttp's access logger, silent for the quiet paths (scoringfleet_contract.facts)."""

    def log(self, request, response, time: float) -> None:
        if not is_quiet(request.path):
            super().log(request, response, time)


def access_logger_class(access_log_all: bool) -> type[AbstractAccessLogger]:
    return AccessLogger if access_log_all else QuietAccessLogger
