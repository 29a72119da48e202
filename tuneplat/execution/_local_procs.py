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

__all__ = ["embedded_cluster_class", "end_processes", "lean_worker_config", "local_gpu_count", "quiet_distributed",
           "spawned_workers",
           "tracked_nanny_class"]

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


#: Dask's defaults that cost a trial's thread time, and what the embedded cluster's workers use instead. Dask's
#: profiler walks the stack of every thread of the worker (the trial's too) 100 times a second holding the GIL, and
#: the event loop's tick wakes the process 50 times a second: on a pure-Python loop 60 frames deep in a worker
#: thread, these settings ran it 6-11 % faster (benchmarks/README.md, "Dask worker settings"; docs/multi-host.md).
#: The profile page of Dask's dashboard still fills (10 samples/s); a blocked event loop is still reported.
LEAN_WORKER_SETTINGS = {"distributed.worker.profile.interval": ("10ms", "100ms"),
                        "distributed.admin.tick.interval": ("20ms", "500ms")}


def lean_worker_config() -> dict[str, Any]:
    """The Dask config given to the embedded cluster's worker processes (``Nanny(config=...)``): this process's,
    with :data:`LEAN_WORKER_SETTINGS`. Whole, as the nanny merges it with its own config one level deep only.

    A key the user set in their Dask config (a value other than Dask's default) is left as they set it.
    """
    import dask

    config: dict[str, Any] = {}
    for key, (dask_default, ours) in LEAN_WORKER_SETTINGS.items():
        if str(dask.config.get(key, dask_default)) == dask_default:
            node = config
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = ours
    return dask.config.merge(dask.config.config, config)


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


def embedded_cluster_class() -> type:
    """A Dask ``LocalCluster`` that keeps its worker processes for its whole life: the embedded cluster's class.

    When a worker process dies (a rank SIGKILLed, the OOM killer, a framework
    ending its processes), its nanny starts a new one. Dask's ``SpecCluster``
    closes that nanny for good if the worker is not back within
    ``distributed.deploy.lost-worker-timeout`` (15 s by default), which a
    restart under load (a fresh interpreter importing torch) can take: the
    cluster would stay a worker short for the rest of the experiment. This
    class looks again after that timeout instead: a nanny still starting its
    worker is left to it (and looked at again later); a nanny that gave up (its
    restart failed, it closed) is replaced by a fresh one of the same spec. A
    worker retired on purpose (:attr:`keep_workers` False, a scale-down, the
    cluster closing) is not brought back. Only the cluster tuneplat owns uses
    it: a user's own cluster keeps Dask's behaviour.
    """
    global _CLUSTER
    if _CLUSTER is None:
        import asyncio

        import dask
        from dask.utils import parse_timedelta
        from distributed import LocalCluster
        from distributed.core import Status
        from distributed.deploy.cluster import Cluster as DaskCluster

        class EmbeddedCluster(LocalCluster):  # type: ignore[misc]
            #: False once tuneplat closes the cluster: its workers leave for good
            keep_workers = True

            def _update_worker_status(self, op: str, msg: Any) -> None:
                if op == "remove":
                    info = self.scheduler_info.get("workers", {}).get(msg)
                    if info is not None:
                        self._look_again_later(info.get("name"))
                # (SpecCluster's own would close the nanny once lost-worker-timeout passed: skipped)
                DaskCluster._update_worker_status(self, op, msg)

            def _look_again_later(self, name: Any) -> None:
                delay = parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout"))
                asyncio.get_running_loop().call_later(delay, self._look_again, name)

            def _back(self, name: Any) -> bool:
                return any(d.get("name") == name for d in self.scheduler_info.get("workers", {}).values())

            def _look_again(self, name: Any) -> None:
                if (not self.keep_workers or self.status != Status.running or name not in self.worker_spec
                        or self._back(name)):
                    return
                nanny = self.workers.get(name)
                process = getattr(nanny, "process", None)
                if (nanny is not None and nanny.status == Status.running and process is not None
                        and process.status in (Status.starting, Status.running)):
                    self._look_again_later(name)  # its nanny is still bringing it back (a slow start under load)
                    return
                logger.info("tuneplat: worker %s of the embedded cluster did not come back; starting it again", name)
                self.workers.pop(name, None)
                self._futures.add(asyncio.ensure_future(self._relaunch(name, nanny)))

            async def _relaunch(self, name: Any, nanny: Any) -> None:
                try:
                    if nanny is not None:
                        await nanny.close(reason="tuneplat-relaunch")
                    if self.keep_workers and self.status == Status.running and not self._back(name):
                        await self._correct_state()  # a new nanny for the spec's worker `name`
                except Exception as exc:  # noqa: BLE001 - a worker that cannot start: the tuner goes on without it
                    logger.warning("tuneplat: could not start worker %s of the embedded cluster again: %s", name, exc)

        _CLUSTER = EmbeddedCluster
    return _CLUSTER


_CLUSTER: type | None = None


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
