"""compile_start: what a start does with --compile, faults contained. Fast: a stand-in runner
whose compile succeeds or raises (the compile's own correctness is test_compiled_forward's).
Slow: three real `python -m server` starts on a tiny model sharing one compile cache folder: cold
(`--compile on`), then warm (`auto` compiles in float32 only because the cache is warm, and compiles
no graph anew), then with every cached file corrupted (one warning, compiled cold, scores unchanged);
and `python -m server.prebuilt_compile` (the image's build) then a start on an empty volume that
takes every graph from a copy of it."""
from __future__ import annotations

import fcntl
import json
import logging
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest
import torch

from bench.server_process import free_port
from server import __main__ as server_main, compile_start, prebuilt_compile
from server.compile_cache import IMAGE_ROOT_ENV, MARKER, CompileCache
from server.compile_start import IMAGE_WARMTH, compile_if_it_pays, use_attention_kernel_eager
from server.config import ServerConfig
from server.errors import ModelLoadError
from tests.kit.servers import server_env, wait_ready
from tests.server.support import warnings_of
from tests.server.test_cpu_target import V4


class ModelConfig:
    def to_json_string(self) -> str:
        return '{"model_type": "llama"}'


@dataclass
class StandInRunner:
    """The runner's compile surface; `failures` compiles raise before one succeeds."""

    failures: int = 0
    calls: int = 0
    can_compile: bool = True
    eager_reason: str = "eager: a cross-encoder has no items forward to compile"  # when not can_compile
    device: object = field(default_factory=lambda: torch.device("cpu"))
    model: object = field(default_factory=lambda: type("Model", (), {"config": ModelConfig()})())

    def compile_settings(self) -> dict:
        return {"layout": "cascade", "freeze": True}

    def compile(self) -> float:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("inductor could not load a cached kernel")
        return 1.5


@pytest.fixture(autouse=True)
def inductor_march_restored():
    """compile_if_it_pays sets inductor's global -march: each test starts from inductor's default."""
    from torch._inductor import config as inductor_config

    with inductor_config.patch({"cpp.march": None, "cpp.dynamic_threads": False}):
        yield inductor_config.cpp


def key_folders(root: Path) -> list[Path]:
    """The cache folders under a root (beside them: each key's lock file)."""
    return [path for path in root.iterdir() if path.is_dir()]


def config(tmp_path: Path, mode: str) -> ServerConfig:
    return ServerConfig(compile=mode, compile_cache_dir=str(tmp_path / "compile")).resolve("cpu", "float32")


def test_an_eager_runner_builds_our_attention_beside_the_compile_caches(tmp_path):
    folders = []
    runner = type("EagerRunner", (), {"use_attention_kernel": lambda self, folder: folders.append(folder)})()
    use_attention_kernel_eager(config(tmp_path, "off"), runner)
    use_attention_kernel_eager(config(tmp_path, "off"), StandInRunner())  # no joined attention: nothing
    assert folders == [tmp_path / "compile" / "kernels"]


def test_on_compiles_and_marks_the_cache_warm(tmp_path):
    runner = StandInRunner()
    choice = compile_if_it_pays(config(tmp_path, "on"), runner)
    assert choice.compile and runner.calls == 1
    assert len(list((tmp_path / "compile").glob(f"*/{MARKER}"))) == 1


def test_a_runner_without_an_items_forward_stays_eager_even_when_on(tmp_path, caplog):
    runner = StandInRunner(can_compile=False)  # as a cross-encoder's EncoderRunner
    with caplog.at_level(logging.WARNING):
        choice = compile_if_it_pays(config(tmp_path, "on"), runner)
    assert not choice.compile and runner.calls == 0 and "cross-encoder" in " ".join(warnings_of(caplog))


def test_kernels_are_built_for_the_cpus_level_and_the_key_names_it(tmp_path, monkeypatch, inductor_march_restored):
    zen5 = frozenset(V4 | {"avx512_bf16"})
    ice_lake = frozenset(V4)
    keys = {}
    for name, flags in {"zen 5": zen5, "ice lake": ice_lake}.items():
        monkeypatch.setattr(compile_start, "read_cpu_flags", lambda flags=flags: flags)
        inductor_march_restored.march = None
        compile_if_it_pays(config(tmp_path, "on"), StandInRunner())
        keys[name] = {folder.name for folder in key_folders(tmp_path / "compile")} - set().union(*keys.values())
    assert inductor_march_restored.march == "x86-64-v4"  # Ice Lake's, the last
    assert all(len(new) == 1 for new in keys.values())  # a folder each: Zen 5's kernels never run on Ice Lake
    marker = json.loads(next((tmp_path / "compile").glob(f"*/{MARKER}")).read_text())
    assert "march: x86-64-v4" in marker["fields"]["isa"]
    assert inductor_march_restored.dynamic_threads and marker["fields"]["threads"] == "dynamic"


