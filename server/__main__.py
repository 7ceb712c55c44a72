"""`python -m server`: parse the flags and listen at once; load the model on a thread meanwhile
(startup.py answers probes and scrapes: loading, zero load); serve until SIGTERM has drained.

NOTE: torch and the model's modules are imported only on the loading thread (resolve_config,
build_runner): importing torch alone takes seconds, and the server answers /metrics before that.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import replace

from server.app import create_app
from server.classifier import Classifier
from server.classifier_support import is_sequence_classifier
from server.compile_start import compile_if_it_pays, use_attention_kernel_eager
from server.config import ServerConfig, parse_args
from server.connections import uvicorn_config
from server.cpus import detect_usable_cpus
from server.drain import DrainingServer
from server.engine import Engine
from server.errors import ModelLoadError
from server.interfaces import ScoringService
from server.malloc_tuning import keep_freed_memory, release_free_memory
from server.rerank import Reranker, choose_reranker
from server.startup import EngineStartup, Loaded

log = logging.getLogger("server")


def resolve_config(config: ServerConfig) -> ServerConfig:
    """The effective config: device and dtype picked ("auto" resolved), their defaults filled.
    Raises ModelLoadError if the device asked for is not there."""
    from server.model_loader import resolve_device, resolve_dtype

    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    return config.resolve(device.type, str(dtype).removeprefix("torch."))


def build_runner(config: ServerConfig):
    """Load the model for a resolved config and put a runner around it (eager: load() compiles)."""
    import torch

    from server.classifier_support import is_encoder
    from server.encoder_runner import EncoderRunner
    from server.lora import load_adapters
    from server.model_loader import load_model
    from server.model_runner import ModelRunner

    torch.set_num_threads(config.num_threads or detect_usable_cpus())
    device = torch.device(config.device)
    model, tokenizer = load_model(config.model_path, device, getattr(torch, config.dtype))
    if is_encoder(model.config) and config.lora_paths:
        raise ModelLoadError(f"--lora-paths: LoRA adapters are served on decoder models; "
                             f"'{config.model_path}' is a cross-encoder")
    try:
        adapters = load_adapters(config.adapter_paths, model)
    except ValueError as error:
        raise ModelLoadError(str(error)) from error
    try:
        if is_encoder(model.config):  # a cross-encoder: each pair whole, no shared query
            return EncoderRunner(model, tokenizer, device)
        runner = ModelRunner(model, tokenizer, device, query_cache_tokens=config.query_cache_tokens,
                             adapters=adapters)
    except ValueError as error:  # what the runner itself refuses (e.g. unreadable special tokens)
        raise ModelLoadError(f"refusing model '{config.model_path}': {error}") from error
    if device.type != "cpu":  # where no test of ours ran: checked against the masked layout
        from server.cascade_check import keep_cascade_if_it_agrees

        keep_cascade_if_it_agrees(runner)
    return runner


def build_engine(config: ServerConfig) -> Engine:
    """Load the model for a resolved config and put an engine around it (eager, whatever --compile)."""
    return Engine(config, build_runner(config))


def load(config: ServerConfig):
    """On the loading thread: the resolved config (--compile resolved to what was done, and why),
    the runner, compiled where it pays (compile_start.py), and its rerank template, with the
    start's log lines."""
    config = resolve_config(config)
    # NOTE: loading is the slow part of a start (a hub download, reading the weights): say it
    # began, and how long it took, so a pod that is not ready yet shows why in its log.
    log.info("loading model %s (%s, %s)", config.model_path, config.device, config.dtype)
    load_started = time.monotonic()
    runner = build_runner(config)
    choice = compile_if_it_pays(config, runner)
    if not choice.compile:
        use_attention_kernel_eager(config, runner)
    backend, why = runner.attention
    config = replace(config, compile="on" if choice.compile else "off", compile_reason=choice.reason,
                     attention_backend=backend, attention_backend_reason=why)
    reranker = build_reranker(config, runner)
    import torch

    log.info("model %s loaded in %.1f s (%d threads)", config.model_name,
             time.monotonic() - load_started, torch.get_num_threads())
    if config.lora_paths:
        log.info("LoRA adapters: %s", runner.adapters.to_dict())
    if isinstance(reranker, Classifier):
        log.info("classification head: %s", reranker.to_dict())
    elif reranker is not None:
        log.info("rerank template: %s", reranker.template.name)
    release_free_memory()  # what loading and compiling freed; serving keeps its own from here
    return Loaded(config, runner, reranker)


def build_reranker(config: ServerConfig, runner) -> Reranker | Classifier | None:
    """A sequence classifier's head (server/classifier.py: rerank and /classify), or the rerank
    template for this causal LM (--rerank-template, else by the model's names), its labels checked
    against the tokenizer. One given by the flag that cannot serve is a ModelLoadError (exit 2);
    the automatic one that cannot serve leaves the server without /v1/rerank (a warning):
    /v1/score must not fail to start over a rerank default."""
    model_config = runner.model.config
    if is_sequence_classifier(model_config):
        if config.rerank_template is not None:
            raise ModelLoadError("--rerank-template: this model has a classification head, which "
                                 "scores pairs itself; a template is for causal LMs")
        try:
            return Classifier.of(model_config, runner.tokenizer)
        except ValueError as error:
            raise ModelLoadError(f"refusing model '{config.model_path}': {error}") from error
    names = [config.model_path, *config.served_model_name, getattr(model_config, "_name_or_path", None),
             *(getattr(model_config, "architectures", None) or [])]
    try:
        return choose_reranker(config.rerank_template, names, runner.tokenize)
    except ValueError as error:
        if config.rerank_template is not None:
            raise ModelLoadError(f"--rerank-template: {error}") from error
        log.warning("no /v1/rerank: %s", error)
        return None


def log_ready(engine: Engine) -> None:
    age = seconds_since_start()
    log.info("ready%s; serving on %s:%d", "" if age is None else f" in {age:.1f} s after start",
             engine.config.host, engine.config.port)


def serve(config: ServerConfig, engine: ScoringService, reranker: Reranker | None = None) -> int:
    """Serve until a signal's drain ends, or a model that failed to load; the process's exit code
    (0: nothing was cut; 1: a drain was cut; 2: the model did not load). `reranker`: for an
    engine built before serving; an EngineStartup's load chooses its own."""
    server = DrainingServer(uvicorn_config(create_app(config, engine, reranker), config), engine,
                            config.drain_timeout_s)
    server.run()
    if server.exit_code == 1:
        # NOTE: the interpreter's exit would wait for a forward pass still running on its thread;
        # a drain that timed out or a second signal means now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(server.exit_code)
    return server.exit_code


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
    log.info("%s", keep_freed_memory(os.environ))  # before any thread: one arena for all
    return serve(config, EngineStartup(config, lambda: load(config), on_ready=log_ready))


if __name__ == "__main__":
    sys.exit(main())
