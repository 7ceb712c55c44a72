"""The compile at start, on the loading thread: decide (compile_policy), then compile the runner's
items forward in its compile cache (compile_cache), before the server is ready.

Faults are contained: a cache folder that cannot be written is one warning and a compile without
persistence; a compile that fails in a warm folder discards it and compiles cold once; a compile
that still fails leaves `auto` eager (one warning) and makes `on` a ModelLoadError (exit 2).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from server.compile_cache import CompileCache, default_root, image_root
from server.compile_policy import CompileChoice, choose_compile, cpu_flags_of
from server.config import ServerConfig
from server.cpu_target import inductor_extensions, inductor_march
from server.errors import ModelLoadError

log = logging.getLogger("server")

IMAGE_WARMTH = "from the image's compile cache"

DYNAMIC_THREADS_ENV = "TORCHINDUCTOR_CPP_DYNAMIC_THREADS"  # inductor's, read when it is imported


def compile_if_it_pays(config: ServerConfig, runner) -> CompileChoice:
    """Decide for a resolved config and compile `runner` if so; returns what was done and why."""
    if not runner.can_compile:
        choice = CompileChoice(False, runner.eager_reason)
        (log.warning if config.compile == "on" else log.info)("--compile %s: %s", config.compile, choice.reason)
        return choice
    cpu_flags = read_cpu_flags()
    build_kernels_for(cpu_flags)
    cache, warmth = compile_cache_for(config, runner, cpu_flags), None
    if config.compile != "off":  # off reads nothing of the cache
        cache, warmth = warm_cache(cache)
    choice = choose_compile(config.compile, config.device, config.dtype, cpu_flags, warmth is not None,
                            has_cpp_compiler())
    if not choice.compile:
        log.info("items forward eager (%s)", choice.reason)
        return choice
    if warmth == IMAGE_WARMTH:
        choice = CompileChoice(True, f"{choice.reason} ({IMAGE_WARMTH})")
    log.info("compiling the items forward (%s; %s compile cache %s); ready once it is warm",
             choice.reason, "warm" if warmth else "cold", cache.folder)
    try:
        _compile_in(cache, runner, warmth is not None)
    except Exception as error:  # noqa: BLE001 - inductor's failures have no common type
        if config.compile == "on":
            raise ModelLoadError(f"--compile on: compiling the items forward failed: {error}") from error
        log.warning("compiling the items forward failed, serving eager: %s", error)
        return CompileChoice(False, f"{choice.reason}; the compile failed, eager")
    return choice


def warm_cache(cache: CompileCache) -> tuple[CompileCache, str | None]:
    """(the cache to compile in, how it is warm; None: cold): this server's where warm; else, where
    the image carries a warm one of the same key (prebuilt_compile.py), this server's seeded with a
    copy of it, or a temporary folder seeded so where this server's cannot be written or holds what
    an interrupted compile left (never deleted here: on a shared volume it may be another pod's
    compile under way)."""
    if cache.is_warm():
        return cache, "warm"
    image = CompileCache(image_root(), cache.fields)
    if image.folder == cache.folder or not image.is_warm():
        return cache, None
    try:
        cache.seed_from(image)
    except OSError as error:
        if cache.is_warm():  # another pod's copy landed first
            return cache, "warm"
        log.info("compile cache %s not seeded (%s): a temporary copy of the image's", cache.folder, error)
        try:
            cache = cache.elsewhere()
            cache.seed_from(image)
        except OSError as error:
            log.warning("could not copy the image's compile cache %s: %s", image.folder, error)
            return cache, None
    log.info("compile cache %s: a copy of the image's, %s", cache.folder, image.folder)
    return cache, (IMAGE_WARMTH if cache.is_warm() else None)


def use_attention_kernel_eager(config: ServerConfig, runner) -> None:
    """An eager runner (not compiled, or its compile failed) still takes our joined attention
    where it runs (bfloat16 on a CPU with bf16 dot products: 3-7x torch's attention there), its
    library kept beside the compile caches, so it is built once a volume (~10 s on 2 cores)."""
    use = getattr(runner, "use_attention_kernel", None)  # a cross-encoder has no joined attention
    if use is not None:
        use(compile_root(config) / "kernels")


def compile_root(config: ServerConfig) -> Path:
    """--compile-cache-dir, default on the model cache volume."""
    return Path(config.compile_cache_dir) if config.compile_cache_dir else default_root()


def compile_cache_for(config: ServerConfig, runner, cpu_flags: frozenset[str]) -> CompileCache:
    """This server's cache: under compile_root(), keyed by what the compiled graph depends on."""
    import torch
    import transformers

    return CompileCache(compile_root(config), {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "model": config.model_path, "model_config": runner.model.config.to_json_string(),
        "dtype": config.dtype, "isa": processor_isa(runner.device, cpu_flags), "threads": kernel_threads(),
        **runner.compile_settings(),
    })


def build_kernels_for(cpu_flags: frozenset[str]) -> None:
    """Have inductor build C++ kernels any CPU of this one's x86-64 level runs (cpu_target.py), not
    -march=native, with as many threads as the process has when they run, not as it had when they
    were built: so a compile cache serves every pod of a level on its volume, or in an image,
    whatever its CPU limit (measured as fast: docs/performance.md). TORCHINDUCTOR_CPP_MARCH and
    TORCHINDUCTOR_CPP_DYNAMIC_THREADS, where set, win."""
    from torch._inductor import config as inductor_config

    if inductor_config.cpp.march is None:
        inductor_config.cpp.march = inductor_march(cpu_flags)
    if DYNAMIC_THREADS_ENV not in os.environ:
        inductor_config.cpp.dynamic_threads = True


def kernel_threads() -> str:
    """The threads inductor's kernels were built for: part of the key, as it is of inductor's own."""
    import torch
    from torch._inductor import config as inductor_config

    return "dynamic" if inductor_config.cpp.dynamic_threads else str(torch.get_num_threads())


def processor_isa(device, cpu_flags: frozenset[str]) -> str:
    """What the generated kernels are built for: torch's vector ISA, the extensions inductor adds
    by itself and the -march it compiles with; or the GPU."""
    import torch
    from torch._inductor import config as inductor_config

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} sm{''.join(map(str, torch.cuda.get_device_capability(device)))}"
    march = inductor_config.cpp.march
    return " ".join([torch.backends.cpu.get_cpu_capability(), *inductor_extensions(cpu_flags),
                     f"march: {'inductor default' if march is None else march}"])


