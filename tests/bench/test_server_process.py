"""bench.server_process: a real child process (the free server) is started on a loopback port,
becomes ready, reports its memory, and is always stopped."""
import pytest

from bench.server_process import ServerFailed, read_status_kib, start_server


def test_free_server_subprocess_starts_reports_memory_and_is_stopped():
    with start_server("bench.free_server", []) as server:
        server.wait_ready(60)
        assert server.url.startswith("http://127.0.0.1:")
        assert 0 < server.rss_mib() <= server.peak_rss_mib()
        process = server.process
    assert process.poll() is not None  # stopped by the context manager


def test_a_server_that_exits_is_reported_with_its_log():
    with start_server("bench.free_server", ["--max-running-requests", "0"]) as server:
        with pytest.raises(ServerFailed, match="max_running_requests"):
            server.wait_ready(30)


def test_read_status_kib_of_this_process():
    import os

    assert read_status_kib(os.getpid(), "VmRSS") > 0
    assert read_status_kib(os.getpid(), "NoSuchField") == 0