def test_what_the_user_chose_for_inductor_is_kept(tmp_path, monkeypatch, inductor_march_restored):
    inductor_march_restored.march = "haswell"  # as TORCHINDUCTOR_CPP_MARCH=haswell sets it
    monkeypatch.setenv("TORCHINDUCTOR_CPP_DYNAMIC_THREADS", "0")
    compile_if_it_pays(config(tmp_path, "on"), StandInRunner())
    assert inductor_march_restored.march == "haswell" and not inductor_march_restored.dynamic_threads
    marker = json.loads(next((tmp_path / "compile").glob(f"*/{MARKER}")).read_text())
    assert marker["fields"]["threads"] == str(torch.get_num_threads())


def test_off_never_compiles(tmp_path):
    runner = StandInRunner()
    assert not compile_if_it_pays(config(tmp_path, "off"), runner).compile and runner.calls == 0


def test_a_compile_that_fails_in_a_warm_folder_discards_it_and_compiles_cold(tmp_path, caplog):
    compile_if_it_pays(config(tmp_path, "on"), StandInRunner())
    (folder,) = key_folders(tmp_path / "compile")
    runner = StandInRunner(failures=1)  # as when a cached kernel no longer loads
    with caplog.at_level(logging.WARNING):
        assert compile_if_it_pays(config(tmp_path, "auto"), runner).compile  # warm: auto compiles
    assert runner.calls == 2 and (folder / MARKER).exists()
    assert [message.split(" (")[0] for message in warnings_of(caplog)] == [f"discarding the compile cache {folder}"]


def test_what_a_cold_folder_holds_is_discarded_before_compiling(tmp_path):
    cold = config(tmp_path, "on")
    compile_if_it_pays(cold, StandInRunner())
    (folder,) = key_folders(tmp_path / "compile")
    (folder / MARKER).unlink()  # as an interrupted compile leaves it
    (folder / "half-written.so").write_bytes(b"partial")
    compile_if_it_pays(cold, StandInRunner())
    assert not (folder / "half-written.so").exists() and (folder / MARKER).exists()


def test_a_cold_compile_under_way_elsewhere_is_left_alone(tmp_path):
    """Two starts on one new shared volume: the second compiles in a temporary folder rather than
    discard what the first is writing; once the first is done, its folder serves later starts."""
    cold = config(tmp_path, "on")
    compile_if_it_pays(cold, StandInRunner())
    (folder,) = key_folders(tmp_path / "compile")
    (folder / MARKER).unlink()
    (folder / "being-written.so").write_bytes(b"the first start's compile")
    with open(folder.parent / f"{folder.name}.lock", "a") as first:  # the first start holds the lock
        fcntl.flock(first, fcntl.LOCK_EX)
        runner = StandInRunner()
        assert compile_if_it_pays(cold, runner).compile and runner.calls == 1
        assert (folder / "being-written.so").exists() and not (folder / MARKER).exists()
    compile_if_it_pays(cold, StandInRunner())  # the lock released: this start compiles there
    assert not (folder / "being-written.so").exists() and (folder / MARKER).exists()


def test_a_compile_that_still_fails_leaves_auto_eager_and_refuses_on(tmp_path, caplog):
    compile_if_it_pays(config(tmp_path, "on"), StandInRunner())  # warm, so auto compiles
    with caplog.at_level(logging.WARNING):
        choice = compile_if_it_pays(config(tmp_path, "auto"), StandInRunner(failures=9))
    assert not choice.compile and choice.reason.endswith("the compile failed, eager")
    assert "serving eager" in warnings_of(caplog)[-1]
    with pytest.raises(ModelLoadError, match="--compile on: compiling the items forward failed"):
        compile_if_it_pays(config(tmp_path, "on"), StandInRunner(failures=9))


