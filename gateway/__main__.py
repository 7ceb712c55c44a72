"""`python -m gateway`: parse the flags, then serve until SIGTERM/SIGINT."""
from __future__ import annotations

import logging
import sys

from aiohttp import web

from gateway.access_log import access_logger_class
from gateway.app import create_app
from gateway.config import parse_args


def main(argv: list[str] | None = None) -> int:
    config, log_level = parse_args(argv)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    web.run_app(create_app(config), host=config.host, port=config.port, print=None,
                access_log=logging.getLogger("aiohttp.access"),
                access_log_class=access_logger_class(config.access_log_all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
