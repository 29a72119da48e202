"""Preload of the embedded cluster's worker processes (``distributed.worker.preload``).

A Ctrl-C in the terminal sends SIGINT to every process of the foreground
process group, which includes the worker processes of the embedded
``LocalCluster``. Left alone, each prints a ``KeyboardInterrupt`` traceback
from whatever it was running. The tuner owns the interrupt: it ends the
trials and closes the cluster, so the workers ignore SIGINT.

The worker's ``distributed`` logger is also kept at WARNING: its INFO lines
while the cluster closes ("Connection to ... has been closed.") would
otherwise end the user's terminal output. (``silence_logs`` only lowers the
handlers until the worker closes.)
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import threading
from typing import Any

#: modules the trainable needs (comma-separated), set by the tuner for the embedded cluster's workers: imported in
#: the background as each worker starts, so a first trial does not pay for ``import torch`` after it is placed
IMPORTS_ENV = "TUNEPLAT_WORKER_IMPORTS"


def _import_in_background(names: list[str]) -> None:
    def run() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a head start only: the trial imports (and reports) for itself
                logging.getLogger("tuneplat").debug("tuneplat: preloading %s failed", name, exc_info=True)

    # (a task that imports the same module meanwhile waits on Python's import lock: no import runs twice)
    threading.Thread(target=run, name="tuneplat-preload", daemon=True).start()


def _ignore_sigint() -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread of the worker process: nothing to do there
        pass


class _CloseRace(logging.Filter):
    """Drop the tracebacks of a heartbeat that races the embedded cluster closing.

    Two races, both ERROR lines with a traceback, neither losing anything: the
    worker is being closed anyway.

    * A worker's last heartbeat finds its TLS connection half-shut ("IOStream is
      not idle; cannot convert to SSL", from tornado).
    * The scheduler retired the worker (``LocalCluster.close`` scales to 0), the
      next heartbeat hears "missing", the worker closes and its goodbye to its
      nanny, which is closing too, fails ("Failed to communicate with scheduler
      during heartbeat.", a ``CommClosedError``). Dropped only while this worker
      is closing or closed: the same message from a running worker (a scheduler
      out of reach) still shows.

    Only in the embedded cluster's workers.
    """

    _CLOSING = frozenset({"closing", "closing_gracefully", "closed", "failed"})

    def __init__(self, worker: Any = None) -> None:
        super().__init__()
        self._worker = worker

    def _closing(self) -> bool:
        status = getattr(self._worker, "status", None)
        return getattr(status, "name", None) in self._CLOSING

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        text = f"{record.getMessage()} {exc or ''}"
        if "IOStream is not idle; cannot convert to SSL" in text:
            return False
        return not (record.getMessage().startswith("Failed to communicate with scheduler during heartbeat")
                    and self._closing())


def dask_setup(worker: Any = None) -> None:
    """Called by distributed in each worker process when it starts."""
    from ._frames_guard import install as guard_frames

    guard_frames()  # CPython 3.11: the profiler's sys._current_frames() could deadlock (gh-106883), from the start
    _ignore_sigint()
    names = [n for n in os.environ.get(IMPORTS_ENV, "").split(",") if n]
    if names:
        _import_in_background(names)
    logging.getLogger("distributed").setLevel(logging.WARNING)
    logging.getLogger("distributed.worker").addFilter(_CloseRace(worker))
