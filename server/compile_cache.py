"""The compile cache: torch inductor's on-disk caches (its FX graph and AOT autograd caches and the
C++/Triton kernels it builds) kept for the next start, one folder per key, under a root on the
model cache volume by default ($HF_HOME/scoringfleet/compile: `spec.model.cache` is mounted at
HF_HOME, so every pod of a fleet shares it).

The key names everything a compiled graph depends on that inductor's own keys may not: torch and
transformers versions, the model (path and config), dtype, the processor's ISA, the layout, frozen
weights or not, the warm-up shapes. A folder is warm once a compile in it finished
(`MARKER` written last); a stale one is simply another key's, never read. What inductor finds
corrupt in a folder fails the compile: the caller discards the folder and compiles cold once
(compile_start.py). Owns the folder and the marker; nothing of when to compile.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

log = logging.getLogger(__name__)

MARKER = "scoringfleet-compile.json"  # written once a compile in the folder finished
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


@dataclass(frozen=True)
class CompileCache:
    root: Path
    fields: Mapping[str, object]  # what the key is made of, written into the marker for a reader

    @property
    def folder(self) -> Path:
        return self.root / cache_key(self.fields)

    def is_warm(self) -> bool:
        """A finished compile of this key is on disk. A marker that cannot be read is one
        warning and a cold cache (never an error)."""
        marker = self.folder / MARKER
        try:
            return json.loads(marker.read_text())["key"] == cache_key(self.fields)
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("ignoring the compile cache in %s (unreadable marker: %s)", self.folder, error)
            return False

    def holds_artifacts(self) -> bool:
        """Anything is in this key's folder (a finished compile's, or what an interrupted one left)."""
        return self.folder.is_dir() and any(self.folder.iterdir())

    def activate(self) -> None:
        """Point inductor at this key's folder (created): call before the first compile of the
        process. Raises OSError where it cannot be created."""
        self.folder.mkdir(parents=True, exist_ok=True)
        os.environ[INDUCTOR_CACHE_ENV] = str(self.folder)

    def mark_warm(self, compile_s: float) -> None:
        """Record a finished compile (atomically: a reader sees the whole marker or none)."""
        marker = self.folder / MARKER
        partial = marker.with_suffix(".partial")
        partial.write_text(json.dumps({"key": cache_key(self.fields), "compile_s": round(compile_s, 1),
                                       "fields": {k: str(v) for k, v in self.fields.items()}}, indent=1))
        partial.replace(marker)

    def discard(self) -> None:
        """Remove this key's folder (what a failed compile may have left), to compile cold."""
        shutil.rmtree(self.folder, ignore_errors=True)
