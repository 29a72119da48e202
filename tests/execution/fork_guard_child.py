"""Run by tests/execution/test_fork_guard.py in a fresh interpreter: fork while another thread holds HEAD_LOCK.

``python fork_guard_child.py guard|no-guard``: a thread takes the interpreter's thread-state lock (as torch's gloo
thread does when it makes a thread state), the main thread forks, the child exits at once. Prints one JSON line:
whether the child exited within the bound and, with the guard, how many times the guard found the lock held.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import sys
import threading
import time

from tuneplat.execution import _fork_guard as guard

mutex = guard._head_lock() or sys.exit("no HEAD_LOCK found on this Python")
_api = ctypes.PyDLL(None)
acquire, release = _api.PyThread_acquire_lock, _api.PyThread_release_lock
acquire.restype, acquire.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]
release.restype, release.argtypes = None, [ctypes.c_void_p]
use_guard = sys.argv[1] == "guard"
held, go = threading.Event(), threading.Event()
waits: list[float] = []


class _Clock:
    """The guard's ``time``: its sleep (it found the lock held) lets the holder let go, so the guard waits for real."""

    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def sleep(seconds: float) -> None:
        waits.append(seconds)
        go.set()
        time.sleep(seconds)


def hold() -> None:
    # (nothing between taking and giving back may wait for the GIL while another thread, holding it, waits for the
    # lock: only Event calls, and no thread starts or ends meanwhile)
    assert acquire(mutex, 0), "HEAD_LOCK was not free"
    held.set()
    # with the guard: until the guard has found the lock held; without: until the fork has happened
    go.wait(120)
    release(mutex)


if use_guard:
    guard.time = _Clock  # type: ignore[assignment]
    guard._WAIT_S = 120.0  # (the holder lets go as soon as it runs; on a loaded machine that may take a while)
    assert guard.install(), "the guard did not install on an affected Python"
holder = threading.Thread(target=hold)
holder.start()
held.wait()
pid = os.fork()
if pid == 0:
    os._exit(0)  # the child: only reached once PyOS_AfterFork_Child is done
go.set()  # (without the guard) the fork is done: the parent's holder lets go
holder.join()
bound = float(sys.argv[2])
fd = os.pidfd_open(pid)
exited = bool(select.select([fd], [], [], bound)[0])
if not exited:
    os.kill(pid, 9)
_, status = os.waitpid(pid, 0)
print(json.dumps({"exited": exited, "status": status, "guard_waits": len(waits)}))
