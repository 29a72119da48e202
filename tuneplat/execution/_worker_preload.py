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

import logging
import signal
from typing import Any


def _ignore_sigint() -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread of the worker process: nothing to do there
        pass


def dask_setup(worker: Any = None) -> None:
    """Called by distributed in each worker process when it starts."""
    _ignore_sigint()
    logging.getLogger("distributed").setLevel(logging.WARNING)
