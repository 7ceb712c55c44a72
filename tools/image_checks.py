"""`make test-image`'s checks of the two built images (tools/images.py builds them first).

The server image, with a read-only root and only /cache writable (as the operator's pods run it),
starts as 65532, gets ready and answers the README's request with the baked-in model; its
`--compile auto` found the image's C++ compiler, and where this CPU has native bf16 compiled from
the image's compile cache, its attention through our kernel. The control
image runs `python -m fleet_operator --help` and `python -m gateway --help`, imports every module
of both packages, has no torch or transformers, runs as 65532 and is under MAX_CONTROL_BYTES.
Each check prints one line; the first failure ends the run with what it saw.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

RUN_AS = "65532"
MAX_CONTROL_BYTES = 500_000_000
# Loading the GGUF took 20-30 s on a quiet machine and 77-131 s on a busy 2-core CI machine (now ~7 s quiet);
# where `--compile auto` compiles, a cold compile adds 20-60 s on a quiet one (the cache is a tmpfs).
HEALTHY_TIMEOUT_S = 600
PREBUILT_KERNELS = "/app/server/kernels/prebuilt/"  # where the Dockerfile builds our attention kernel
# What compile_reason says of a compile that started from the image's cache (server.compile_start's
# IMAGE_WARMTH: tools/ run on the host's python, without the server's packages).
IMAGE_WARMTH = "from the image's compile cache"
# Run in the server's container: the flags of its CPU on which `auto` compiles bfloat16 (which
# `--dtype auto` picks there), as the server itself reads them.
FAST_CPU_FLAGS_SCRIPT = """
from server.compile_policy import FAST_BF16_CPU_FLAGS
from server.compile_start import read_cpu_flags
print(" ".join(flag for flag in FAST_BF16_CPU_FLAGS if flag in read_cpu_flags()))
"""
SEED_REQUEST = {
    "query": "What is the capital of California? Answer Yes or No for each of the following options:",
    "items": ["Sacramento", "San Jose", "San Francisco"],
    "label_token_ids": [9230, 2838],
}
# Every module of both packages imports (replay's matplotlib is lazy), and the server's stack is absent.
IMPORT_ALL = """
import importlib, importlib.util, pkgutil
import fleet_operator, gateway
for package in (fleet_operator, gateway):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
absent = [name for name in ("torch", "transformers", "fastapi") if importlib.util.find_spec(name)]
assert not absent, f"the control image has {absent}"
print("imported every module; no torch, transformers or fastapi")
"""


class CheckFailed(Exception):
    pass


def _run(argv: list[str], timeout_s: float = 120) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise CheckFailed(f"`{' '.join(argv)}` exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def _inspect(engine: str, image: str, template: str) -> str:
    return _run([engine, "image", "inspect", "--format", template, image]).strip()


def check_control(engine: str, image: str) -> Iterator[str]:
    """One line per check passed; CheckFailed at the first that fails."""
    run = [engine, "run", "--rm", "--read-only", "--network", "none", image]
    for package in ("fleet_operator", "gateway"):
        out = _run([*run, "python", "-m", package, "--help"])
        if "usage" not in out.lower():
            raise CheckFailed(f"python -m {package} --help printed no usage:\n{out}")
        yield f"control: python -m {package} --help: ok"
    yield "control: " + _run([*run, "python", "-c", IMPORT_ALL]).strip()
    yield _user_line(engine, image, "control")
    size = int(_inspect(engine, image, "{{.Size}}"))
    if size >= MAX_CONTROL_BYTES:
        raise CheckFailed(f"the control image is {size / 1e6:.0f} MB, not under {MAX_CONTROL_BYTES / 1e6:.0f} MB")
    yield f"control: {size / 1e6:.0f} MB (< {MAX_CONTROL_BYTES / 1e6:.0f} MB)"


def _user_line(engine: str, image: str, label: str) -> str:
    user = _inspect(engine, image, "{{.Config.User}}")
    uid = _run([engine, "run", "--rm", "--network", "none", image, "id", "-u"]).strip()
    if uid != RUN_AS or not user.startswith(RUN_AS):
        raise CheckFailed(f"{label}: USER {user!r} runs as uid {uid}, not {RUN_AS}")
    return f"{label}: runs as uid {uid} (USER {user})"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_ready(base: str, name: str, engine: str, started: float) -> float:
    # Readiness, not /health: the server answers /health from its first second, while the model
    # loads (a 503 here is an HTTPError, an OSError: keep waiting).
    while True:
        try:
            urllib.request.urlopen(f"{base}/health_generate", timeout=4).close()
            return time.monotonic() - started
        except OSError:
            state = subprocess.run([engine, "inspect", "--format", "{{.State.Running}}", name],
                                   capture_output=True, text=True).stdout.strip()
            if state != "true" or time.monotonic() - started > HEALTHY_TIMEOUT_S:
                raise CheckFailed(f"the server never became ready (running: {state or 'gone'})") from None
            time.sleep(1)


def _score(base: str) -> list[list[float]]:
    request = urllib.request.Request(f"{base}/v1/score", data=json.dumps(SEED_REQUEST).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        scores = json.load(response)["scores"]
    shape_ok = (len(scores) == len(SEED_REQUEST["items"])
                and all(len(row) == 2 and all(0.0 <= p <= 1.0 for p in row) for row in scores))
    if not shape_ok:
        raise CheckFailed(f"the seed request's scores are not 3 rows of 2 probabilities: {scores}")
    return scores


def fast_path_problem(info: dict, fast_cpu_flags: list[str]) -> str | None:
    """What keeps the server off its fast path on a CPU with these of compile_policy's
    FAST_BF16_CPU_FLAGS (from /get_server_info's `dtype`, `compile`, `attention_backend` and their
    reasons), or None. The fast path: compiled from the image's compile cache (built on this
    machine, so of this CPU's kind), its attention our kernel as the image built it."""
    reason = info.get("compile_reason") or ""
    if "no C++ compiler" in reason:
        return f"the image has no C++ compiler for `--compile auto`: {reason}"
    if not fast_cpu_flags or info.get("dtype") != "bfloat16":
        return None
    if info.get("compile") != "on":
        return f"bfloat16 on a CPU with {', '.join(fast_cpu_flags)}, yet the items forward is eager: {reason}"
    if IMAGE_WARMTH not in reason:  # built and run on one machine: the key is the image's
        return f"compiled cold at start, not {IMAGE_WARMTH}: {reason}"
    why = info.get("attention_backend_reason") or ""
    if info.get("attention_backend") != "scoringfleet":
        return f"bfloat16 on a CPU with {', '.join(fast_cpu_flags)}, yet not our attention: {why}"
    if PREBUILT_KERNELS not in why:
        return f"our attention kernel was built at start, not taken from the image: {why}"
    return None


