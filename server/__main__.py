"""`python -m server`: resolve the config, load the model, then serve until SIGTERM has drained."""
from __future__ import annotations

import logging
import os
import sys
import time

import torch

from server.app import create_app
from server.config import ServerConfig, parse_args
from server.connections import uvicorn_config
from server.cpus import detect_usable_cpus
from server.drain import DrainingServer
from server.engine import Engine
from server.model_loader import ModelLoadError, load_model, resolve_device, resolve_dtype
from server.model_runner import ModelRunner

log = logging.getLogger("server")


def resolve_config(config: ServerConfig) -> ServerConfig:
    """The effective config: device and dtype picked ("auto" resolved), their defaults filled.
    Raises ModelLoadError if the device asked for is not there."""
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    return config.resolve(device.type, str(dtype).removeprefix("torch."))


def build_engine(config: ServerConfig) -> Engine:
    """Load the model for a resolved config and put an engine around it."""
    torch.set_num_threads(config.num_threads or detect_usable_cpus())
    device = torch.device(config.device)
    model, tokenizer = load_model(config.model_path, device, getattr(torch, config.dtype))
    try:
        runner = ModelRunner(model, tokenizer, device, query_cache_tokens=config.query_cache_tokens)
    except ValueError as error:  # what the runner itself refuses (e.g. unreadable special tokens)
        raise ModelLoadError(f"refusing model '{config.model_path}': {error}") from error
    if config.compile:
        log.info("compiling the items forward (--compile); ready once it is warm")
        runner.compile()
    return Engine(config, runner)


def serve(config: ServerConfig, engine: Engine) -> int:
    """Serve until a signal's drain ends; the process's exit code (0: nothing was cut)."""
    server = DrainingServer(uvicorn_config(create_app(config, engine), config), engine,
                            config.drain_timeout_s)
    server.run()
    if server.exit_code:
        # NOTE: the interpreter's exit would wait for a forward pass still running on its thread;
        # a drain that timed out or a second signal means now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(server.exit_code)
    return 0


def seconds_since_start() -> float | None:
    """How long this process has run, interpreter start and imports included (torch alone takes
    seconds), from Linux's /proc; None where there is no /proc."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            # field 22, after the command name in parentheses (which may hold spaces)
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            return float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = parse_args(argv)
    try:
        config = resolve_config(config)
        # NOTE: loading is the slow part of a start (a hub download, reading the weights): say it
        # began, and how long it took, so a pod that is not ready yet shows why in its log.
        log.info("loading model %s (%s, %s)", config.model_path, config.device, config.dtype)
        load_started = time.monotonic()
        engine = build_engine(config)
    except ModelLoadError as error:
        log.error("%s", error)
        return 2
    log.info("model %s loaded in %.1f s (%d threads)", config.model_name,
             time.monotonic() - load_started, torch.get_num_threads())
    age = seconds_since_start()
    log.info("ready%s; serving on %s:%d", "" if age is None else f" in {age:.1f} s after start",
             config.host, config.port)
    return serve(config, engine)


if __name__ == "__main__":
    sys.exit(main())
