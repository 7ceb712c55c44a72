"""Kubelet: local processes bound to pods, and their graceful termination.

Owns the binding pod (namespace, name) -> process (a subprocess.Popen, or anything with
send_signal/poll/kill) and the termination of a bound pod once it is deleted: SIGTERM, then SIGKILL
after the grace period; `on_exit` is called once the process has exited. The Cluster decides what
the pod object shows (pods.py) and when it goes. bind() may be called from any thread; the rest runs
on the emulator's event loop.
"""
import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from typing import Protocol

PodKey = tuple[str, str]  # (namespace, name)
POLL_S = 0.02  # how often a terminating process is checked for its exit
# After SIGKILL a process exits at once; if poll() still says it runs after this long (a broken
# reader, a fake that never exits), the pod goes anyway rather than stay terminating forever.
KILL_WAIT_S = 5.0
log = logging.getLogger(__name__)


class Process(Protocol):
    def send_signal(self, sig: int) -> None: ...
    def poll(self) -> int | None: ...
    def kill(self) -> None: ...


class Kubelet:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # bind() comes from test threads
        self._bound: dict[PodKey, Process] = {}
        self._stopping: dict[PodKey, tuple[Process, asyncio.Task[None]]] = {}

    def bind(self, key: PodKey, process: Process) -> None:
        with self._lock:
            self._bound[key] = process

    def unbind(self, key: PodKey) -> None:
        with self._lock:
            self._bound.pop(key, None)

    def is_bound(self, key: PodKey) -> bool:
        with self._lock:
            return key in self._bound

    def is_terminating(self, key: PodKey) -> bool:
        """True while a deleted pod's process has not exited (the pod object must stay)."""
        return key in self._stopping

    def terminate(self, key: PodKey, grace_s: int, on_exit: Callable[[], None]) -> None:
        """SIGTERM the pod's process now (SIGKILL if grace_s is 0), SIGKILL it after grace_s."""
        with self._lock:
            process = self._bound.pop(key, None)
        if process is None or key in self._stopping:
            return
        task = asyncio.get_running_loop().create_task(self._stop(key, process, grace_s, on_exit))
        self._stopping[key] = (process, task)

    async def _stop(self, key: PodKey, process: Process, grace_s: int, on_exit: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        try:
            _send(process, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
            killed = grace_s <= 0
            deadline = loop.time() + (KILL_WAIT_S if killed else grace_s)
            while process.poll() is None:
                if loop.time() >= deadline:
                    if killed:
                        log.warning("pod %s/%s: process still running %s s after SIGKILL; "
                                    "removing the pod", *key, KILL_WAIT_S)
                        break
                    _send(process, signal.SIGKILL)
                    killed, deadline = True, loop.time() + KILL_WAIT_S
                await asyncio.sleep(POLL_S)
        finally:
            self._stopping.pop(key, None)
        on_exit()

    def close(self) -> None:
        """Stop watching; processes still terminating are killed (they were deleted anyway)."""
        for process, task in list(self._stopping.values()):
            task.cancel()
            _send(process, signal.SIGKILL)
        self._stopping.clear()


def _send(process: Process, sig: int) -> None:
    try:
        process.send_signal(sig)
    except ProcessLookupError:
        pass  # it exited already
