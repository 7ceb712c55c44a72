"""`python -m server.prebuilt_compile [the server's flags]`: compile the items forward as `python -m
server` with those flags would at start, into the image's compile cache root (compile_cache.image_root())
rather than the model cache volume, then exit. The Dockerfile runs it where it bakes in the default
model: a pod of that image whose own cache is cold for the same key starts from a copy of it
(compile_start.warm_cache), warm in seconds rather than compiling for a minute or more, with or
without a cache volume.

The key names the build host's x86-64 level and AMX (cpu_target.py), so the cache serves the nodes
of that kind and is never read on others. Where the server would not compile with these flags (a
build host without native bf16 matmuls under `auto`, float32, no C++ compiler) it compiles nothing,
says so and exits 0: the image is only without it.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import replace

from server.compile_cache import image_root


def main(argv: list[str] | None = None) -> int:
    from server.__main__ import build_runner, resolve_config
    from server.compile_start import compile_if_it_pays
    from server.config import parse_args
    from server.errors import ModelLoadError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = replace(parse_args(argv), compile_cache_dir=str(image_root()))
    try:
        config = resolve_config(config)
        choice = compile_if_it_pays(config, build_runner(config))
    except ModelLoadError as error:
        print(f"prebuilt compile: none ({error})", flush=True)
        return 2
    if choice.compile:
        print(f"prebuilt compile: kept in {image_root()} ({choice.reason})", flush=True)
    else:
        print(f"prebuilt compile: none, the server would not compile here ({choice.reason})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
