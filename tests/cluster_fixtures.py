"""A real Dask LocalCluster for tests: worker processes, one slot each, as tuneplat starts by default."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def local_client(n_workers: int = 2) -> Iterator[Any]:
    import dask
    from distributed import Client, LocalCluster

    # for the cluster's whole life: its nannies read `daemon` each time they restart a worker (after a kill), and
    # LocalCluster reads `lost-worker-timeout` each time a worker is lost: a worker whose restart takes longer (15 s by
    # default: a loaded machine, torch imported again) has its nanny closed for good, and the cluster is one worker
    # short for the rest of the session (seen in the slow lane: "no worker could take this trial for 60s")
    with dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": 0,
                          "distributed.deploy.lost-worker-timeout": "600s"}):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", resources={"CPU": 1})
        client = Client(cluster, set_as_default=False)
        try:
            yield client
        finally:
            client.close()
            cluster.close()


@contextlib.contextmanager
def worker_removal(client: Any, address: str) -> Iterator[Callable[[float], None]]:
    """``wait(timeout)``, which returns once the scheduler has removed worker ``address`` (or raises after
    ``timeout`` s). The scheduler tells of it itself (a plugin, in place before the body runs), so a removal that
    happens before ``wait`` is called is not missed and nothing is polled."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    name = f"tuneplat-test-removal-{address}"

    class _Removal(SchedulerPlugin):
        def __init__(self) -> None:
            self.removed: Any = None

        async def start(self, scheduler: Any) -> None:
            import asyncio

            self.removed = asyncio.Event()

        def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
            if worker == address:
                self.removed.set()

    async def _wait(dask_scheduler: Any, timeout: float) -> bool:
        import asyncio

        try:
            await asyncio.wait_for(dask_scheduler.plugins[name].removed.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def wait(timeout: float) -> None:
        assert client.run_on_scheduler(_wait, timeout=timeout), f"the scheduler did not remove {address} in {timeout}s"

    client.register_plugin(_Removal(), name=name)
    try:
        yield wait
    finally:
        client.unregister_scheduler_plugin(name)


class NoNannyCluster:
    """A LocalCluster scheduler and ``dask worker --no-nanny`` processes the test starts and ends: workers that
    nothing restarts (a deployment without nannies); ``pythonpath``: where they import the trainables from."""

    def __init__(self, tmp_path: Any, pythonpath: Sequence[str]) -> None:
        import dask
        from distributed import Client, LocalCluster

        with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
            self.cluster = LocalCluster(n_workers=0, processes=True, host="127.0.0.1",
                                        dashboard_address="127.0.0.1:0")
        self.client = Client(self.cluster, set_as_default=False)
        self.procs: list[subprocess.Popen] = []
        self.pythonpath = list(pythonpath)
        self.log = open(tmp_path / "workers.log", "w")  # noqa: SIM115 - closed in close()

    def add_worker(self, *, nanny: bool = False, worker_port: int | None = None) -> subprocess.Popen:
        """One more worker process (``nanny``: under a nanny, which starts it again when it dies; ``worker_port``:
        at a fixed port, so that its replacement has the same address)."""
        env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False",
                   PYTHONPATH=os.pathsep.join([*self.pythonpath, os.environ.get("PYTHONPATH", "")]))
        extra = ["--nanny" if nanny else "--no-nanny"]
        if worker_port is not None:
            extra += ["--worker-port", str(worker_port)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", self.cluster.scheduler_address, *extra,
             "--nthreads", "1", "--resources", "CPU=1", "--host", "127.0.0.1", "--dashboard-address",
             "127.0.0.1:0"], env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self, n: int) -> None:
        for _ in range(n):
            self.add_worker()
        self.client.wait_for_workers(n, timeout=120)

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.client.close()
        self.cluster.close()
        self.log.close()
