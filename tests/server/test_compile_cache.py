"""compile_cache: one folder per key, warm only once a compile in it finished (the marker), a
marker that cannot be read is a cold cache with one warning, and inductor is pointed at the folder."""
from __future__ import annotations

import logging
import os

import pytest

from server.compile_cache import INDUCTOR_CACHE_ENV, MARKER, CompileCache, cache_key
from tests.server.support import warnings_of

FIELDS = {"torch": "1.0.0", "model": "m", "dtype": "bfloat16", "isa": "AVX512+amx"}


def test_the_key_depends_on_every_field_and_not_on_their_order():
    assert cache_key(FIELDS) == cache_key(dict(reversed(list(FIELDS.items()))))
    for name in FIELDS:
        assert cache_key({**FIELDS, name: "other"}) != cache_key(FIELDS), name


def test_a_folder_is_warm_once_a_compile_in_it_finished(tmp_path, monkeypatch):
    monkeypatch.delenv(INDUCTOR_CACHE_ENV, raising=False)
    cache = CompileCache(tmp_path, FIELDS)
    assert not cache.is_warm()
    cache.activate()
    assert os.environ[INDUCTOR_CACHE_ENV] == str(cache.folder) and cache.folder.is_dir()
    (cache.folder / "fxgraph").mkdir()  # what inductor writes while compiling
    (cache.folder / "fxgraph" / "graph").write_bytes(b"compiled")
    assert not cache.is_warm()  # an interrupted compile is not warm
    cache.mark_warm(12.34)
    assert cache.is_warm()
    assert not CompileCache(tmp_path, {**FIELDS, "torch": "1.0.1"}).is_warm()  # another key's


def test_an_unreadable_marker_is_a_cold_cache_and_one_warning(tmp_path, caplog):
    cache = CompileCache(tmp_path, FIELDS)
    cache.folder.mkdir(parents=True)
    (cache.folder / MARKER).write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert not cache.is_warm()
    assert len(warnings_of(caplog)) == 1 and "ignoring the compile cache" in warnings_of(caplog)[0]


@pytest.mark.parametrize("damage", ["changed", "gone"])
def test_a_cached_file_changed_or_gone_is_a_cold_cache_and_one_warning(tmp_path, caplog, damage):
    cache = CompileCache(tmp_path, FIELDS)
    cache.folder.mkdir(parents=True)
    for name in ("a.so", "b.py"):
        (cache.folder / name).write_bytes(b"built " + name.encode())
    cache.mark_warm(5.0)
    if damage == "changed":
        (cache.folder / "a.so").write_bytes(b"\x00corrupt")
    else:
        (cache.folder / "a.so").unlink()
    with caplog.at_level(logging.WARNING):
        assert not cache.is_warm()
    assert warnings_of(caplog) == [
        f"ignoring the compile cache in {cache.folder} (1 of 2 files changed or gone, e.g. a.so)"]


def test_discard_removes_the_folder(tmp_path):
    cache = CompileCache(tmp_path, FIELDS)
    cache.folder.mkdir(parents=True)
    cache.mark_warm(1.0)
    cache.discard()
    assert not cache.folder.exists() and not cache.is_warm()


def test_a_read_only_cache_is_used_through_a_writable_copy(tmp_path, monkeypatch):
    monkeypatch.delenv(INDUCTOR_CACHE_ENV, raising=False)
    cache = CompileCache(tmp_path, FIELDS)
    cache.folder.mkdir(parents=True)
    (cache.folder / "kernel.so").write_bytes(b"built")
    cache.mark_warm(3.0)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as on a read-only volume (root writes anywhere)
    used = cache.activate()
    assert used != cache.folder and (used / "kernel.so").read_bytes() == b"built"
    assert os.environ[INDUCTOR_CACHE_ENV] == str(used) and cache.is_warm()


def test_a_seed_is_a_whole_copy_or_none(tmp_path):
    image = CompileCache(tmp_path / "image", FIELDS)
    image.folder.mkdir(parents=True)
    (image.folder / "kernel.so").write_bytes(b"built")
    image.mark_warm(2.0)
    cache = CompileCache(tmp_path / "volume", FIELDS)
    cache.seed_from(image)
    assert cache.is_warm() and (cache.folder / "kernel.so").read_bytes() == b"built"

    (cache.folder / MARKER).unlink()  # as a compile under way in another pod leaves it
    with pytest.raises(OSError):
        cache.seed_from(image)
    assert (cache.folder / "kernel.so").exists()  # not deleted
    assert sorted(p.name for p in cache.root.iterdir()) == [cache.folder.name]  # no partial copy left


def test_one_start_at_a_time_compiles_cold_in_a_folder(tmp_path):
    cache = CompileCache(tmp_path / "volume", FIELDS)
    with cache.compiling() as first:
        with cache.compiling() as second:  # another start (its own open file: its own lock)
            assert first and not second
    with cache.compiling() as after:
        assert after  # released with the first's block
    (tmp_path / "file").write_text("a file where the root should be")
    with CompileCache(tmp_path / "file", FIELDS).compiling() as no_lock:
        assert no_lock  # nothing to lock: compile as without one
