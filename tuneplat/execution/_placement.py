"""Gang placement of ranks on Dask worker processes: the :class:`Ledger` of slots, host CPUs and GPU shares.

Only this module reads or writes a ledger's books; the executor asks it through
its public methods (:meth:`Ledger.allocate`, :meth:`Ledger.could_place`, ...).

CPUs are counted per host, as Ray counts them per node: a host has the CPUs of
its worker processes together, and a rank asking for ``k`` CPUs holds ``k`` of
its host's (one worker process runs it; the host's other processes take ranks
only while CPUs are left). So ``{"CPU": 2}`` runs on two 1-CPU worker processes
of one host, and while it runs neither takes another rank.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._errors import PlacementError

__all__ = ["Assignment", "Ledger", "Slot", "_LeasedLedger"]


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
    nanny: str | None = None  # its nanny's address: None when nothing would start it again after a restart
    # what tells this worker process from a later one at its address: its scratch folder (the scheduler's worker
    # info carries no pid and no process id; Dask makes a worker-<random> folder for each worker process)
    uid: str | None = None


@dataclass
class Assignment:
    address: str
    host: str
    gpu_pool: str | None = None
    gpu_ids: list[int] = field(default_factory=list)
    gpu_amount: float = 0.0
    cpu: float = 0.0  # the CPUs of its host the rank holds
    uid: str | None = None  # the worker process placed on (Slot.uid then): a quarantine for the rank is for it


class Ledger:
    """Which worker processes and GPU shares are taken; gang allocation of a whole group."""

    def __init__(self) -> None:
        self.slots: dict[str, Slot] = {}
        self.load: dict[str, int] = {}  # ranks placed on a worker (0 or 1)
        self.quarantined: set[str] = set()  # hung or dead workers being replaced: never placed on again
        self._dead_pid: dict[str, int] = {}  # quarantined address -> the process that died there
        self._dead_uid: dict[str, str] = {}  # quarantined address -> the uid of the process quarantined there
        self._retry_at: dict[str, float] = {}  # quarantined for a while (its host could not reach the tuner)
        self.pools: dict[str, list[float]] = {}
        self._pool_size: dict[str, list[float]] = {}
        self._cpu_at: dict[str, tuple[str, float]] = {}  # worker address -> (its host, CPUs its rank holds there)

    def refresh(self, slots: list[Slot]) -> None:
        new = {s.address: s for s in slots}
        for addr in list(self.slots):
            if addr not in new:
                del self.slots[addr]
                self.load.pop(addr, None)
                self._cpu_at.pop(addr, None)  # (its process is gone, and its rank with it)
                self.quarantined.discard(addr)
                self._dead_pid.pop(addr, None)
                self._dead_uid.pop(addr, None)
                self._retry_at.pop(addr, None)
        # a new process at the same address (a nanny's restart where the worker port is fixed): placeable again
        for addr in set(self._dead_pid) | set(self._dead_uid):
            slot = new.get(addr)
            if slot is None:
                continue
            dead_pid, dead_uid = self._dead_pid.get(addr), self._dead_uid.get(addr)
            if ((dead_pid is not None and slot.pid is not None and slot.pid != dead_pid)
                    or (dead_uid is not None and slot.uid is not None and slot.uid != dead_uid)):
                self.quarantined.discard(addr)
                self._dead_pid.pop(addr, None)
                self._dead_uid.pop(addr, None)
        for addr, slot in new.items():
            if addr in self.slots:  # the same address: its process may be another one now
                self.slots[addr].pid, self.slots[addr].uid = slot.pid, slot.uid
            else:
                self.slots[addr] = slot
                if slot.gpu_pool and slot.gpu_pool not in self.pools:
                    self.pools[slot.gpu_pool] = list(slot.gpus)
                    self._pool_size[slot.gpu_pool] = list(slot.gpus)

    def describe(self) -> str:
        if not self.slots:
            return "no workers"
        cpus = sorted({s.cpu for s in self.slots.values()})
        hosts = self.host_cpus()
        gpus = sum(sum(v) for v in self._pool_size.values())
        extra = sorted({k for s in self.slots.values() for k in s.resources})
        text = (f"{len(self.slots)} worker process(es) on {len(hosts)} host(s), CPU per worker {cpus}, "
                f"CPUs per host {sorted(hosts.values(), reverse=True)}, {gpus:g} GPU(s)")
        return text + (f", custom resources {extra}" if extra else "")

    @property
    def cpu_held(self) -> dict[str, float]:
        """Each host's CPUs held by the ranks placed there."""
        out: dict[str, float] = {}
        for host, cpu in self._cpu_at.values():
            out[host] = out.get(host, 0.0) + cpu
        return out

    def host_cpus(self) -> dict[str, float]:
        """Each host's CPUs: those of its worker processes together."""
        out: dict[str, float] = {}
        for s in self.slots.values():
            out[s.host] = out.get(s.host, 0.0) + s.cpu
        return out

    def _fits(self, slot: Slot, request: Mapping[str, float]) -> bool:
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

    def _allocate(self, request: Mapping[str, float], n: int, strategy: str, busy: set[str], pools: dict[str, list[float]],
                  held: Mapping[str, float] | None = None) -> list[Assignment] | None:
        """``n`` assignments (or None), taking GPU shares from ``pools``; ``held``: CPUs taken per host."""
        gpu = request.get("GPU", 0.0)
        cpu = float(request.get("CPU", 0.0))
        free_cpu = {h: c - (held or {}).get(h, 0.0) for h, c in self.host_cpus().items()}
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
            if free_cpu[slot.host] + 1e-9 < cpu:  # its host's CPUs are held by other ranks (or too few)
                continue
            ids = self._take_gpu(pools, slot, gpu)
            if ids is None:
                continue
            free_cpu[slot.host] -= cpu
            chosen.append(Assignment(slot.address, slot.host, slot.gpu_pool, ids, gpu, cpu, slot.uid))
        return chosen if len(chosen) == n else None

    @property
    def busy(self) -> set[str]:
        return {a for a, n in self.load.items() if n > 0} | self.quarantined

    @property
    def awaiting_replacement(self) -> bool:
        """A worker whose process died is still listed: look again shortly for its replacement."""
        return bool(self._dead_pid)

    def quarantine(self, address: str, pid: int | None = None, uid: str | None = None) -> None:
        """Place nothing more on this worker (it is hung, or its process ``pid`` died, and is being replaced).

        The quarantine ends when the worker leaves the cluster, or when another
        process answers at its address: one other than ``pid``, or whose
        ``Slot.uid`` is not ``uid`` (by default: that of the process listed there
        now; a rank's quarantine passes its ``Assignment.uid``, the process it ran
        in, which a nanny may have replaced already).
        """
        self.quarantined.add(address)
        if pid is not None:
            self._dead_pid[address] = pid
        slot = self.slots.get(address)
        uid = uid if uid is not None else (slot.uid if slot is not None else None)
        if uid is not None:
            self._dead_uid[address] = uid

    def end_quarantine(self, address: str) -> None:
        """Place on this worker again (what it was quarantined for did not happen: a restart that failed)."""
        self.quarantined.discard(address)
        self._dead_pid.pop(address, None)
        self._dead_uid.pop(address, None)
        self._retry_at.pop(address, None)

    def quarantine_for(self, address: str, seconds: float) -> None:
        """Place nothing on this worker for ``seconds`` (its host could not reach the tuner: a path may come back)."""
        self.quarantined.add(address)
        self._retry_at[address] = time.monotonic() + seconds

    @property
    def next_retry(self) -> float | None:
        """When the first timed quarantine ends (``time.monotonic()``), or None."""
        return min(self._retry_at.values()) if self._retry_at else None

    def end_timed_quarantines(self, now: float) -> list[str]:
        """End the timed quarantines due by ``now``; the addresses placeable again."""
        due = [a for a, at in self._retry_at.items() if at <= now]
        for addr in due:
            del self._retry_at[addr]
            self.quarantined.discard(addr)
        return due

    def allocate(self, request: Mapping[str, float], n: int, strategy: str = "PACK") -> list[Assignment] | None:
        """Reserve ``n`` slots (all or none); None when they don't fit right now."""
        pools = {k: list(v) for k, v in self.pools.items()}
        got = self._allocate(request, n, strategy, self.busy, pools, self.cpu_held)
        if got is None:
            return None
        self.pools = pools
        for a in got:
            self.load[a.address] = self.load.get(a.address, 0) + 1
            if a.cpu:
                host, held = self._cpu_at.get(a.address, (a.host, 0.0))
                self._cpu_at[a.address] = (host, held + a.cpu)
        return got

    def allocate_between(self, request: Mapping[str, float], lo: int, hi: int,
                         strategy: str = "PACK") -> list[Assignment] | None:
        """Reserve as many slots as fit, from ``hi`` down to ``lo`` (an elastic group); None when not even ``lo`` fit."""
        for n in range(hi, lo - 1, -1):
            got = self.allocate(request, n, strategy)
            if got is not None:
                return got
        return None

    def free_count(self, request: Mapping[str, float], limit: int, strategy: str = "PACK") -> int:
        """How many more ranks of ``request`` (up to ``limit``) fit right now; nothing is reserved."""
        for n in range(limit, 0, -1):
            pools = {k: list(v) for k, v in self.pools.items()}
            if self._allocate(request, n, strategy, self.busy, pools, self.cpu_held) is not None:
                return n
        return 0

    def could_place(self, request: Mapping[str, float], n: int, strategy: str, excluded: set[str]) -> bool:
        """Whether ``n`` ranks of ``request`` fit on the workers outside ``excluded`` once every slot is free."""
        pools = {k: list(v) for k, v in self._pool_size.items()}
        return self._allocate(request, n, strategy, excluded | self.quarantined, pools) is not None

    def check_fits_empty(self, request: Mapping[str, float], n: int, strategy: str = "PACK",
                         starting: Sequence[Slot] = ()) -> None:
        """Raise PlacementError when ``n`` ranks of ``request`` can never fit.

        ``starting``: workers asked for and not up yet (the embedded cluster's,
        :meth:`Cluster.pending_slots`): counted as the slots they will be, so a
        request that needs them waits for them instead of being refused.
        """
        ledger = self
        if starting:
            ledger = Ledger()
            ledger.refresh([*self.slots.values(), *starting])
        pools = {k: list(v) for k, v in ledger._pool_size.items()}
        if ledger._allocate(request, n, strategy, set(), pools) is None:  # an empty cluster
            need = ", ".join(f"{k}={v:g}" for k, v in request.items())
            more = f" ({len(starting)} of them still starting)" if starting else ""
            cpu = float(request.get("CPU", 0.0))
            biggest = max(ledger.host_cpus().values(), default=0.0)
            why = (f" No host has {cpu:g} CPUs for one rank (a rank's CPUs are on one host: the largest has "
                   f"{biggest:g})." if cpu > biggest + 1e-9 else "")
            raise PlacementError(
                f"A trial needs {n} rank(s) with {{{need}}} each (one Dask worker process per rank, its CPUs on "
                f"its host), but the cluster has {ledger.describe()}{more}.{why} Lower ScalingConfig(num_workers=..., "
                "resources_per_worker=...), or add workers/GPUs to the cluster (the embedded cluster: "
                f"TUNEPLAT_NUM_CPUS={max(n, 2)} gives it that many worker slots, more than the cores if need be, "
                "as Ray's RAY_OVERRIDE_RESOURCES)." + _accelerator_hint(request)
            )

    def release(self, assignment: Assignment) -> None:
        if self.load.get(assignment.address, 0) > 0:
            self.load[assignment.address] -= 1
            if assignment.cpu and assignment.address in self._cpu_at:
                host, held = self._cpu_at[assignment.address]
                if held - assignment.cpu > 1e-9:
                    self._cpu_at[assignment.address] = (host, held - assignment.cpu)
                else:
                    del self._cpu_at[assignment.address]
        if assignment.gpu_pool and assignment.gpu_pool in self.pools:
            devices = self.pools[assignment.gpu_pool]
            for i in assignment.gpu_ids:
                if i < len(devices):
                    devices[i] = min(1.0, devices[i] + (assignment.gpu_amount if assignment.gpu_amount < 1 else 1.0))


