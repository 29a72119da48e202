"""A :class:`~tuneplat.execution.TrialExecutor` that runs trials in virtual time, in the tuner's process.

The whole tuner runs for real — searcher, scheduler, stop rules, journal,
callbacks, checkpoints, restore — but no trial is a process and time is
simulated, so a whole ``Tuner.fit()`` takes milliseconds: for tests of the
tuner's behaviour, scheduler studies and ``tuneplat simulate``.

Two kinds of trainable run here:

* **Any trainable the Dask executor runs** — a function calling
  ``tune.report()``/``train.report()``, ``get_checkpoint()`` and
  ``get_context()``, a ``tune.Trainable`` class, ``tune.with_parameters``, a
  ``TorchTrainer`` of one worker. Each trial runs in a thread of its own; its
  ``report()`` hands the result to the executor and blocks until the tuner
  answers. Only one trial's code runs at any moment (the executor hands control
  to one thread and waits for it to report, sleep or end), so a run is
  deterministic for a given seed. Each iteration takes ``iteration_s`` virtual
  seconds, or ``time_this_iter_s`` when the reported metrics carry it, or the
  virtual time the trial spent in :func:`sleep` since its last report.
  Checkpoints are real: staged and committed in the trial folder as on the
  cluster. An exception in the trainable fails the attempt with the same message
  as on the cluster (``rank 0: ValueError: ...``), and retries follow
  ``FailureConfig``.
* **Learning curves** — a generator function of the config that yields result
  dicts (or any ``curve=`` given to the executor, as ``tuneplat simulate``
  does). A curve may yield :data:`HANG` (the trial stops reporting until the
  tuner aborts it); every report is checkpointed as an empty folder, written
  when the executor closes; a restarted attempt skips the results before its
  checkpoint.

GPUs and their memory are modelled when asked (``VirtualTimeExecutor(gpus=2,
gpu_memory="80GiB")``): trials are placed on virtual devices by their
``{"GPU": fraction}`` or ``{"GPU_memory": ...}`` request (``"auto"`` too) as on a
Dask cluster with GPUs. A trial uses device memory by calling
:func:`use_gpu_memory` (real trainables; a no-op elsewhere) or by yielding
results with ``gpu_memory_peak_bytes`` (learning curves: the memory it holds
during that iteration). Its peak is reported as ``gpu_memory_peak_bytes``, and
when the trials on a device together hold more than it has, the one that
allocated fails with :class:`OutOfMemoryError` ("CUDA out of memory"), which
the tuner records as an out-of-memory failure exactly as a CUDA OOM on a worker.

Example:
    >>> import tuneplat as tune
    >>> from tuneplat.testing import VirtualTimeExecutor
    >>> def train_fn(config):
    ...     for step in range(1, 11):
    ...         tune.report({"loss": config["lr"] / step})
    >>> tuner = tune.Tuner(train_fn, param_space={"lr": tune.uniform(0, 1)},
    ...                    tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=8),
    ...                    run_config=tune.RunConfig(mlflow=False),
    ...                    executor=VirtualTimeExecutor(num_slots=2))
    >>> grid = tuner.fit()  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import heapq
import inspect
import itertools
import logging
import math
import os
import threading
import time as _time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from schedulers import Decision

from ..execution import _protocol as proto
from ..execution._executor import (
    Ended,
    Event,
    ExecutorContext,
    Outcome,
    Preempted,
    RankFailed,
    Reported,
    Saved,
    Started,
    Starved,
    TrialExecutor,
    TrialSpec,
)
from ..execution._failure import HUNG, INVALID, LOST, Failure, exception_types
from ..execution._trial_io import apply_trial_io
from ..storage._storage import CheckpointStore, LocalCheckpointStore
from ..train._session import RankSpec, Session, StopTrial, TrialAborted, _current_session, _set_session

__all__ = ["HANG", "LOSE_HOST", "LOSE_WORKER", "OutOfMemoryError", "PREEMPT", "VirtualCheckpointStore",
           "VirtualTimeExecutor", "now", "sleep", "use_gpu_memory"]

logger = logging.getLogger("tuneplat")


class _Hang:
    def __repr__(self) -> str:
        return "tuneplat.testing.HANG"

    def __reduce__(self) -> str:  # (copies and pickles of a config holding it are the same sentinel)
        return "HANG"


#: yield this from a curve to make the trial stop reporting (until the tuner aborts it)
HANG = _Hang()


class _Fault:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"tuneplat.testing.{self.name}"

    def __reduce__(self) -> str:  # (copies and pickles of a config holding it are the same sentinel)
        return self.name


#: yield this from a curve: the trial's worker process dies now (the attempt fails as lost, as a killed process)
LOSE_WORKER = _Fault("LOSE_WORKER")
#: yield this from a curve: the trial's host leaves the cluster now, its slots with it (nothing replaces them)
LOSE_HOST = _Fault("LOSE_HOST")
#: yield this from a curve: the trial's host announces it is leaving (a preemption notice); the group ends after
#: its next report (checkpointed) and starts again from that checkpoint, as an elastic group does on a cluster
PREEMPT = _Fault("PREEMPT")

_real_sleep = _time.sleep  # (what sleep() calls outside virtual trials, even where time.sleep was replaced by it)


def sleep(seconds: float) -> None:
    """Let ``seconds`` pass: virtual seconds in a trial of the :class:`VirtualTimeExecutor`, real ones elsewhere.

    A trainable that calls it runs unchanged on both executors; on the
    virtual-time one, other trials run (in virtual time) meanwhile, and the
    iteration's ``time_this_iter_s`` counts the time slept. Tests may put it in
    place of ``time.sleep`` (``monkeypatch.setattr(time, "sleep", sleep)``) to
    run code that sleeps, such as Ray's examples, in virtual time.

    Args:
        seconds: how long, >= 0.

    Raises:
        ValueError: ``seconds`` is negative.
    """
    if seconds < 0:
        raise ValueError(f"sleep(seconds={seconds!r}): must be >= 0")
    session = _current_session()
    if isinstance(session, _VirtualSession):
        session.sleep(float(seconds))
    else:
        _real_sleep(seconds)


class OutOfMemoryError(RuntimeError):
    """A virtual device ran out of memory (named as torch's ``torch.cuda.OutOfMemoryError``, and recorded alike)."""


def use_gpu_memory(nbytes: float | str) -> None:
    """The trial now holds ``nbytes`` of GPU memory on its device (each rank): virtual trials only, else a no-op.

    A trainable that calls it runs unchanged on the Dask executor (where real
    allocations are measured). In a trial of a :class:`VirtualTimeExecutor` with
    ``gpus=``, the figure counts against the trial's virtual device, its peak is
    reported as ``gpu_memory_peak_bytes``, and going past what the device has
    left raises :class:`OutOfMemoryError`.

    Args:
        nbytes: bytes, or an amount such as ``"12GiB"``.

    Raises:
        OutOfMemoryError: the device's trials would hold more than its memory.
        RuntimeError: the trial holds no virtual GPU (its request has no ``GPU``/``GPU_memory``).
    """
    session = _current_session()
    if isinstance(session, _VirtualSession):
        from ..execution._gpu_memory import parse_memory

        amount = 0.0 if nbytes == 0 else parse_memory(nbytes, "use_gpu_memory(nbytes)")
        session.executor._use_memory(session.spec.trial_id, amount)


def now() -> float:
    """The clock trials see: virtual seconds in a trial of the :class:`VirtualTimeExecutor`, else ``time.time()``."""
    session = _current_session()
    if isinstance(session, _VirtualSession):
        return session.executor.now()
    return _time.time()


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


def _locked() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


class _Runner:
    """A thread that runs real trainables' trials, one after another (kept for the next trial, as Dask tasks chain).

    Control goes back and forth through two locks held by default: the loop
    releases ``to_trial`` and waits on ``to_loop``; the trial's thread does the
    opposite, so exactly one of the two runs at any moment.
    """

    def __init__(self) -> None:
        self.to_trial = _locked()
        self.to_loop = _locked()
        self.trial: _TTrial | None = None  # None when it is resumed: leave
        self.thread: threading.Thread | None = None


class _TTrial:
    """A real trainable's trial: its runner and the hand-over of control between it and the loop."""

    def __init__(self, spec: TrialSpec, slots: int, started_at: float) -> None:
        self.spec = spec
        self.slots = slots
        self.seq = 0
        self.started_at = started_at
        self.last_report_at = started_at
        self.slept = False  # the trial slept (virtually) since it was last resumed after a report
        self.waiting = False  # its report waits for answer()
        self.pending: tuple[Any, ...] | None = None  # a report to deliver when its iteration's time is up
        self.inbox: tuple[Any, ...] | None = None  # what the trial finds when it resumes
        self.outbox: tuple[Any, ...] | None = None  # why it handed control back
        self.runner: _Runner | None = None  # given when it first runs
        self.rank_spec: RankSpec | None = None
        self.done = False


class _VirtualSession(Session):
    """A rank's session whose tuner is the :class:`VirtualTimeExecutor` in the same process."""

    def __init__(self, spec: RankSpec, executor: VirtualTimeExecutor, trial: _TTrial) -> None:
        super().__init__(spec, cast(Any, None))
        self.executor = executor
        self.trial = trial
        self.aborted: str | None = None
        self.time_hint: float | None = None  # the reported metrics' own time_this_iter_s

    def send(self, msg: proto.Message) -> None:
        if isinstance(msg, proto.Saved):  # a checkpoint asked for by answer(save=True): committed by the loop
            self.executor._ready.append(Saved(self.spec.trial_id, msg.iteration))

    def ask(self, msg: proto.Message) -> proto.Message:
        """The rank's side of the protocol, typed as on Dask; the hand-over to the loop carries its wire tuple."""
        wire = msg.to_wire()
        if isinstance(msg, proto.Report) and msg.result is not None:
            peak = self.executor._mem_peak.get(self.spec.trial_id)
            if peak:  # (as a rank that uses CUDA reports its peak)
                msg.result.setdefault("gpu_memory_peak_bytes", int(peak))
            wire = (*wire, self.time_hint)
        return proto.from_tuner(self._yield(wire))

    def report(self, metrics: dict[str, Any], checkpoint: Any = None) -> None:
        dt = metrics.get("time_this_iter_s") if isinstance(metrics, dict) else None
        self.time_hint = float(dt) if isinstance(dt, (int, float)) and not isinstance(dt, bool) else None
        super().report(metrics, checkpoint)

    def lease(self, request: dict[str, float], n: int, strategy: str) -> list[Any]:
        raise RuntimeError("A Trainer's fit() inside a trial (Train-in-Tune) places its ranks on the tuner's Dask "
                           "cluster; VirtualTimeExecutor has none: run this experiment on the Dask executor.")

    def sleep(self, seconds: float) -> None:
        reply = self._yield(("sleep", seconds))
        if reply[0] == "abort":
            raise TrialAborted(reply[1])

    def _yield(self, msg: tuple[Any, ...]) -> tuple[Any, ...]:
        """Hand control to the loop with ``msg``; returns what the loop resumes this trial with."""
        if self.aborted is not None:
            raise TrialAborted(self.aborted)
        vt = self.trial
        runner = vt.runner
        assert runner is not None
        vt.outbox = msg
        runner.to_loop.release()
        runner.to_trial.acquire()
        reply = vt.inbox
        assert reply is not None
        vt.inbox = None
        if reply[0] == "abort":
            self.aborted = reply[1]
        return reply


def _cpu_slots(request: Mapping[str, float]) -> int:
    """Virtual slots one rank of ``request`` takes: one per whole CPU it asks (a CPU of a slot each), at least one."""
    cpus = float(request.get("CPU", 1.0) or 0.0)
    return max(1, math.ceil(cpus - 1e-9))


class VirtualTimeExecutor(TrialExecutor):
    """Runs trials in the tuner's process in virtual time (see the module docstring).

    Args:
        num_slots: how many ranks run at once: a CPU each (a trial takes ``num_workers`` slots, times the whole
            CPUs each rank asks for: ``{"CPU": 2}`` takes two).
        iteration_s: virtual seconds an iteration takes when its result has no
            ``time_this_iter_s`` (and, for a real trainable, it did not :func:`sleep`).
        start_s: virtual seconds a trial takes to start.
        curve: ``curve(spec) -> iterable of results`` instead of calling the
            Tuner's trainable with the config (used by ``tuneplat simulate`` to
            replay recorded trials by id).
        gpus: virtual GPUs; trials are placed on them by ``GPU`` fraction or
            ``GPU_memory``, best fit. 0 (the default): GPUs are not modelled
            (``GPU`` requests are ignored, as ``tuneplat simulate`` replays runs
            recorded on GPU clusters).
        gpu_memory: the memory of each virtual GPU (``"80GiB"`` or bytes); None:
            unknown (``GPU_memory`` requests are refused, as on a cluster whose
            GPUs ``nvidia-smi`` cannot see, and memory is not enforced).
        lose_starts: the first this many trial starts lose their worker before the
            trial runs (``NOT_STARTED``: the tuner places the trial again).
        hang_timeout_s: a trial that yielded :data:`HANG` fails as hung after this many
            virtual seconds without a report (the Dask executor's heartbeat limit);
            None (the default): it stays silent until the tuner aborts it.

    Faults of a running trial come from its curve: it may yield :data:`HANG`,
    :data:`LOSE_WORKER`, :data:`LOSE_HOST` or :data:`PREEMPT`. When nothing runs and
    no trial fits the slots left (a host was lost), the executor reports
    :class:`~tuneplat.execution._executor.Starved` at once: in virtual time nothing
    would ever free a slot.

    Raises:
        ValueError: ``num_slots`` is not an int >= 1, ``gpus`` not an int >= 0, or ``gpu_memory`` not an amount.
    """

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

    # ------------------------------------------------------------------ the seam
    def setup(self, ctx: ExecutorContext) -> None:
        self.ctx = ctx
        raw = ctx.raw_trainable
        self._curves = self._curve is not None or inspect.isgeneratorfunction(raw)
        if ctx.world_size > self.num_slots:
            raise ValueError(f"A trial needs {ctx.world_size} rank(s) but VirtualTimeExecutor(num_slots="
                             f"{self.num_slots}) has fewer slots; raise num_slots.")
        if self.gpus:  # (a trial that can never fit on the virtual GPUs is refused at once, as on a cluster)
            self.check_fits(ctx.request, ctx.min_world_size or ctx.world_size)
        if self._curves:
            return
        if ctx.world_size != 1:
            raise ValueError(f"VirtualTimeExecutor runs trainables of one rank, and this one asks for "
                             f"{ctx.world_size} (ScalingConfig(num_workers={ctx.world_size})): use num_workers=1, "
                             "or the Dask executor (the Tuner's default) for torch.distributed groups.")
        if not callable(ctx.trainable):
            raise TypeError(f"VirtualTimeExecutor cannot run a {type(ctx.trainable).__name__}: give the Tuner a "
                            "function trainable, a tune.Trainable class or a TorchTrainer.")
        self.store.inner = self._default_store or LocalCheckpointStore()
        # every trial here is rank 0 of 1: what the Dask runner sets around each trial holds for the whole run
        env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "0"}
        io = ctx.trial_io
        if io is not None and io.chdir:  # (Ray's variable, as apply_trial_io sets it on a worker)
            env["TUNE_ORIG_WORKING_DIR"] = io.orig_cwd or os.getcwd()
        self._saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)

    def checkpoint_store(self, default: CheckpointStore | None = None) -> VirtualCheckpointStore:
        if default is not None and not isinstance(default, VirtualCheckpointStore):
            self._default_store = default  # (used only if the trainable is not a learning curve)
        return self.store

    def now(self) -> float:
        return self._now

    def running(self) -> int:
        return len(self._trials) + len(self._threads)

    def reserve(self, request: Mapping[str, float] | None = None, world_size: int | None = None) -> _VRes | None:
        asked = self.ctx.request if request is None else request
        need = (self.ctx.world_size if world_size is None else world_size) * _cpu_slots(asked)
        if self._free < need:
            self._starving = self.running() == 0  # nothing will ever free a slot for it
            return None
        share = self._gpu_share(asked)
        devices: list[list[tuple[int, float]]] = []
        if share > 0:
            free = list(self._gpu_free)
            for _ in range(need // _cpu_slots(asked)):
                got = self._place(free, share)
                if got is None:
                    return None
                devices.append(got)
        self._free -= need
        for rank in devices:
            for dev, part in rank:
                self._gpu_free[dev] -= part
        return _VRes(need, devices)

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

    def capacity(self) -> dict[str, float]:
        """One CPU per slot, and the virtual GPUs."""
        return {"CPU": float(self.num_slots), "GPU": float(self.gpus)}

    def gpu_memory_bytes(self) -> float | None:
        return self.gpu_memory if self.gpus else None

    def check_fits(self, request: Mapping[str, float], world_size: int) -> None:
        from ..execution._errors import PlacementError

        if world_size > self.num_slots:
            raise PlacementError(f"A trial needs {world_size} rank(s) but VirtualTimeExecutor(num_slots="
                                 f"{self.num_slots}) has fewer slots; raise num_slots.")
        if world_size * _cpu_slots(request) > self.num_slots:
            raise PlacementError(f"A trial needs {world_size} rank(s) with {{CPU={request.get('CPU', 1):g}}} each "
                                 f"(one slot per CPU) but VirtualTimeExecutor(num_slots={self.num_slots}) has "
                                 f"{self.num_slots} slot(s); raise num_slots.")
        share = self._gpu_share(request)
        if share <= 0:
            return
        free = [1.0] * self.gpus
        for _ in range(world_size):
            if self._place(free, share) is None:
                raise PlacementError(f"A trial needs {world_size} rank(s) with GPU={share:g} each, but "
                                     f"VirtualTimeExecutor(gpus={self.gpus}) cannot hold them all; raise gpus.")

    def unreserve(self, reservation: _VRes) -> None:
        self._release(reservation)

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

    def start(self, spec: TrialSpec, reservation: _VRes) -> list[str]:
        self._held[spec.trial_id] = reservation
        self.max_running = max(self.max_running, len(self._held))
        where = [f"virtual:{spec.trial_id}" + (f":gpu{','.join(str(d) for d, _ in r)}" if r else "")
                 for r in reservation.devices] or [f"virtual:{spec.trial_id}"]
        self._start(spec, reservation.slots)
        return where

    def _start(self, spec: TrialSpec, reservation: int) -> None:
        if self._lose_starts > 0:  # its worker is lost before the trial runs: placed again by the tuner
            self._lose_starts -= 1
            self._free_memory(spec.trial_id)
            self._ready.append(Ended(spec.trial_id, Outcome.NOT_STARTED, "a worker was lost before the trial started"))
            return
        if not self._curves:
            self._start_thread(spec, reservation)
            return
        try:
            produced = self._curve(spec) if self._curve is not None else self.ctx.raw_trainable(dict(spec.config))
            if produced is None or not isinstance(produced, Iterable):
                raise TypeError(f"the curve returned {type(produced).__name__}; VirtualTimeExecutor needs a function "
                                "that yields (or returns a list of) result dicts")
            results = iter(produced)
            for _ in range(spec.start_iteration):  # resume: what the checkpoint already holds
                next(results)
        except StopIteration:
            results = iter(())
        except Exception as exc:  # noqa: BLE001 - the trainable's failure is the trial's
            vt = _VTrial(spec, iter(()), reservation, iteration=spec.start_iteration)
            self._trials[spec.trial_id] = vt
            self._ready.append(Started(spec.trial_id))
            self._fail(vt, exc)
            return
        vt = _VTrial(spec, results, reservation, iteration=spec.start_iteration, elapsed=spec.time_offset)
        self._trials[spec.trial_id] = vt
        self._ready.append(Started(spec.trial_id))
        self._advance(vt, self.start_s)

    def answer(self, trial_id: str, decision: Decision, *, save: bool = False) -> None:
        tt = self._threads.get(trial_id)
        if tt is not None:
            if tt.waiting:
                tt.waiting = False
                self._schedule(tt, 0.0, ("resume", proto.Answer(decision, save=save).to_wire()))
            return
        vt = self._trials.get(trial_id)
        if vt is None or not vt.waiting:
            return
        vt.waiting = False
        if decision is Decision.CONTINUE and vt.preempted:  # its checkpoint is committed: start again elsewhere
            self._end(vt, Outcome.RESIZED, f"host of trial {trial_id} preempted", preempted=True)
        elif decision is Decision.CONTINUE:
            self._advance(vt, 0.0)
        else:
            self._end(vt, Outcome.FINISHED)

    def abort(self, trial_id: str, reason: str) -> None:
        tt = self._threads.get(trial_id)
        if tt is not None:
            self._unwind(tt, reason)
            self._end_thread(tt, Outcome.ABORTED, reason)
            return
        vt = self._trials.get(trial_id)
        if vt is not None:
            self._end(vt, Outcome.ABORTED, reason)

    def fail(self, trial_id: str, message: str) -> None:
        tt = self._threads.get(trial_id)
        if tt is not None:
            self._ready.append(RankFailed(trial_id, tt.spec.attempt, message))
            self._unwind(tt, message)
            self._end_thread(tt, Outcome.FAILED, message, failure=Failure(INVALID, message=message))
            return
        vt = self._trials.get(trial_id)
        if vt is not None:
            self._ready.append(RankFailed(trial_id, vt.spec.attempt, message))
            self._end(vt, Outcome.FAILED, message, failure=Failure(INVALID, message=message))

    def poll(self, timeout: float | None) -> list[Event]:
        if self._ready:
            events, self._ready = self._ready, []
            return events
        if self._starving and self.running() == 0 and not self._heap:
            self._starving = False
            return [Starved(f"no virtual slot can take this trial ({self._free} of {self.num_slots} left after "
                            "lost hosts)")]
        self._starving = False
        limit = None if timeout is None else self._now + timeout
        while self._heap:
            when, _, trial_id, seq = self._heap[0]
            if limit is not None and when > limit:
                break
            heapq.heappop(self._heap)
            tt = self._threads.get(trial_id)
            if tt is not None:
                if tt.seq != seq:
                    continue  # (rescheduled meanwhile)
                self._now = max(self._now, when)
                self._step_thread(tt)
            else:
                vt = self._trials.get(trial_id)
                if vt is None or vt.seq != seq:
                    continue  # (ended or rescheduled meanwhile)
                self._now = max(self._now, when)
                if vt.hung:  # silent past the heartbeat limit
                    message = (f"rank 0 on virtual:{trial_id} sent nothing for {self.hang_timeout_s:g}s (hung or "
                               "stopped; TUNEPLAT_HEARTBEAT_TIMEOUT_S)")
                    self._ready.append(RankFailed(trial_id, vt.spec.attempt, message))
                    self._end(vt, Outcome.FAILED, message, failure=Failure(HUNG, (), 0, "virtual", message))
                else:
                    self._report(vt)
            if self._ready:
                events, self._ready = self._ready, []
                return events
        if limit is not None:
            self._now = max(self._now, limit)
        return []

    def teardown(self, reason: str, timeout: float = 30.0) -> list[Event]:
        for tt in list(self._threads.values()):
            self._unwind(tt, reason)
            self._end_thread(tt, Outcome.ABORTED, reason)
        for vt in list(self._trials.values()):
            self._end(vt, Outcome.ABORTED, reason)
        events, self._ready = self._ready, []
        return events

    def close(self) -> None:
        for tt in list(self._threads.values()):
            try:
                self._unwind(tt, "the tuner closed")
            except Exception:  # noqa: BLE001 - close must not raise
                logger.warning("tuneplat: a virtual trial failed while the executor closed", exc_info=True)
            else:
                if tt.runner is not None and tt.done:
                    self._idle.append(tt.runner)
        self._threads.clear()
        for runner in self._idle:
            runner.trial = None
            runner.to_trial.release()
            if runner.thread is not None:
                runner.thread.join()
        self._idle.clear()
        self.store.materialize()
        self._trials.clear()
        self._heap.clear()
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env = {}

    def describe(self) -> str:
        gpus = ""
        if self.gpus:
            mem = f" of {_gib(self.gpu_memory)}" if self.gpu_memory else ""
            gpus = f", {self.gpus} GPU(s){mem}"
        return f"virtual time, {self.num_slots} slot(s){gpus}"

    # ------------------------------------------------------------------ real trainables, one thread each
    def _start_thread(self, spec: TrialSpec, reservation: int) -> None:
        tt = _TTrial(spec, reservation, self._now)
        ctx = self.ctx
        tt.rank_spec = RankSpec(
            trial_id=spec.trial_id, trial_name=spec.name, experiment_name=ctx.experiment_name,
            trial_dir=spec.path, attempt=spec.attempt, rank=0, world_size=1, local_rank=0, local_world_size=1,
            node_rank=0, tuner_addr=("virtual", 0), token=b"", config=dict(spec.config),
            start_iteration=spec.start_iteration, time_offset=spec.time_offset,
            checkpoint_path=spec.checkpoint_path, backend=ctx.backend or "gloo", metric=ctx.metric,
            storage_fs=ctx.storage_fs, remote_trial_dir=spec.remote_trial_dir,
            resources=dict(spec.request or ctx.request), cpus=float((spec.request or ctx.request).get("CPU", 1.0)))
        self._threads[spec.trial_id] = tt
        self._ready.append(Started(spec.trial_id))
        self._schedule(tt, self.start_s, ("resume", ("go",)))

    def _runner(self) -> _Runner:
        if self._idle:
            return self._idle.pop()
        runner = _Runner()
        runner.thread = threading.Thread(target=self._serve, args=(runner,), daemon=True,
                                         name=f"tuneplat-virtual-{len(self._idle)}-{id(runner):x}")
        runner.thread.start()
        return runner

    def _serve(self, runner: _Runner) -> None:
        """A runner's thread: each time it is resumed with a trial, run it as the Dask runner would."""
        while True:
            runner.to_trial.acquire()
            tt = runner.trial
            if tt is None:
                return
            tt.inbox = None  # ("go",)
            tt.outbox = self._run_one(tt)
            tt.done = True
            runner.trial = None
            runner.to_loop.release()

    def _run_one(self, tt: _TTrial) -> tuple[Any, ...]:
        from ..execution._runner import _call

        assert tt.rank_spec is not None
        session = _VirtualSession(tt.rank_spec, self, tt)
        _set_session(session, process_wide=False)
        try:
            _call(self.ctx.trainable, dict(tt.rank_spec.config))
        except StopTrial:
            pass
        except TrialAborted:
            return ("end", "aborted", None, None)
        except BaseException as exc:  # noqa: BLE001 - every failure goes to the tuner, as from a Dask worker
            return ("end", "error", f"rank 0: {type(exc).__name__}: {exc}", traceback.format_exc(),
                    exception_types(exc))
        finally:
            for cleanup in session.cleanups:
                try:
                    cleanup()
                except Exception:  # noqa: BLE001 - the trial's outcome is decided
                    logger.warning("tuneplat: a trial's cleanup failed", exc_info=True)
            _set_session(None, process_wide=False)
        return ("end", "done", None, None)

    def _schedule(self, tt: _TTrial, delay: float, action: tuple[Any, ...]) -> None:
        tt.seq += 1
        tt.pending = action
        heapq.heappush(self._heap, (self._now + delay, next(self._counter), tt.spec.trial_id, tt.seq))

    def _resume(self, tt: _TTrial, msg: tuple[Any, ...]) -> tuple[Any, ...]:
        """Run the trial's thread until it reports, sleeps or ends; what it handed back."""
        if tt.runner is None:  # its first run: a runner takes it
            tt.runner = self._runner()
            tt.runner.trial = tt
        runner = tt.runner
        tt.inbox = msg
        # the trial runs in its folder, its output captured, as on a Dask worker (only one trial's code runs at once)
        io = self.ctx.trial_io
        if io is not None and (io.stdout or io.stderr):
            with apply_trial_io(io, tt.spec.path):
                runner.to_trial.release()
                runner.to_loop.acquire()
        elif io is not None and io.chdir:
            before = os.getcwd()
            try:
                os.chdir(tt.spec.path)
            except OSError:
                pass  # (the trial runs where the tuner runs)
            try:
                runner.to_trial.release()
                runner.to_loop.acquire()
            finally:
                os.chdir(before)
        else:
            runner.to_trial.release()
            runner.to_loop.acquire()
        out = tt.outbox
        assert out is not None
        tt.outbox = None
        return out

    def _step_thread(self, tt: _TTrial) -> None:
        action = tt.pending
        tt.pending = None
        assert action is not None
        if action[0] == "deliver":  # the iteration's time is up: the report reaches the tuner
            self._deliver(tt, action[1])
            return
        msg = action[1]
        if msg[0] in ("go", "decision"):
            tt.slept = False
        out = self._resume(tt, msg)
        self._handle(tt, out)

    def _handle(self, tt: _TTrial, out: tuple[Any, ...]) -> None:
        kind = out[0]
        if kind == "sleep":
            tt.slept = True
            self._schedule(tt, out[1], ("resume", ("woke",)))
        elif kind == "report":
            hint = out[4] if len(out) > 4 else None
            delay = hint if hint is not None else (0.0 if tt.slept else self.iteration_s)
            self._schedule(tt, max(0.0, delay), ("deliver", out))
        elif kind == "end":
            _, how, message, tb = out[:4]
            if how == "error":
                self._ready.append(RankFailed(tt.spec.trial_id, tt.spec.attempt, message))
                self._end_thread(tt, Outcome.FAILED, message, tb, Failure.of_types(out[4], message, 0))
            elif how == "aborted":
                self._end_thread(tt, Outcome.ABORTED, "the trial's group is being torn down")
            else:
                self._end_thread(tt, Outcome.FINISHED)

    def _deliver(self, tt: _TTrial, out: tuple[Any, ...]) -> None:
        _, iteration, result, staged = out[:4]
        dt = self._now - tt.last_report_at
        tt.last_report_at = self._now
        self.iterations += 1
        self.trial_seconds += dt * tt.slots
        result.update(time_this_iter_s=dt, time_total_s=tt.spec.time_offset + (self._now - tt.started_at),
                      timestamp=self._now)
        tt.waiting = True
        self._ready.append(Reported(tt.spec.trial_id, iteration, result, staged))

    def _unwind(self, tt: _TTrial, reason: str) -> None:
        """Make a live trial's code leave: its ``report()`` or :func:`sleep` raises, its ``finally`` blocks run."""
        msg: tuple[Any, ...] = proto.Abort(reason).to_wire()
        if tt.runner is None:  # it never ran: nothing to unwind
            tt.done = True
            return
        while not tt.done:
            out = self._resume(tt, msg)
            if out[0] == "end":
                break
            # it caught the abort and went on (a bare except): every later report or sleep raises again

    def _end_thread(self, tt: _TTrial, outcome: Outcome, message: str | None = None, tb: str | None = None,
                    failure: Failure | None = None) -> None:
        if self._threads.pop(tt.spec.trial_id, None) is None:
            return
        tt.seq += 1  # cancels what was scheduled for it
        tt.waiting = False
        self._free_memory(tt.spec.trial_id)
        if tt.runner is not None and tt.done:
            self._idle.append(tt.runner)  # its thread waits for the next trial
        self._ready.append(Ended(tt.spec.trial_id, outcome, message, tb, failure=failure))

    # ------------------------------------------------------------------ learning curves
    def _advance(self, vt: _VTrial, delay: float) -> None:
        """Pull the trial's next result and schedule its report when that iteration is done."""
        try:
            nxt = next(vt.results)
        except StopIteration:
            self._end(vt, Outcome.FINISHED)
            return
        except Exception as exc:  # noqa: BLE001 - the curve's failure is the trial's
            self._fail(vt, exc)
            return
        if nxt is HANG:
            vt.hung = True  # never reports again: only an abort ends it (or the heartbeat limit, when set)
            if self.hang_timeout_s is not None:
                vt.seq += 1
                heapq.heappush(self._heap, (self._now + delay + self.hang_timeout_s, next(self._counter),
                                            vt.spec.trial_id, vt.seq))
            return
        if nxt is PREEMPT:
            vt.preempted = True
            self._ready.append(Preempted(vt.spec.trial_id, "virtual", "the host is leaving"))
            self._advance(vt, delay)
            return
        if nxt is LOSE_WORKER or nxt is LOSE_HOST:
            message = f"rank 0 on virtual:{vt.spec.trial_id} lost its connection (its process or Dask worker died)"
            if nxt is LOSE_HOST:  # its slots leave the cluster with it
                self.num_slots -= vt.slots
                self._free -= vt.slots
            self._ready.append(RankFailed(vt.spec.trial_id, vt.spec.attempt, message))
            self._end(vt, Outcome.FAILED, message, failure=Failure(LOST, (), 0, "virtual", message))
            return
        if not isinstance(nxt, dict):
            self._fail(vt, TypeError(f"a curve yielded {type(nxt).__name__}, not a dict of metrics"))
            return
        held = nxt.get("gpu_memory_peak_bytes")
        if self.gpus and isinstance(held, (int, float)) and not isinstance(held, bool):
            try:  # the iteration holds this much on the trial's device(s) from its start
                self._use_memory(vt.spec.trial_id, float(held))
            except (OutOfMemoryError, RuntimeError) as exc:
                self._fail(vt, exc)
                return
        vt.pending = nxt
        dt = nxt.get("time_this_iter_s", self.iteration_s)
        dt = float(dt) if isinstance(dt, (int, float)) and not isinstance(dt, bool) else self.iteration_s
        vt.seq += 1
        heapq.heappush(self._heap, (self._now + delay + dt, next(self._counter), vt.spec.trial_id, vt.seq))

    def _report(self, vt: _VTrial) -> None:
        metrics = vt.pending or {}
        vt.pending = None
        dt = metrics.get("time_this_iter_s", self.iteration_s)
        dt = float(dt) if isinstance(dt, (int, float)) and not isinstance(dt, bool) else self.iteration_s
        vt.iteration += 1
        vt.since_restore += 1
        vt.elapsed += dt
        self.iterations += 1
        self.trial_seconds += dt * vt.slots
        result = dict(metrics)
        result.update(training_iteration=vt.iteration, time_this_iter_s=dt, time_total_s=vt.elapsed,
                      timestamp=self._now, iterations_since_restore=vt.since_restore, trial_id=vt.spec.trial_id)
        vt.waiting = True
        self._ready.append(Reported(vt.spec.trial_id, vt.iteration, result, staged=True))

    def _fail(self, vt: _VTrial, exc: BaseException) -> None:
        message = f"rank 0: {type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(exc))
        self._ready.append(RankFailed(vt.spec.trial_id, vt.spec.attempt, message))
        self._end(vt, Outcome.FAILED, message, tb, Failure.of_exception(exc, message, 0))

    def _end(self, vt: _VTrial, outcome: Outcome, message: str | None = None, tb: str | None = None,
             failure: Failure | None = None, preempted: bool = False) -> None:
        if self._trials.pop(vt.spec.trial_id, None) is None:
            return
        vt.seq += 1  # cancels its scheduled report
        self._free_memory(vt.spec.trial_id)
        self._ready.append(Ended(vt.spec.trial_id, outcome, message, tb, world_size=vt.slots, failure=failure,
                                 preempted=preempted))
