"""`python -m gateway`: parse the flags, then serve until SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import logging
import sys

from gateway.access_log import access_logger_class
from gateway.app import count_answer, create_app
from gateway.config import parse_args
from gateway.connections import serve


def main(argv: list[str] | None = None) -> int:
    config, log_level = parse_args(argv)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(config)
    asyncio.run(serve(app, config.host, config.port, config.header_timeout_s,
                      config.max_connections, lambda: count_answer(app, 503),
                      access_logger_class(config.access_log_all)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
