"""The embedded cluster's processes: this machine's GPUs, the worker processes it started and their end, and its
shutdown kept quiet."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

__all__ = ["child_pids", "end_processes", "local_gpu_count", "quiet_distributed", "worker_processes_started_since"]

logger = logging.getLogger("tuneplat")


def local_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))



def child_pids() -> set[int]:
    import psutil

    try:
        return {p.pid for p in psutil.Process().children()}
    except psutil.Error:
        return set()


def worker_processes_started_since(before: set[int]) -> list[Any]:
    """Dask worker processes (a nanny's ``multiprocessing`` spawn) this process started since ``before``, with
    whatever they started."""
    if not before:
        return []
    import psutil

    out: list[Any] = []
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return out
    for p in children:
        if p.pid in before:
            continue
        try:
            cmd = " ".join(p.cmdline())
            if "multiprocessing.spawn" in cmd and "--multiprocessing-fork" in cmd:
                out += [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
    return out


def end_processes(procs: list[Any], grace_s: float = 5.0) -> None:
    """Make sure ``procs`` (psutil processes) are gone: wait ``grace_s`` for them to leave, then SIGKILL.

    ``LocalCluster.close()`` returns once its nannies gave up waiting: a worker
    whose task thread was inside user code (a rank in a long step, a blocked
    collective) could outlive it. Nothing the embedded cluster started may
    outlive ``fit()``, whatever ended it.
    """
    if not procs:
        return
    import psutil

    def running(p: Any) -> bool:  # zombies too: waiting for our own reaps them
        try:
            return bool(p.is_running())
        except psutil.Error:
            return False

    _gone, left = psutil.wait_procs([p for p in procs if running(p)], timeout=grace_s)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            continue
    if left:
        logger.debug("tuneplat: killed %d process(es) of the embedded cluster that outlived its close", len(left))
        psutil.wait_procs(left, timeout=grace_s)



@contextlib.contextmanager
def quiet_distributed(quiet: bool) -> Iterator[None]:
    """While our own embedded cluster shuts down, its INFO lines ("connection closed") and the nanny's
    cancelled-task tracebacks say nothing the user can act on: keep them out of the user's terminal."""
    if not quiet:
        yield
        return
    loggers = [logging.getLogger(n) for n in ("distributed", "distributed.core", "distributed.nanny",
                                                 "distributed.scheduler", "distributed.worker")]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)
