"""`python -m server`: load the model, then serve. SIGTERM stops admission and drains."""
from __future__ import annotations

import logging
import sys

import torch
import uvicorn

from server.app import create_app
from server.config import ServerConfig, parse_args
from server.cpus import detect_usable_cpus
from server.engine import Engine
from server.model_loader import ModelLoadError, load_model, resolve_device, resolve_dtype
from server.model_runner import ModelRunner

log = logging.getLogger("server")


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT, first tell the engine to refuse new work (503, not ready), then let
    uvicorn finish the requests in flight and run the lifespan shutdown (which drains the queue)."""

    def __init__(self, config: uvicorn.Config, engine: Engine) -> None:
        super().__init__(config)
        self.engine = engine

    def handle_exit(self, sig, frame) -> None:
        self.engine.begin_drain()
        super().handle_exit(sig, frame)
        # NOTE: uvicorn re-raises the signals it caught once run() returns (so that an embedding
        # program sees them); here the signal *is* the request to drain and exit, and a drained
        # server exits 0, not 143.
        getattr(self, "_captured_signals", []).clear()


def build_engine(config: ServerConfig) -> Engine:
    torch.set_num_threads(config.num_threads or detect_usable_cpus())
    device = resolve_device(config.device)
    model, tokenizer = load_model(config.model_path, device, resolve_dtype(config.dtype, device))
    return Engine(config, ModelRunner(model, tokenizer, device))


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = parse_args(argv)
    try:
        engine = build_engine(config)
    except ModelLoadError as error:
        log.error("%s", error)
        return 2
    log.info("model %s ready on %s (%s, %d threads); serving on %s:%d", config.model_name,
             engine.runner.device, engine.runner.dtype, torch.get_num_threads(), config.host,
             config.port)
    app = create_app(engine.config, engine)  # the effective config: device defaults filled in
    uv_config = uvicorn.Config(app, host=config.host, port=config.port, log_level="info",
                               timeout_graceful_shutdown=config.request_timeout_s)
    DrainingServer(uv_config, engine).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
