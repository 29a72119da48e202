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

__all__ = ["end_processes", "local_gpu_count", "quiet_distributed", "spawned_workers", "tracked_nanny_class"]

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



#: worker processes each embedded cluster's nannies spawned (restarts included), by the cluster's scheduler address
_SPAWNED: dict[str, list[Any]] = {}


def tracked_nanny_class() -> type:
    """A Dask ``Nanny`` that records every worker process it spawns in :data:`_SPAWNED`, under its scheduler's
    address: the embedded cluster ends exactly its own workers at close, never another cluster's in this process
    (a user's ``LocalCluster``, or one whose nanny restarts a worker while ours closes)."""
    global _NANNY
    if _NANNY is None:
        import psutil
        from distributed import Nanny

        class TrackedNanny(Nanny):  # type: ignore[misc]
            async def instantiate(self) -> Any:
                try:
                    return await super().instantiate()
                finally:  # (also when the start was cancelled: the process may exist by then)
                    pid = getattr(getattr(self.process, "process", None), "pid", None)
                    if pid:
                        try:
                            _SPAWNED.setdefault(str(self.scheduler_addr), []).append(psutil.Process(pid))
                        except psutil.Error:
                            pass

        _NANNY = TrackedNanny
    return _NANNY


_NANNY: type | None = None


def spawned_workers(scheduler_address: str | None) -> list[Any]:
    """The worker processes the embedded cluster at ``scheduler_address`` spawned that still run, with whatever
    they started; forgets the address (psutil's create time guards against a reused pid)."""
    import psutil

    out: list[Any] = []
    for p in _SPAWNED.pop(str(scheduler_address), []):
        try:
            if p.is_running():
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
