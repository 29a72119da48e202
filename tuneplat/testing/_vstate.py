"""The virtual-time executor's state: its slots, virtual GPUs and their memory, its trials and clock; the
checkpoint store of virtual trials (the executor is split by job: ``_vthreads``, ``_vcurves``, the facade
``_virtual``)."""

from __future__ import annotations

import collections
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core._scaling import ScalingPolicy
from ..execution._executor import (
    Event,
    ExecutorContext,
    TrialExecutor,
    TrialSpec,
)
from ..storage._storage import CheckpointStore, LocalCheckpointStore
from ._vtrainable import OutOfMemoryError, _Runner, _TTrial

__all__ = ["VirtualCheckpointStore"]


class VirtualCheckpointStore(LocalCheckpointStore):
    """Checkpoints of virtual trials.

    Learning curves stage nothing and nothing is written while the run goes:
    each trial's latest checkpoint becomes an empty folder when the executor
    closes (:meth:`materialize`), so ``Tuner.restore`` finds it there. Trials
    that run a real trainable stage real checkpoints: then every call goes to
    the store the tuner would use anyway (:attr:`inner`).
    """

    def __init__(self) -> None:
        self._latest: dict[str, str] = {}
        #: the tuner's own store, used for real trainables (set by the executor)
        self.inner: CheckpointStore | None = None

    def trial_url(self, trial_path: str) -> str | None:
        return self.inner.trial_url(trial_path) if self.inner is not None else None

    def clean_staging(self, trial_path: str) -> None:
        if self.inner is not None:
            self.inner.clean_staging(trial_path)

    def commit(self, trial_path: str, name: str) -> str | None:
        if self.inner is not None:
            return self.inner.commit(trial_path, name)
        path = os.path.join(trial_path, name)
        self._latest[trial_path] = path
        return path

    def copy(self, src_checkpoint: str, trial_path: str, name: str) -> str | None:
        if self.inner is not None:
            return self.inner.copy(src_checkpoint, trial_path, name)
        return self.commit(trial_path, name)

    def delete(self, checkpoint_path: str) -> None:
        if self.inner is not None:
            self.inner.delete(checkpoint_path)
        elif os.path.isdir(checkpoint_path):
            super().delete(checkpoint_path)

    def materialize(self) -> None:
        for path in self._latest.values():
            os.makedirs(path, exist_ok=True)
        self._latest.clear()


@dataclass
class _VTrial:
    """A learning curve's trial."""

    spec: TrialSpec
    results: Iterator[Any]
    slots: int
    iteration: int = 0
    since_restore: int = 0
    elapsed: float = 0.0
    pending: dict[str, Any] | None = None  # the next result, pulled when the last one was answered
    waiting: bool = False  # a report was sent and not answered yet
    hung: bool = False
    preempted: bool = False  # its host announced it is leaving: the group ends after its next report
    seq: int = 0  # bumps when the trial's scheduled report is cancelled
    history: list[float] = field(default_factory=list)


@dataclass
class _VRes:
    """A reservation: ``slots`` ranks, and per rank the virtual GPUs it holds ``[(device, share), ...]``."""

    slots: int
    devices: list[list[tuple[int, float]]] = field(default_factory=list)


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


