"""Connecting to Dask, or starting an embedded LocalCluster, and gang placement of ranks."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

__all__ = ["Assignment", "Cluster", "Ledger", "PlacementError", "Slot"]

logger = logging.getLogger("tuneplat")


class PlacementError(ValueError):
    """A trial can never fit the cluster."""


def _local_gpu_count() -> int:
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


class Cluster:
    """The Dask cluster trials run on: given, found, or started here.

    Order (Dask's convention): an explicit ``client``; else ``address``; else
    the process's active ``distributed.Client``; else an embedded
    ``LocalCluster`` (one single-threaded worker process per core, or per
    ``cpus_per_rank`` cores when a rank needs more than one; all listeners on
    127.0.0.1), which :meth:`close` shuts down. Clusters that
    were given are left running.
    """

    def __init__(self, client: Any = None, address: str | None = None, cpus_per_rank: float = 1.0) -> None:
        import dask
        from distributed import Client

        self.local_cluster = None
        self.owns_client = False
        self.local_gpus = 0
        if client is None and address is None:
            try:
                from distributed import get_client

                client = get_client()
            except ValueError:
                client = None
        if client is not None:
            self.client = client
        elif address is not None:
            self.client = Client(address, set_as_default=False)
            self.owns_client = True
        else:
            from distributed import LocalCluster

            cores = max(os.cpu_count() or 1, 1)
            # a rank needing k whole CPUs gets a worker process of k CPUs (cores // k of them), as Ray would
            # pack trials; a need beyond this machine is left to PlacementError to explain
            per = int(cpus_per_rank) if float(cpus_per_rank).is_integer() and 1 < cpus_per_rank <= cores else 1
            self.local_gpus = _local_gpu_count()
            # the preload makes worker processes ignore Ctrl-C: the tuner ends trials and closes the cluster
            with dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": 0,
                                  "distributed.worker.preload": ["tuneplat.execution._worker_preload"]}):
                self.local_cluster = LocalCluster(
                    n_workers=cores // per, threads_per_worker=1, processes=True, host="127.0.0.1",
                    dashboard_address="127.0.0.1:0", resources={"CPU": per}, silence_logs=logging.ERROR,
                )
            self.client = Client(self.local_cluster, set_as_default=False)
            self.owns_client = True

    def wait_for_workers(self) -> None:
        """Wait (bounded) until the cluster has the workers it is meant to have.

        A LocalCluster (ours or the user's) says how many workers it runs; any
        other cluster must have at least one (adaptive clusters start at zero).
        A worker being restarted by its nanny is waited for, so that a trial
        is not refused as impossible while the cluster is only catching up.
        """
        spec = getattr(getattr(self.client, "cluster", None), "worker_spec", None)
        expected = max(1, len(spec)) if spec else 1
        timeout = float(os.environ.get("TUNEPLAT_WORKER_WAIT_S", "60"))
        try:
            self.client.wait_for_workers(expected, timeout=timeout)
        except TimeoutError:
            logger.warning("tuneplat: the cluster has fewer than %d worker(s) after %.0fs; going on with what is there",
                           expected, timeout)

    @property
    def dashboard_link(self) -> str | None:
        try:
            return self.client.dashboard_link
        except Exception:  # noqa: BLE001 - cosmetic
            return None

    def workers(self) -> dict[str, dict[str, Any]]:
        return dict(self.client.scheduler_info(n_workers=-1)["workers"])

    def slots(self) -> list[Slot]:
        slots = []
        for addr, info in sorted(self.workers().items()):
            resources = dict(info.get("resources") or {})
            cpu = float(resources.pop("CPU", info.get("nthreads", 1)))
            gpu = resources.pop("GPU", None)
            host = info.get("host") or urlparse(addr).hostname or addr
            if gpu is not None:
                pool = f"worker:{addr}"
                gpus = [1.0] * int(max(1, round(gpu))) if gpu >= 1 else [float(gpu)]
            elif self.local_cluster is not None and self.local_gpus:
                pool, gpus = f"host:{host}", [1.0] * self.local_gpus
            else:
                pool, gpus = None, []
            slots.append(Slot(addr, host, cpu, {k: float(v) for k, v in resources.items()}, pool, gpus,
                              info.get("pid")))
        return slots

    def tuner_host(self) -> str:
        """The address ranks use to reach the tuner: loopback when every worker is local."""
        env = os.environ.get("TUNEPLAT_TUNER_HOST")
        if env:
            return env
        hosts = {s.host for s in self.slots()}
        if hosts <= {"127.0.0.1", "localhost", "::1"}:
            return "127.0.0.1"
        sched = urlparse(self.client.scheduler.address)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((sched.hostname or "127.0.0.1", sched.port or 8786))
            return s.getsockname()[0]

    def close(self) -> None:
        with _quiet_distributed(self.local_cluster is not None):
            if self.local_cluster is not None:
                # Workers first, so none heartbeats into a closing scheduler (a noisy traceback otherwise).
                try:
                    self.client.retire_workers(close_workers=True)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            if self.owns_client:
                self.client.close()
            if self.local_cluster is not None:
                self.local_cluster.close()


@contextlib.contextmanager
def _quiet_distributed(quiet: bool) -> Iterator[None]:
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


@dataclass
class Slot:
    """One Dask worker process: hosts at most one rank at a time."""

    address: str
    host: str
    cpu: float
    resources: dict[str, float]
    gpu_pool: str | None
    gpus: list[float] = field(default_factory=list)
    pid: int | None = None  # the worker process (a nanny's restart keeps the address on some clusters)


@dataclass
class Assignment:
    address: str
    host: str
    gpu_pool: str | None = None
    gpu_ids: list[int] = field(default_factory=list)
    gpu_amount: float = 0.0


class Ledger:
    """Which worker processes and GPU shares are taken; gang allocation of a whole group."""

    def __init__(self) -> None:
        self.slots: dict[str, Slot] = {}
        self.load: dict[str, int] = {}  # ranks placed on a worker (0 or 1)
        self.quarantined: set[str] = set()  # hung or dead workers being replaced: never placed on again
        self._dead_pid: dict[str, int] = {}  # quarantined address -> the process that died there
        self.pools: dict[str, list[float]] = {}
        self._pool_size: dict[str, list[float]] = {}

    def refresh(self, slots: list[Slot]) -> None:
        new = {s.address: s for s in slots}
        for addr in list(self.slots):
            if addr not in new:
                del self.slots[addr]
                self.load.pop(addr, None)
                self.quarantined.discard(addr)
                self._dead_pid.pop(addr, None)
        for addr, dead in list(self._dead_pid.items()):  # a new process at the same address: placeable again
            slot = new.get(addr)
            if slot is not None and slot.pid is not None and slot.pid != dead:
                self.quarantined.discard(addr)
                del self._dead_pid[addr]
        for addr, slot in new.items():
            if addr not in self.slots:
                self.slots[addr] = slot
                if slot.gpu_pool and slot.gpu_pool not in self.pools:
                    self.pools[slot.gpu_pool] = list(slot.gpus)
                    self._pool_size[slot.gpu_pool] = list(slot.gpus)

    def describe(self) -> str:
        if not self.slots:
            return "no workers"
        cpus = sorted({s.cpu for s in self.slots.values()})
        gpus = sum(sum(v) for v in self._pool_size.values())
        extra = sorted({k for s in self.slots.values() for k in s.resources})
        text = f"{len(self.slots)} worker process(es) on {len({s.host for s in self.slots.values()})} host(s), CPU per worker {cpus}, {gpus:g} GPU(s)"
        return text + (f", custom resources {extra}" if extra else "")

    def _fits(self, slot: Slot, request: Mapping[str, float]) -> bool:
        if slot.cpu + 1e-9 < request.get("CPU", 0):
            return False
        for key, amount in request.items():
            if key in ("CPU", "GPU"):
                continue
            if slot.resources.get(key, 0) + 1e-9 < amount:
                return False
        return True

    def _take_gpu(self, pools: dict[str, list[float]], slot: Slot, amount: float) -> list[int] | None:
        if amount <= 0:
            return []
        if slot.gpu_pool is None:
            return None
        devices = pools[slot.gpu_pool]
        if amount < 1:
            # fill a partly used device first, so fractions pack onto one GPU
            order = sorted(range(len(devices)), key=lambda i: (devices[i] == 1.0, i))
            for i in order:
                if devices[i] + 1e-9 >= amount:
                    devices[i] -= amount
                    return [i]
            return None
        free = [i for i, v in enumerate(devices) if v >= 1.0 - 1e-9]
        if len(free) < int(amount):
            return None
        chosen = free[: int(amount)]
        for i in chosen:
            devices[i] = 0.0
        return chosen

    def _allocate(self, request: Mapping[str, float], n: int, strategy: str, busy: set[str], pools: dict[str, list[float]]) -> list[Assignment] | None:
        gpu = request.get("GPU", 0.0)
        candidates = [s for a, s in self.slots.items() if a not in busy and self._fits(s, request)]
        by_host: dict[str, list[Slot]] = {}
        for s in candidates:
            by_host.setdefault(s.host, []).append(s)
        hosts = sorted(by_host, key=lambda h: (-len(by_host[h]), h))
        if strategy.endswith("SPREAD"):
            order = []
            queues = [list(by_host[h]) for h in hosts]
            while any(queues):
                for q in queues:
                    if q:
                        order.append(q.pop(0))
        else:
            order = [s for h in hosts for s in by_host[h]]
        chosen: list[Assignment] = []
        for slot in order:
            if len(chosen) == n:
                break
            ids = self._take_gpu(pools, slot, gpu)
            if ids is None:
                continue
            chosen.append(Assignment(slot.address, slot.host, slot.gpu_pool, ids, gpu))
        return chosen if len(chosen) == n else None

    @property
    def busy(self) -> set[str]:
        return {a for a, n in self.load.items() if n > 0} | self.quarantined

    @property
    def awaiting_replacement(self) -> bool:
        """A worker whose process died is still listed: look again shortly for its replacement."""
        return bool(self._dead_pid)

    def quarantine(self, address: str, pid: int | None = None) -> None:
        """Place nothing more on this worker (it is hung, or its process ``pid`` died, and is being replaced).

        The quarantine ends when the worker leaves the cluster, or when a process
        other than ``pid`` answers at its address.
        """
        self.quarantined.add(address)
        if pid is not None:
            self._dead_pid[address] = pid

    def allocate(self, request: Mapping[str, float], n: int, strategy: str = "PACK") -> list[Assignment] | None:
        """Reserve ``n`` slots (all or none); None when they don't fit right now."""
        pools = {k: list(v) for k, v in self.pools.items()}
        got = self._allocate(request, n, strategy, self.busy, pools)
        if got is None:
            return None
        self.pools = pools
        for a in got:
            self.load[a.address] = self.load.get(a.address, 0) + 1
        return got

    def check_fits_empty(self, request: Mapping[str, float], n: int, strategy: str = "PACK") -> None:
        """Raise PlacementError when ``n`` ranks of ``request`` can never fit."""
        pools = {k: list(v) for k, v in self._pool_size.items()}
        if self._allocate(request, n, strategy, set(), pools) is None:  # an empty cluster
            need = ", ".join(f"{k}={v:g}" for k, v in request.items())
            raise PlacementError(
                f"A trial needs {n} rank(s) with {{{need}}} each (one Dask worker process per rank), "
                f"but the cluster has {self.describe()}. Lower ScalingConfig(num_workers=..., "
                "resources_per_worker=...), or add workers/GPUs to the cluster."
            )

    def release(self, assignment: Assignment) -> None:
        if self.load.get(assignment.address, 0) > 0:
            self.load[assignment.address] -= 1
        if assignment.gpu_pool and assignment.gpu_pool in self.pools:
            devices = self.pools[assignment.gpu_pool]
            for i in assignment.gpu_ids:
                if i < len(devices):
                    devices[i] = min(1.0, devices[i] + (assignment.gpu_amount if assignment.gpu_amount < 1 else 1.0))
