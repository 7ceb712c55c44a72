"""What an image build needs where no container registry and no PyTorch index can be reached.

Two stand-ins, both made once and reused (idempotent):
- the base image: Debian bookworm (debootstrap minbase, from the mirror apt uses) with Python 3.11,
  venv and pip, `python` on PATH and the host's CA certificates, imported as BASE_IMAGE; it takes
  the place of the Dockerfile's base image (build argument PYTHON_IMAGE);
- a PEP 503 wheel index of torch and its dependencies, as the host's pip resolves them (the CPU
  build where pip is configured with it), served on loopback while the build runs (build argument
  TORCH_INDEX_URL).
Standard library only; debootstrap needs root. tools/images.py decides when these are used.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# python:3.11-slim's Python: the interpreter, venv, pip, and its headers (python:3.11-slim has them;
# inductor builds its CPU kernels against Python.h).
BASE_PACKAGES = "python3,python3-venv,python3-pip,python3-dev"
# python:3.11-slim's environment, one --change each (podman import takes no multi-variable ENV).
BASE_CHANGES = ("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV LANG=C.UTF-8", 'CMD ["python3"]')
# Tagged by what it is made of, so that a change above makes a new one, never reuses a stale one.
BASE_IMAGE = ("localhost/scoring-fleet-base:" + DEBIAN_SUITE + "-"
              + hashlib.sha256(repr((BASE_PACKAGES, BASE_CHANGES)).encode()).hexdigest()[:8])
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# The wheels' target: the base image's Python (bookworm: 3.11) on x86-64 glibc.
WHEEL_TARGET = ("--python-version", "3.11", "--only-binary=:all:",
                "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64")


class OfflineError(RuntimeError):
    """A stand-in cannot be made; the message says what to install or set."""


def debian_mirror(sources: list[str]) -> str:
    """The Debian archive apt is configured with: the first deb URI (one-line or deb822 form) whose
    suites include bookworm and whose path is not -security; DEFAULT_MIRROR if none."""
    for text in sources:
        for stanza in re.split(r"\n\s*\n", text):
            one_line = re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", stanza, re.M)
            uris = re.findall(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = " ".join(re.findall(r"^Suites:\s*(.+)$", stanza, re.M)).split()
            pairs = one_line + [(uri, suite) for uri in uris for suite in suites]
            for uri, suite in pairs:
                if suite == DEBIAN_SUITE and "security" not in uri:
                    return uri.rstrip("/")
    return DEFAULT_MIRROR


def apt_sources(root: Path = Path("/etc/apt")) -> list[str]:
    files = [root / "sources.list", *sorted((root / "sources.list.d").glob("*"))]
    return [path.read_text(errors="replace") for path in files if path.is_file()]


def _run(argv: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, check=True, **kwargs)
    except FileNotFoundError as error:
        raise OfflineError(f"{what}: {argv[0]} not found ({error})") from None
    except subprocess.CalledProcessError as error:
        raise OfflineError(f"{what}: `{' '.join(argv)}` exited {error.returncode}") from None


def image_exists(engine: str, image: str) -> bool:
    return subprocess.run([engine, "image", "inspect", image], capture_output=True).returncode == 0


def ensure_base_image(engine: str, cache: Path, log=print) -> str:
    """BASE_IMAGE in the engine's storage, made with debootstrap if it is not there yet."""
    if image_exists(engine, BASE_IMAGE):
        log(f"base image: {BASE_IMAGE} (kept from an earlier run)")
        return BASE_IMAGE
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise OfflineError(f"{BASE_IMAGE} is missing and cannot be made here: it needs root and "
                           "debootstrap (apt-get install debootstrap), or set PYTHON_IMAGE to a "
                           "Python 3.11 image the engine can pull")
    mirror = debian_mirror(apt_sources())
    log(f"base image: debootstrap {DEBIAN_SUITE} from {mirror} (a few minutes, once)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix="rootfs-") as root:
        try:
            _run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", DEBIAN_SUITE,
                  root, mirror], "debootstrap", stdout=subprocess.DEVNULL)
        finally:
            _unmount_below(Path(root))  # a failed debootstrap leaves /proc mounted in the rootfs
        _finish_rootfs(Path(root))
        changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        _run([engine, "import", *changes, "-", BASE_IMAGE], "import the base image",
             stdin=tar.stdout, stdout=subprocess.DEVNULL)
        tar.wait()
    return BASE_IMAGE


def _unmount_below(root: Path) -> None:
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "--lazy", mount], capture_output=True)


def _finish_rootfs(root: Path) -> None:
    """`python` as python:3.11-slim has it; the host's CAs (an egress proxy may re-sign TLS)."""
    (root / "usr/local/bin/python").symlink_to("/usr/bin/python3")
    if HOST_CA_BUNDLE.is_file():
        shutil.copyfile(HOST_CA_BUNDLE, root / HOST_CA_BUNDLE.relative_to("/"))
    for leftovers in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (root / leftovers).glob("*"):
            if path.is_file():
                path.unlink()


def simple_index(wheels: list[Path]) -> dict[str, str]:
    """PEP 503 pages for the wheels: {relative path: html}. Wheels lie in wheels/ next to simple/."""
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheels):
        name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        projects.setdefault(name, []).append(wheel)
    pages = {"simple/index.html": _page(f'<a href="{n}/">{n}</a>' for n in sorted(projects))}
    for name, files in projects.items():
        links = (f'<a href="../../wheels/{html.escape(w.name)}#sha256={_sha256(w)}">'
                 f"{html.escape(w.name)}</a>" for w in files)
        pages[f"simple/{name}/index.html"] = _page(links)
    return pages


def _page(links) -> str:
    return "<!DOCTYPE html>\n<html><body>\n" + "<br>\n".join(links) + "\n</body></html>\n"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(functools.partial(stream.read, 1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_torch_index(cache: Path, torch_version: str, log=print) -> Path:
    """cache/torch-<version>/: torch and its dependencies as a PEP 503 index (made once)."""
    index = cache / f"torch-{torch_version}"
    done = index / "simple" / "index.html"
    if done.is_file():
        log(f"torch index: {index} (kept from an earlier run)")
        return index
    wheels = index / "wheels"
    log(f"torch index: pip download torch=={torch_version} into {wheels}")
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels), *WHEEL_TARGET,
          f"torch=={torch_version}"], "download torch")
    torch = [w.name for w in wheels.glob("torch-*.whl")]
    if not any("+cpu" in name for name in torch):
        raise OfflineError(f"pip resolved torch=={torch_version} to {torch}, not a CPU build: "
                           "configure pip with the CPU wheel (e.g. --find-links) or set TORCH_INDEX_URL")
    for relative, text in simple_index(list(wheels.glob("*.whl"))).items():
        (index / relative).parent.mkdir(parents=True, exist_ok=True)
        (index / relative).write_text(text)
    return index


@contextlib.contextmanager
def served(folder: Path, port: int, timeout_s: float = 10.0) -> Iterator[str]:
    """Serve folder on 127.0.0.1:port while the block runs; yields its simple/ URL."""
    url = f"http://127.0.0.1:{port}/simple/"
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                               "--directory", str(folder), str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise OfflineError(f"could not serve {folder} on 127.0.0.1:{port} (port taken? "
                                       "set IMAGE_INDEX_PORT)") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