class _VState(TrialExecutor):
    """What the virtual-time executor knows (its mixins act on it): slots, GPUs, memory, trials, the clock."""

    ctx: ExecutorContext
    scaling: ScalingPolicy

    def __init__(self, num_slots: int = 4, *, iteration_s: float = 1.0, start_s: float = 0.0,
                 curve: Callable[[TrialSpec], Iterable[Any]] | None = None, gpus: int = 0,
                 gpu_memory: float | str | None = None, lose_starts: int = 0,
                 hang_timeout_s: float | None = None) -> None:
        if not isinstance(num_slots, int) or isinstance(num_slots, bool) or num_slots < 1:
            raise ValueError(f"VirtualTimeExecutor(num_slots={num_slots!r}): must be an int >= 1")
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
            raise ValueError(f"VirtualTimeExecutor(gpus={gpus!r}): must be an int >= 0")
        from ..execution._gpu_memory import parse_memory

        self.gpus = gpus
        self.gpu_memory = None if gpu_memory is None else parse_memory(gpu_memory, "VirtualTimeExecutor(gpu_memory)")
        self._gpu_free = [1.0] * gpus  # the unreserved share of each device
        self._gpu_used = [0.0] * gpus  # bytes its trials hold now
        self._held: dict[str, _VRes] = {}  # trial id -> what it was placed on
        self._mem_use: dict[str, float] = {}  # trial id -> bytes each of its ranks holds now
        self._mem_peak: dict[str, float] = {}  # trial id -> the most each of its ranks held (this attempt)
        #: the most trials that ran at once, and the most device memory held at once (bytes, all devices)
        self.max_running = 0
        self.max_gpu_memory_used = 0.0
        self.num_slots = num_slots
        self._lose_starts = int(lose_starts)
        self.hang_timeout_s = hang_timeout_s
        self._starving = False  # a trial found no room while nothing ran (see poll)
        self.iteration_s = float(iteration_s)
        self.start_s = float(start_s)
        self._curve = curve
        self._now = 0.0
        self._free = num_slots
        self._trials: dict[str, _VTrial] = {}
        self._threads: dict[str, _TTrial] = {}
        self._idle: list[_Runner] = []
        self._heap: list[tuple[float, int, str, int]] = []
        self._counter = itertools.count()
        self._ready: list[Event] = []
        self._curves = True
        self._saved_env: dict[str, str | None] = {}
        self._default_store: CheckpointStore | None = None
        self.store = VirtualCheckpointStore()
        #: iterations run and trial-seconds spent, over the whole run (for ``tuneplat simulate``)
        self.iterations = 0
        self.trial_seconds = 0.0
    @staticmethod
    def _place(free: list[float], share: float) -> list[tuple[int, float]] | None:
        """Devices for one rank taking ``share`` (updates ``free``): best fit for a fraction, whole devices else."""
        eps = 1e-9
        if share <= 1.0:
            fits = [d for d, f in enumerate(free) if f + eps >= share]
            if not fits:
                return None
            dev = min(fits, key=lambda d: (free[d], d))
            free[dev] -= share
            return [(dev, share)]
        whole = [d for d, f in enumerate(free) if f >= 1.0 - eps][:int(share)]
        if len(whole) < int(share):
            return None
        for d in whole:
            free[d] -= 1.0
        return [(d, 1.0) for d in whole]

    def _gpu_share(self, request: Mapping[str, float]) -> float:
        """The share of a device each rank of ``request`` takes (0 when GPUs are not modelled: ``gpus=0``)."""
        from ..execution._errors import PlacementError
        from ..execution._gpu_memory import as_gpu_share

        if not self.gpus:
            return 0.0
        try:
            return float(as_gpu_share(request, self.gpu_memory).get("GPU", 0.0))
        except ValueError as exc:
            raise PlacementError(str(exc)) from None

    def _release(self, res: _VRes) -> None:
        self._free += res.slots
        for rank in res.devices:
            for dev, part in rank:
                self._gpu_free[dev] = min(1.0, self._gpu_free[dev] + part)

    def _use_memory(self, trial_id: str, nbytes: float) -> None:
        """Trial ``trial_id`` (each rank) now holds ``nbytes`` on its device(s); OutOfMemoryError past a device."""
        res = self._held.get(trial_id)
        if res is None or not res.devices:
            raise RuntimeError(f"trial {trial_id} holds no GPU of the VirtualTimeExecutor (gpus={self.gpus}): ask "
                               "for one with resources_per_worker={'GPU': fraction} or {'GPU_memory': ...}")
        old = self._mem_use.get(trial_id, 0.0)
        ranks_on = collections.Counter(rank[0][0] for rank in res.devices)  # (a rank's memory is on its first device)
        if self.gpu_memory is not None:
            for dev, count in sorted(ranks_on.items()):
                after = self._gpu_used[dev] + count * (nbytes - old)
                if after > self.gpu_memory * (1 + 1e-12):
                    others = [t for t, r in self._held.items() if t != trial_id and self._mem_use.get(t)
                              and any(x[0][0] == dev for x in r.devices)]
                    raise OutOfMemoryError(
                        f"CUDA out of memory. Tried to allocate {_gib(nbytes - old)} (virtual GPU {dev}: "
                        f"{_gib(self.gpu_memory)} total, {_gib(self._gpu_used[dev] - count * old)} held by "
                        f"{'trials ' + ', '.join(others) if others else 'no other trial'}; this trial would hold "
                        f"{_gib(nbytes)})")
        for dev, count in ranks_on.items():
            self._gpu_used[dev] += count * (nbytes - old)
        self._mem_use[trial_id] = nbytes
        self._mem_peak[trial_id] = max(self._mem_peak.get(trial_id, 0.0), nbytes)
        self.max_gpu_memory_used = max(self.max_gpu_memory_used, sum(self._gpu_used))

    def _free_memory(self, trial_id: str) -> None:
        res = self._held.pop(trial_id, None)
        old = self._mem_use.pop(trial_id, 0.0)
        self._mem_peak.pop(trial_id, None)
        if res is None:
            return
        for rank in res.devices:
            self._gpu_used[rank[0][0]] = max(0.0, self._gpu_used[rank[0][0]] - old)
        self._release(res)