def test_an_unwritable_cache_compiles_without_one(tmp_path, caplog):
    (tmp_path / "compile").write_text("a file where the folder should be")
    runner = StandInRunner()
    with caplog.at_level(logging.WARNING):
        assert compile_if_it_pays(config(tmp_path, "on"), runner).compile
    assert runner.calls == 1 and "not writable" in " ".join(warnings_of(caplog))


def image_with_a_warm_cache(tmp_path: Path, monkeypatch) -> Path:
    """An image's compile cache root (as prebuilt_compile leaves it), warm for StandInRunner's key."""
    image = tmp_path / "image"
    monkeypatch.setenv(IMAGE_ROOT_ENV, str(image))
    compile_if_it_pays(replace(config(tmp_path, "on"), compile_cache_dir=str(image)), StandInRunner())
    (folder,) = key_folders(image)
    (folder / "kernel.so").write_bytes(b"built when the image was")
    CompileCache(image, json.loads((folder / MARKER).read_text())["fields"]).mark_warm(1.0)
    return folder


def test_a_cold_cache_starts_from_a_copy_of_the_images(tmp_path, monkeypatch):
    image_folder = image_with_a_warm_cache(tmp_path, monkeypatch)
    runner = StandInRunner()
    choice = compile_if_it_pays(config(tmp_path, "auto"), runner)  # float32: compiles only where warm
    assert choice.compile and choice.reason.endswith(f"({IMAGE_WARMTH})") and runner.calls == 1
    own = tmp_path / "compile" / image_folder.name
    assert (own / "kernel.so").read_bytes() == b"built when the image was" and (own / MARKER).exists()
    assert {p.name for p in image_folder.iterdir()} == {MARKER, "kernel.so"}  # the image's untouched


def test_an_unwritable_cache_starts_from_a_temporary_copy_of_the_images(tmp_path, monkeypatch, caplog):
    image_with_a_warm_cache(tmp_path, monkeypatch)
    (tmp_path / "compile").write_text("a file where the folder should be")
    with caplog.at_level(logging.WARNING):
        choice = compile_if_it_pays(config(tmp_path, "auto"), StandInRunner())
    assert choice.compile and choice.reason.endswith(f"({IMAGE_WARMTH})")
    assert not [line for line in warnings_of(caplog) if "could not copy" in line]


def test_a_folder_an_interrupted_compile_left_is_kept_and_the_start_takes_a_temporary_copy(tmp_path, monkeypatch):
    image_folder = image_with_a_warm_cache(tmp_path, monkeypatch)
    left = tmp_path / "compile" / image_folder.name
    left.mkdir(parents=True)
    (left / "half-written.so").write_bytes(b"another pod's compile, under way")
    choice = compile_if_it_pays(config(tmp_path, "auto"), StandInRunner())
    assert choice.compile and choice.reason.endswith(f"({IMAGE_WARMTH})")
    assert [p.name for p in left.iterdir()] == ["half-written.so"]


def test_the_images_cache_of_another_key_or_under_off_is_not_read(tmp_path, monkeypatch):
    image_with_a_warm_cache(tmp_path, monkeypatch)
    other_model = StandInRunner(model=type("Model", (), {"config": type("C", (), {
        "to_json_string": lambda self: '{"model_type": "qwen2"}'})()})())
    assert not compile_if_it_pays(config(tmp_path, "auto"), other_model).compile  # float32, cold: eager
    assert not compile_if_it_pays(config(tmp_path, "off"), StandInRunner()).compile
    assert not (tmp_path / "compile").exists()


def test_prebuilt_compile_compiles_into_the_images_root_as_the_server_would(tmp_path, monkeypatch, capsys):
    image = tmp_path / "image"
    monkeypatch.setenv(IMAGE_ROOT_ENV, str(image))
    monkeypatch.setattr(server_main, "build_runner", lambda config: StandInRunner())
    assert prebuilt_compile.main(["--dtype", "float32", "--compile", "on"]) == 0
    assert len(list(image.glob(f"*/{MARKER}"))) == 1 and "kept in" in capsys.readouterr().out
    monkeypatch.setenv(IMAGE_ROOT_ENV, str(tmp_path / "another image"))
    assert prebuilt_compile.main(["--dtype", "float32", "--compile", "auto"]) == 0  # float32, cold: no
    assert "none, the server would not compile here" in capsys.readouterr().out