def _server_info(base: str) -> dict:
    with urllib.request.urlopen(f"{base}/get_server_info", timeout=10) as response:
        return json.load(response)


def cache_tmpfs(engine: str) -> str:
    """--tmpfs for /cache, writable by 65532: podman chowns it with U; docker takes mount options."""
    return "/cache:U" if engine.endswith("podman") else f"/cache:uid={RUN_AS},gid={RUN_AS}"


def check_server(engine: str, image: str) -> Iterator[str]:
    """The image's own command (port 30000 inside), published on a free loopback port."""
    port, name = _free_port(), f"scoring-fleet-image-check-{os.getpid()}"
    _run([engine, "run", "--detach", "--name", name, "--read-only", "--tmpfs", cache_tmpfs(engine),
          "--publish", f"127.0.0.1:{port}:30000", image])
    started, base = time.monotonic(), f"http://127.0.0.1:{port}"
    try:
        ready_s = _wait_ready(base, name, engine, started)
        yield f"server: ready after {ready_s:.0f} s (read-only root, /cache a tmpfs)"
        yield f"server: the seed request scored {_score(base)}"
        info = _server_info(base)
        fast_cpu_flags = _run([engine, "exec", name, "python", "-c", FAST_CPU_FLAGS_SCRIPT]).split()
        problem = fast_path_problem(info, fast_cpu_flags)
        if problem:
            raise CheckFailed(f"server: {problem}")
        yield f"server: items forward {'compiled' if info['compile'] == 'on' else 'eager'} ({info['compile_reason']})"
        yield f"server: attention {info['attention_backend']} ({info['attention_backend_reason']})"
        uid = _run([engine, "exec", name, "id", "-u"]).strip()
        if uid != RUN_AS:
            raise CheckFailed(f"server: runs as uid {uid}, not {RUN_AS}")
        yield f"server: runs as uid {uid}"
        if engine.endswith("podman"):  # the image kept its HEALTHCHECK (--format docker)
            _run([engine, "healthcheck", "run", name])
            yield "server: the image's HEALTHCHECK passes"
        yield f"server: {int(_inspect(engine, image, '{{.Size}}')) / 1e6:.0f} MB"
    except (CheckFailed, OSError) as error:
        logs = subprocess.run([engine, "logs", name], capture_output=True, text=True)
        # the last lines, less the model loader's progress bars
        tail = [line for line in (logs.stdout + logs.stderr).splitlines() if "%|" not in line][-30:]
        raise CheckFailed(f"{error}\n--- the server's last log lines ---\n" + "\n".join(tail)) from None
    finally:
        subprocess.run([engine, "rm", "--force", name], capture_output=True)


def run_all(engine: str, server_image: str, control_image: str) -> int:
    try:
        for check, image in ((check_control, control_image), (check_server, server_image)):
            for line in check(engine, image):
                print(f"test-image: {line}", flush=True)
    except (CheckFailed, subprocess.TimeoutExpired) as error:
        print(f"test-image: FAILED: {error}", flush=True)
        return 1
    print("test-image: both images pass", flush=True)
    return 0
