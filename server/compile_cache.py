"""The compile cache: torch inductor's on-disk caches (its FX graph and AOT autograd caches and the
C++/Triton kernels it builds) kept for the next start, one folder per key, under a root on the
model cache volume by default ($HF_HOME/scoringfleet/compile: `spec.model.cache` is mounted at
HF_HOME, so every pod of a fleet shares it).

The key names everything a compiled graph depends on that inductor's own keys may not: torch and
transformers versions, the model (path and config), dtype, the processor's ISA and the -march its
kernels are built for, their threads, the layout, frozen weights or not, the warm-up shapes, the
rewrites of the decoder before the compile. A folder is
warm once a compile in it finished (`MARKER` written last); a stale one is simply another key's,
never read. What inductor finds corrupt in a folder fails the compile: the caller discards the
folder and compiles cold once (compile_start.py). Owns the folder and the marker; nothing of when
to compile.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from scoringfleet_contract.facts import ENV_PREFIX

log = logging.getLogger(__name__)

MARKER = "scoringfleet-compile.json"  # written once a compile in the folder finished
# Where an image keeps the caches it compiled when it was built (prebuilt_compile.py): read-only,
# a start copies a warm folder of its key from there (compile_start.py).
IMAGE_ROOT_ENV = ENV_PREFIX + "IMAGE_COMPILE_CACHE"
DEFAULT_IMAGE_ROOT = Path(__file__).resolve().parent / "compile_prebuilt"
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # read by inductor at its first compile


def cache_key(fields: Mapping[str, object]) -> str:
    """A folder name for these fields: the same fields, the same name, in any order."""
    text = json.dumps({name: str(value) for name, value in fields.items()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def default_root() -> Path:
    """$HF_HOME/scoringfleet/compile, HF_HOME as the hub client resolves it (XDG_CACHE_HOME,
    ~/.cache/huggingface): where the model cache volume is mounted in a fleet's pods."""
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "scoringfleet" / "compile"


def image_root() -> Path:
    """$SCORINGFLEET_IMAGE_COMPILE_CACHE, else `compile_prebuilt` beside this file."""
    return Path(os.environ.get(IMAGE_ROOT_ENV) or DEFAULT_IMAGE_ROOT)


@dataclass(frozen=True)
class CompileCache:
    root: Path
    fields: Mapping[str, object]  # what the key is made of, written into the marker for a reader

    @property
    def folder(self) -> Path:
        return self.root / cache_key(self.fields)

    def is_warm(self) -> bool:
        """A finished compile of this key is on disk, every file it left as it left it (the
        marker lists their digests). A marker that cannot be read, or a file changed or gone, is
        one warning and a cold cache, never an error: torch would otherwise log a traceback per
        damaged artifact, or load a kernel that is not the one it built."""
        marker = self.folder / MARKER
        try:
            written = json.loads(marker.read_text())
            if written["key"] != cache_key(self.fields):
                return False
            damaged = [name for name, digest in written["files"].items()
                       if _digest(self.folder / name) != digest]
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            log.warning("ignoring the compile cache in %s (unreadable marker: %s)", self.folder, error)
            return False
        if damaged:
            log.warning("ignoring the compile cache in %s (%d of %d files changed or gone, e.g. %s)",
                        self.folder, len(damaged), len(written["files"]), damaged[0])
        return not damaged

    def activate(self) -> Path:
        """Point inductor at this key's folder (created): call before the first compile of the
        process. A folder that exists but cannot be written (a read-only volume, a cache baked
        into an image) is copied to a temporary folder, used instead (inductor writes as it
        reads). Returns the folder in use; raises OSError where none can be made."""
        self.folder.mkdir(parents=True, exist_ok=True)
        folder = self.folder
        if not os.access(folder, os.W_OK):
            folder = self.elsewhere().folder
            shutil.copytree(self.folder, folder)
            log.info("compile cache %s is read-only: using a copy in %s", self.folder, folder)
        os.environ[INDUCTOR_CACHE_ENV] = str(folder)
        return folder

    def elsewhere(self) -> CompileCache:
        """This key under a new temporary root (the pod's own /tmp), for a start that must not or
        cannot write this root; OSError where none can be made."""
        return CompileCache(Path(tempfile.mkdtemp(prefix="scoringfleet-compile-")), self.fields)

    def mark_warm(self, compile_s: float) -> None:
        """Record a finished compile and the digest of every file in the folder (atomically: a
        reader sees the whole marker or none)."""
        marker = self.folder / MARKER
        partial = marker.with_suffix(".partial")
        files = {str(path.relative_to(self.folder)): _digest(path) for path in sorted(self.folder.rglob("*"))
                 if path.is_file() and path.name not in (MARKER, partial.name) and not path.name.endswith(".lock")}
        partial.write_text(json.dumps({"key": cache_key(self.fields), "compile_s": round(compile_s, 1),
                                       "fields": {k: str(v) for k, v in self.fields.items()},
                                       "files": files}, indent=1))
        partial.replace(marker)

    def seed_from(self, other: CompileCache) -> None:
        """This key's folder made a copy of `other`'s (an image's warm cache of the same key), whole
        or not at all: copied beside it and renamed, so that a pod starting beside this one on a
        shared volume never reads half a copy, nor deletes one. OSError where the root cannot be
        written, or where the folder is there already (another pod's copy, an interrupted compile)."""
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.root / f".{self.folder.name}.{uuid.uuid4().hex}.partial"
        try:
            shutil.copytree(other.folder, partial)
            os.rename(partial, self.folder)  # refused where a folder with files is there
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    @contextlib.contextmanager
    def compiling(self) -> Iterator[bool]:
        """Whether this start may compile cold in this key's folder: True while it holds the key's
        lock (a file beside the folder, flock'd: released with the process, however it ends); False
        where another start holds it, its compile under way in the folder (the caller compiles
        elsewhere, not over it). Where no lock can be taken (an unwritable root, a filesystem
        without locks), True: the compile meets what it meets, as without one."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle = open(self.root / f"{self.folder.name}.lock", "a")  # noqa: SIM115 - held for the block
        except OSError:
            yield True
            return
        with handle:
            yield _lock(handle)

    def discard(self) -> None:
        """Remove this key's folder (what a failed compile may have left), to compile cold."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _digest(path: Path) -> str | None:
    """sha256 of a file's bytes; None where it cannot be read (gone)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _lock(handle) -> bool:
    """An exclusive lock on the open file, not waiting: False where another holder has it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # no locks on this filesystem
        return True
    return True
