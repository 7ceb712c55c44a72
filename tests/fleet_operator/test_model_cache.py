"""spec.model.cache's promise, with the real hub client: pods that share one cache volume and start
together download each file once and never read a half-written one; a pre-filled read-only cache is
read offline without a write.

Three processes run huggingface_hub's hf_hub_download (the server's loader calls the same) into one
HF_HOME at once, against a stand-in hub on 127.0.0.1 that streams the file slowly enough for the
downloads to overlap. The hub client's per-blob lock (docs/operator.md, "The model cache") makes
one process download while the others wait, then reuse the blob.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # processes

REPO, FILENAME, COMMIT = "org/model", "model.safetensors", "c0ffee" * 6 + "abcd"
BLOB = os.urandom(4 << 20)  # 4 MiB, streamed in 64 chunks over ~3 s: longer than the clients' start skew
SHA = hashlib.sha256(BLOB).hexdigest()
CHUNKS = 64
DOWNLOAD = (f"from huggingface_hub import hf_hub_download; "
            f"print(hf_hub_download({REPO!r}, {FILENAME!r}))")


class StandInHub(BaseHTTPRequestHandler):
    """/<repo>/resolve/<revision>/<file>: HEAD gives the metadata the client needs, GET the bytes."""

    heads: list[float] = []  # when each client asked for the metadata (every client does, first)
    gets: list[tuple[float, float]] = []  # (start, last bytes sent) of each download

    def _metadata(self) -> bool:
        if self.path != f"/{REPO}/resolve/main/{FILENAME}":
            self.send_error(404)
            return False
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{SHA}"')
        self.send_header("Content-Length", str(len(BLOB)))
        self.end_headers()
        return True

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's names)
        type(self).heads.append(time.monotonic())
        self._metadata()

    def do_GET(self) -> None:  # noqa: N802
        if not self._metadata():
            return
        start, size = time.monotonic(), len(BLOB) // CHUNKS
        for i in range(CHUNKS):
            if i == CHUNKS - 1:
                # Recorded before the last bytes go out: a client that has them all (and a test
                # that then reads `gets`) can never see the download unrecorded.
                type(self).gets.append((start, time.monotonic()))
            else:
                time.sleep(0.05)
            self.wfile.write(BLOB[i * size:(i + 1) * size])

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture()
def hub() -> Iterator[str]:
    StandInHub.heads, StandInHub.gets = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def client_env(hf_home: Path, endpoint: str, offline: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    return {**env, "HF_HOME": str(hf_home), "HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1", "HF_HUB_OFFLINE": "1" if offline else "0"}


def run_clients(count: int, env: dict[str, str]) -> list[str]:
    """Start `count` downloads at once; each one's printed path (fails on any error)."""
    procs = [subprocess.Popen([sys.executable, "-c", DOWNLOAD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(count)]
    paths = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        paths.append(out.strip().splitlines()[-1])
    return paths


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_pods_sharing_a_cache_download_each_file_once_and_read_it_whole(hub, tmp_path):
    hf_home = tmp_path / "shared-volume"
    paths = run_clients(3, client_env(hf_home, hub))
    assert len(set(paths)) == 1
    assert hashlib.sha256(Path(paths[0]).read_bytes()).hexdigest() == SHA  # whole, not interleaved
    # one download: the two that found the lock taken waited, then reused the blob
    assert len(StandInHub.gets) == 1, f"{len(StandInHub.gets)} downloads of one file"
    # and they did find it taken: every client had asked before the download ended (else the test
    # would only show that a finished blob is reused)
    [(_, download_end)] = StandInHub.gets
    assert len(StandInHub.heads) == 3 and max(StandInHub.heads) < download_end
    assert not [p for p in files_under(hf_home) if p.endswith(".incomplete")]
    assert (hf_home / "hub" / ".locks" / "models--org--model" / f"{SHA}.lock").exists()


def test_a_prefilled_cache_is_read_offline_without_a_write(hub, tmp_path):
    hf_home = tmp_path / "read-only-volume"
    run_clients(1, client_env(hf_home, hub))  # the job that fills the volume
    before, gets = files_under(hf_home), len(StandInHub.gets)
    # what the operator runs on a read-only cache (HF_HUB_OFFLINE=1): no hub, no lock file, no write
    [path] = run_clients(1, client_env(hf_home, "http://127.0.0.1:9", offline=True))
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == SHA
    assert len(StandInHub.gets) == gets and files_under(hf_home) == before