# ---- slow: the real server, three starts on one cache folder ------------------------------------

SCORE_BODY = {"query": "What is the capital of California?", "items": ["Sacramento", "San Jose"],
              "label_token_ids": [5, 17]}


@dataclass
class Start:
    compile: str
    reason: str
    scores: list
    log: str


def start_and_score(model: Path, cache: Path, mode: str, env: dict[str, str] | None = None) -> Start:
    port = free_port()
    env = env or {**server_env(), "SCORINGFLEET_COMPILE": ""}  # the flag alone decides
    process = subprocess.Popen(
        [sys.executable, "-m", "server", "--model-path", str(model), "--port", str(port), "--dtype",
         "float32", "--num-threads", "1", "--compile", mode, "--compile-cache-dir", str(cache)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, url, timeout_s=300)
        info = httpx.get(f"{url}/get_server_info").json()
        scores = httpx.post(f"{url}/v1/score", json=SCORE_BODY, timeout=30).json()["scores"]
    finally:
        process.send_signal(signal.SIGTERM)
        log, _ = process.communicate(timeout=60)
    return Start(info["compile"], info["compile_reason"], scores, log)


def flat(scores: list[list[float]]) -> list[float]:
    return [p for row in scores for p in row]


def cached_files(cache: Path, pattern: str = "*") -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob(pattern) if p.is_file() and p.name != MARKER}


@pytest.mark.slow
def test_a_warm_cache_is_used_by_auto_and_a_corrupt_one_is_recompiled(tiny_model_dir, tmp_path):
    cache = tmp_path / "compile"
    cold = start_and_score(tiny_model_dir, cache, "on")
    assert cold.compile == "on" and "cold compile cache" in cold.log, cold.log
    kernels = cached_files(cache, "*.so")  # the C++ kernels: most of a cold compile's time on CPU
    assert kernels and json.loads(next(cache.rglob(MARKER)).read_text())["compile_s"] > 0

    warm = start_and_score(tiny_model_dir, cache, "auto")  # float32: eager unless warm
    assert (warm.compile, warm.reason) == ("on", "auto: a warm compile cache for this model, dtype and processor")
    assert cached_files(cache, "*.so") == kernels
    assert re.search(r"graphs: [1-9]\d* from the compile cache, 0 compiled", warm.log), warm.log  # none anew
    assert flat(warm.scores) == pytest.approx(flat(cold.scores), abs=1e-6)

    for name in cached_files(cache):
        (cache / name).write_bytes(b"\x00corrupt")
    damaged = start_and_score(tiny_model_dir, cache, "on")
    assert damaged.compile == "on" and "cold compile cache" in damaged.log, damaged.log
    warnings = [line for line in damaged.log.splitlines() if "WARNING" in line and "rerank" not in line]
    assert len(warnings) == 1 and "ignoring the compile cache" in warnings[0], damaged.log
    assert "Traceback" not in damaged.log
    assert flat(damaged.scores) == pytest.approx(flat(cold.scores), abs=1e-6)


@pytest.mark.slow
def test_a_start_with_a_cold_cache_takes_the_images_compile(tiny_model_dir, tmp_path):
    """prebuilt_compile as the Dockerfile runs it, then a start on an empty cache volume: every graph
    from the copy of the image's cache, none compiled (inductor's caches survive the move)."""
    image = tmp_path / "image"
    env = {**server_env(), "SCORINGFLEET_COMPILE": "", IMAGE_ROOT_ENV: str(image)}
    baked = subprocess.run([sys.executable, "-m", "server.prebuilt_compile", "--model-path", str(tiny_model_dir),
                            "--dtype", "float32", "--num-threads", "1", "--compile", "on"],
                           env=env, capture_output=True, text=True, timeout=600)
    assert baked.returncode == 0 and "prebuilt compile: kept in" in baked.stdout, baked.stdout + baked.stderr
    pod = start_and_score(tiny_model_dir, tmp_path / "volume", "auto", env)  # float32: eager unless warm
    assert pod.compile == "on" and pod.reason.endswith(f"({IMAGE_WARMTH})"), pod.log
    assert re.search(r"graphs: [1-9]\d* from the compile cache, 0 compiled", pod.log), pod.log
    assert cached_files(tmp_path / "volume", "*.so") == cached_files(image, "*.so")
