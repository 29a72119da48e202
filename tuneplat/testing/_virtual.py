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

import heapq
import inspect
import logging
import math
import os
from collections.abc import Iterable, Mapping

from schedulers import Decision

from ..core._scaling import GroupSize, Resize, ScalingDecision, ScalingPolicy
from ..execution import _protocol as proto
from ..execution._executor import (
    Ended,
    Event,
    ExecutorContext,
    Outcome,
    RankFailed,
    Started,
    Starved,
    TrialSpec,
)
from ..execution._failure import HUNG, INVALID, Failure
from ..storage._storage import CheckpointStore, LocalCheckpointStore
from ._vcurves import _Curves
from ._vstate import VirtualCheckpointStore, _gib, _VRes, _VState, _VTrial
from ._vthreads import _Threads
from ._vtrainable import HANG, LOSE_HOST, LOSE_WORKER, PREEMPT, OutOfMemoryError, now, sleep, use_gpu_memory

__all__ = ["HANG", "LOSE_HOST", "LOSE_WORKER", "OutOfMemoryError", "PREEMPT", "VirtualCheckpointStore",
           "VirtualTimeExecutor", "now", "sleep", "use_gpu_memory"]

logger = logging.getLogger("tuneplat")


def _cpu_slots(request: Mapping[str, float]) -> int:
    """Virtual slots one rank of ``request`` takes: one per whole CPU it asks (a CPU of a slot each), at least one."""
    cpus = float(request.get("CPU", 1.0) or 0.0)
    return max(1, math.ceil(cpus - 1e-9))


class VirtualTimeExecutor(_Threads, _Curves, _VState):
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

    # ------------------------------------------------------------------ the seam
    def setup(self, ctx: ExecutorContext) -> None:
        self.ctx = ctx
        self.scaling = ctx.scaling or ScalingPolicy.of(ctx.world_size, ctx.min_world_size, ctx.grow_interval_s)
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
    def start(self, spec: TrialSpec, reservation: _VRes) -> list[str]:
        self._held[spec.trial_id] = reservation
        self.max_running = max(self.max_running, len(self._held))
        ranks = spec.world_size or self.ctx.world_size  # (one place per rank: the journal counts a group's ranks)
        where = [f"virtual:{spec.trial_id}" + (f":gpu{','.join(str(d) for d, _ in r)}" if r else "")
                 for r in reservation.devices] or [f"virtual:{spec.trial_id}"] * max(1, ranks)
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
        scaled = self._scale(vt) if decision is Decision.CONTINUE else None
        if isinstance(scaled, Resize):  # its checkpoint is committed: start again elsewhere
            self._end(vt, Outcome.RESIZED, scaled.reason, preempted=vt.preempted)
        elif decision is Decision.CONTINUE:
            self._advance(vt, 0.0)
        else:
            self._end(vt, Outcome.FINISHED)

    def _scale(self, vt: _VTrial) -> ScalingDecision:
        """The scaling policy's decision at a curve's report (each one is checkpointed)."""
        group = GroupSize(size=vt.slots, checkpointed=True, preempted=(
            f"host of trial {vt.spec.trial_id} preempted" if vt.preempted else None), preempted_ranks=vt.slots)
        # (a virtual group is placed with the ranks it asks for and never grows: no worker is ever free for it)
        return self.scaling.at_checkpoint(group, 0, lambda limit: 0)

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
