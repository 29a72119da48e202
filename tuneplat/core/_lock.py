"""An in-use lock on an experiment folder, so two Tuners never write one experiment.

The lock is an ``fcntl.flock`` on ``<experiment>/.tuneplat.lock``: the kernel
drops it when its owner exits, however it exits (a crash or SIGKILL leaves no
stale lock). The file records who holds it, for the error message.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, as before
    fcntl = None  # type: ignore[assignment]

__all__ = ["ExperimentLock", "ExperimentLockedError"]

LOCK_NAME = ".tuneplat.lock"


class ExperimentLockedError(RuntimeError):
    """Another live process runs an experiment in this folder."""


class ExperimentLock:
    """Hold the experiment folder for one ``fit()``; a context manager."""

    def __init__(self, experiment_dir: str) -> None:
        self.path = os.path.join(experiment_dir, LOCK_NAME)
        self._fd: int | None = None

    def acquire(self) -> None:
        if fcntl is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            who = (f"process {holder.get('pid')} on {holder.get('host')}, since "
                   f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder.get('since', 0)))}"
                   if holder else "another process")
            folder = os.path.dirname(self.path)
            raise ExperimentLockedError(
                f"{folder} is in use by {who}: another Tuner is running this experiment. Wait for it to end (or "
                f"stop it), or give this run its own RunConfig(name=...) / storage_path.") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            os.close(fd)  # (closing drops the flock)

    def __enter__(self) -> ExperimentLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        holder = json.loads(data.decode()) if data else {}
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}
