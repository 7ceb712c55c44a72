"""Which requests uvicorn's access log (logger `uvicorn.access`) writes a line for.

Probes (/health, /health_generate, /ready), the gateway's /get_load polls and Prometheus' /metrics
scrapes come many times a second per worker (~15 lines/s per gateway, 8,525 lines in 10 minutes)
and buried the lines that matter, so by default they write none; `--access-log-all` keeps every
line. Owns only that choice: uvicorn's own logging config, with a filter on its access handler.
"""
from __future__ import annotations

import copy
import logging

from uvicorn.config import LOGGING_CONFIG

from scoringfleet_contract.facts import is_quiet


class QuietPathsFilter(logging.Filter):
    """Drops uvicorn's access records for the quiet paths (scoringfleet_contract.facts). uvicorn logs each request as
    (client address, method, full path, HTTP version, status code) in `record.args`."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (isinstance(args, tuple) and len(args) >= 3 and is_quiet(str(args[2])))


def uvicorn_log_config(access_log_all: bool) -> dict:
    """uvicorn's default logging config, plus the filter unless every line is wanted."""
    config = copy.deepcopy(LOGGING_CONFIG)
    if not access_log_all:
        # NOTE: on the access handler, not the logger: dictConfig replaces a logger's handlers
        # but keeps its filters, so a second server in one process could not log them again.
        config.setdefault("filters", {})["quiet_paths"] = {"()": QuietPathsFilter}
        config["handlers"]["access"]["filters"] = ["quiet_paths"]
    return config