class _LeasedLedger(Ledger):
    """The ledger of an experiment that runs inside a trial (Ray Train V2's ``TorchTrainer.fit()`` in a Tune trial).

    Its slots come from the tuner that runs the enclosing trial, through that
    trial's connection (:meth:`~tuneplat.train._session.Session.lease`): that
    tuner places the group beside the trial (never on the trial's own worker,
    which its driver function holds) and counts the slots as taken until they
    are given back: that tuner also decides whether the group can ever fit (its
    ledger knows the GPUs of an embedded cluster, and which slots its trials hold).
    """

    def __init__(self, session: Any) -> None:
        super().__init__()
        self._session = session

    def allocate(self, request: Any, n: int, strategy: str = "PACK") -> list[Assignment] | None:
        return self._session.lease(dict(request), n, strategy)  # type: ignore[no-any-return]

    def release(self, assignment: Assignment) -> None:
        self._session.unlease(assignment.address)

    def check_fits_empty(self, request: Any, n: int, strategy: str = "PACK", starting: Any = ()) -> None:
        """Nothing to check here: the enclosing trial's tuner refuses a group that can never fit beside the trial."""


def _accelerator_hint(request: Mapping[str, float]) -> str:
    """What to do about a ``ScalingConfig(accelerator_type=...)`` that no worker has (Ray's resource name)."""
    from .._config import ACCELERATOR_PREFIX

    for key in request:
        if key.startswith(ACCELERATOR_PREFIX):
            return (f" ScalingConfig(accelerator_type={key[len(ACCELERATOR_PREFIX):]!r}) places ranks only on Dask "
                    f"workers with the resource {key!r}: start them with `dask worker ... --resources \"{key}=1\"`.")
    return ""