def has_cpp_compiler() -> bool:
    """Whether inductor finds its C++ compiler (g++, or $CXX): the slim images have none."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except Exception:  # noqa: BLE001 - InvalidCxxCompiler, or whatever its search raised
        return False
    return True


def read_cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return cpu_flags_of(cpuinfo.read())
    except OSError:
        return frozenset()


def _compile_in(cache: CompileCache, runner, warm: bool) -> None:
    """Compile in `cache` (warm: reading it); a cold compile holds the key's lock, and where another
    start holds it (its compile under way in that folder, on a shared volume) compiles in a temporary
    folder rather than discard the other's work."""
    if warm:
        _compile_and_keep(cache, runner, warm)
        return
    with cache.compiling() as ours:
        if not ours:
            log.info("compile cache %s: another start is compiling it; compiling in a temporary folder",
                     cache.folder)
            cache = cache.elsewhere()
        cache.discard()  # what a damaged or interrupted compile left: torch would trip over it
        _compile_and_keep(cache, runner, warm)


def _compile_and_keep(cache: CompileCache, runner, warm: bool) -> None:
    try:
        cache.activate()
    except OSError as error:
        log.warning("compile cache %s not writable (%s): compiling without one", cache.folder, error)
        runner.compile()
        return
    try:
        seconds = runner.compile()
    except Exception as error:  # noqa: BLE001 - whatever a cached artifact broke, compile cold
        if not warm:
            raise
        log.warning("discarding the compile cache %s (%s: %s); compiling cold",
                    cache.folder, type(error).__name__, error)
        cache.discard()
        cache.activate()
        seconds = runner.compile()
    try:
        cache.mark_warm(seconds)
    except OSError as error:  # a read-only cache: warm already, or nothing to keep it in
        log.info("compile cache %s not updated: %s", cache.folder, error)
