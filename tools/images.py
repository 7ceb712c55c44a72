"""`make image` and `make test-image`: build the two images of the Dockerfile, and prove they run.

    python tools/images.py build   # localhost/scoring-fleet:dev (CPU, default model baked in) and
                                   # localhost/scoring-fleet-control:dev (--target control)
    python tools/images.py test    # build both, then tools/image_checks.py's checks

The engine is docker when its daemon answers, else podman. Where no registry or PyTorch index can be
reached, the build gets local stand-ins (tools/image_offline.py) through build arguments only:
PYTHON_IMAGE and TORCH_INDEX_URL; the Dockerfile is the one a user builds. Settings (environment):
IMAGE_ENGINE, SERVER_IMAGE, CONTROL_IMAGE, PYTHON_IMAGE, TORCH_INDEX_URL, IMAGE_CACHE (the base's
rootfs scratch and the wheel index, kept between runs), IMAGE_INDEX_PORT. Standard library only.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

try:
    from tools import image_checks, image_offline, versions
except ImportError:  # run as a script: tools/ is on sys.path, the repository root is not
    import image_checks
    import image_offline
    import versions

ROOT = Path(__file__).resolve().parents[1]
PODMAN_CONF = ROOT / "tools" / "podman-containers.conf"
DEFAULT_PYTHON_IMAGE = versions.PYTHON_IMAGE  # the Dockerfile's own default
TORCH_VERSION = versions.TORCH_VERSION  # the Dockerfile's pin
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu/torch/"
PULL_TIMEOUT_S = 300


@dataclass(frozen=True)
class Settings:
    engine: str | None = None            # None: docker if its daemon answers, else podman
    server_image: str = "localhost/scoring-fleet:dev"
    control_image: str = "localhost/scoring-fleet-control:dev"
    python_image: str | None = None      # None: the Dockerfile's, or the local base if unpullable
    torch_index_url: str | None = None   # None: PyTorch's, or a local index if unreachable
    cache: Path = Path.home() / ".cache" / "scoring-fleet-images"
    # Fixed, so that the build argument (and with it the cached torch layer) is the same every run.
    index_port: int = 38517

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        defaults = cls()
        return cls(engine=env.get("IMAGE_ENGINE") or None,
                   server_image=env.get("SERVER_IMAGE") or defaults.server_image,
                   control_image=env.get("CONTROL_IMAGE") or defaults.control_image,
                   python_image=env.get("PYTHON_IMAGE") or None,
                   torch_index_url=env.get("TORCH_INDEX_URL") or None,
                   cache=Path(env["IMAGE_CACHE"]) if env.get("IMAGE_CACHE") else defaults.cache,
                   index_port=int(env.get("IMAGE_INDEX_PORT") or defaults.index_port))


@dataclass(frozen=True)
class Build:
    """One `<engine> build` of the Dockerfile: a target, its tag, its build arguments."""

    target: str
    tag: str
    args: Mapping[str, str] = field(default_factory=dict)


def plan(settings: Settings, python_image: str | None, torch_index_url: str | None) -> list[Build]:
    """The two builds. python_image / torch_index_url: None keeps the Dockerfile's default."""
    base = {"PYTHON_IMAGE": python_image} if python_image else {}
    torch = {"TORCH_INDEX_URL": torch_index_url} if torch_index_url else {}
    server = {**base, "TORCH_VARIANT": "cpu", "TORCH_VERSION": TORCH_VERSION,
              "BAKE_DEFAULT_MODEL": "1", **torch}
    return [Build("control", settings.control_image, base), Build("server", settings.server_image, server)]


def build_command(engine: str, build: Build, host_network: bool) -> list[str]:
    """`<engine> build` of ROOT for one target. podman: --format docker keeps the HEALTHCHECK (OCI
    image configs have none); host_network: the build reaches an index served on loopback."""
    argv = [engine, "build", "--target", build.target, "--tag", build.tag, "--file", "Dockerfile"]
    if engine.endswith("podman"):
        argv += ["--format", "docker"]
    if host_network:
        argv += ["--network", "host"]
    for name, value in build.args.items():
        argv += ["--build-arg", f"{name}={value}"]
    return [*argv, "."]


def engine_env(engine: str, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """podman with runc installed and no CONTAINERS_CONF of the user's: tools/podman-containers.conf."""
    out = dict(env)
    if engine.endswith("podman") and "CONTAINERS_CONF" not in env and shutil.which("runc"):
        out["CONTAINERS_CONF"] = str(PODMAN_CONF)
    return out


def choose_engine(settings: Settings) -> str:
    if settings.engine:
        return settings.engine
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker"
    if shutil.which("podman"):
        return "podman"
    raise SystemExit("images: no container engine: install podman (`make setup-image-tools` as root "
                     "on Debian) or start Docker, or set IMAGE_ENGINE")


def can_pull(engine: str, image: str) -> bool:
    if image_offline.image_exists(engine, image):
        return True
    print(f"images: pulling {image} (is a registry reachable?)")
    try:
        return subprocess.run([engine, "pull", image], capture_output=True,
                              timeout=PULL_TIMEOUT_S).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def can_reach(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=10).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def build_inputs(engine: str, settings: Settings) -> Iterator[tuple[str | None, str | None]]:
    """(PYTHON_IMAGE, TORCH_INDEX_URL) for the builds, local stand-ins made and served if needed."""
    python_image = settings.python_image
    if python_image is None and not can_pull(engine, DEFAULT_PYTHON_IMAGE):
        print(f"images: {DEFAULT_PYTHON_IMAGE} cannot be pulled: a local base image instead")
        python_image = image_offline.ensure_base_image(engine, settings.cache)
    if settings.torch_index_url or can_reach(PYTORCH_CPU_INDEX):
        yield python_image, settings.torch_index_url
        return
    print("images: PyTorch's index cannot be reached: a local torch index instead")
    index = image_offline.ensure_torch_index(settings.cache, TORCH_VERSION)
    with image_offline.served(index, settings.index_port) as url:
        yield python_image, url


def build_all(settings: Settings) -> str:
    """Build both images; returns the engine used."""
    engine = choose_engine(settings)
    env = engine_env(engine)
    os.environ.update(env)  # image_offline's engine calls too
    try:
        with build_inputs(engine, settings) as (python_image, torch_index_url):
            local_index = bool(torch_index_url and "://127.0.0.1:" in torch_index_url)
            for build in plan(settings, python_image, torch_index_url):
                print(f"images: building {build.tag} (target {build.target})", flush=True)
                argv, started = build_command(engine, build, host_network=local_index), time.monotonic()
                if subprocess.run(argv, cwd=ROOT, env=env).returncode != 0:
                    raise SystemExit(f"images: `{' '.join(argv)}` failed (its output is above)")
                print(f"images: built {build.tag} in {time.monotonic() - started:.0f} s", flush=True)
    except image_offline.OfflineError as error:
        raise SystemExit(f"images: {error}") from None
    return engine


def main(argv: list[str]) -> int:
    if argv not in (["build"], ["test"]):
        print(__doc__, file=sys.stderr)
        return 2
    settings = Settings.from_env()
    engine = build_all(settings)
    if argv == ["test"]:
        return image_checks.run_all(engine, settings.server_image, settings.control_image)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
