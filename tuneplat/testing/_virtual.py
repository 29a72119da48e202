"""A :class:`~tuneplat.execution.TrialExecutor` that replays learning curves in virtual time.

The whole tuner runs for real — searcher, scheduler, stop rules, journal,
callbacks, restore — but trials are not processes: each is a *learning curve*,
a function of the config that yields result dicts, and time is simulated. A
1,000-trial ASHA sweep takes well under a second, so it serves tests of the
tuner's logic, scheduler studies and ``tuneplat simulate``.

Example:
    >>> import tuneplat as tune
    >>> from tuneplat.testing import VirtualTimeExecutor
    >>> def curve(config):
    ...     for step in range(1, 11):
    ...         yield {"loss": config["lr"] / step, "time_this_iter_s": 2.0}
    >>> tuner = tune.Tuner(curve, param_space={"lr": tune.uniform(0, 1)},
    ...                    tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=8),
    ...                    executor=VirtualTimeExecutor(num_slots=2))
    >>> grid = tuner.fit()  # doctest: +SKIP

What a curve may yield:

* a dict of metrics: one report; ``time_this_iter_s`` in it sets how long that
  iteration took in virtual time (default ``iteration_s``);
* :data:`HANG`: the trial stops reporting and never ends by itself (a hung
  loop, one very long epoch) until the tuner aborts it;
* raising an exception fails the attempt, as a crashing trainable would.

Every report is checkpointed (an empty folder, so restore and PBT's clones
work on disk); a restarted attempt skips the results before its checkpoint.
"""

from __future__ import annotations

import heapq
import itertools
import os
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from schedulers import Decision

from ..execution._executor import (
    Ended,
    Event,
    ExecutorContext,
    Outcome,
    RankFailed,
    Reported,
    Started,
    TrialExecutor,
    TrialSpec,
)
from ..storage._storage import LocalCheckpointStore

__all__ = ["HANG", "VirtualCheckpointStore", "VirtualTimeExecutor"]


class _Hang:
    def __repr__(self) -> str:
        return "tuneplat.testing.HANG"


#: yield this from a curve to make the trial stop reporting (until the tuner aborts it)
HANG = _Hang()


class VirtualCheckpointStore(LocalCheckpointStore):
    """Checkpoints of virtual trials: nothing is staged by ranks, and nothing is written while the run goes.

    Each trial's latest checkpoint becomes an empty folder when the executor
    closes (:meth:`materialize`), so ``Tuner.restore`` finds it there.
    """

    def __init__(self) -> None:
        self._latest: dict[str, str] = {}

    def clean_staging(self, trial_path: str) -> None:
        return None

    def commit(self, trial_path: str, name: str) -> str | None:
        path = os.path.join(trial_path, name)
        self._latest[trial_path] = path
        return path

    def copy(self, src_checkpoint: str, trial_path: str, name: str) -> str | None:
        return self.commit(trial_path, name)

    def delete(self, checkpoint_path: str) -> None:
        if os.path.isdir(checkpoint_path):
            super().delete(checkpoint_path)

    def materialize(self) -> None:
        for path in self._latest.values():
            os.makedirs(path, exist_ok=True)
        self._latest.clear()


@dataclass
class _VTrial:
    spec: TrialSpec
    results: Iterator[Any]
    slots: int
    iteration: int = 0
    since_restore: int = 0
    elapsed: float = 0.0
    pending: dict[str, Any] | None = None  # the next result, pulled when the last one was answered
    waiting: bool = False  # a report was sent and not answered yet
    hung: bool = False
    seq: int = 0  # bumps when the trial's scheduled report is cancelled
    history: list[float] = field(default_factory=list)


class VirtualTimeExecutor(TrialExecutor):
    """Runs trials as learning curves in virtual time (see the module docstring).

    Args:
        num_slots: how many ranks run at once (a trial takes ``num_workers`` slots).
        iteration_s: virtual seconds an iteration takes when its result has no
            ``time_this_iter_s``.
        start_s: virtual seconds a trial takes to start.
        curve: ``curve(spec) -> iterable of results`` instead of calling the
            Tuner's trainable with the config (used by ``tuneplat simulate`` to
            replay recorded trials by id).
    """

    def __init__(self, num_slots: int = 4, *, iteration_s: float = 1.0, start_s: float = 0.0,
                 curve: Callable[[TrialSpec], Iterable[Any]] | None = None) -> None:
        if not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"VirtualTimeExecutor(num_slots={num_slots!r}): must be an int >= 1")
        self.num_slots = num_slots
        self.iteration_s = float(iteration_s)
        self.start_s = float(start_s)
        self._curve = curve
        self._now = 0.0
        self._free = num_slots
        self._trials: dict[str, _VTrial] = {}
        self._heap: list[tuple[float, int, str, int]] = []
        self._counter = itertools.count()
        self._ready: list[Event] = []
        self.store = VirtualCheckpointStore()
        #: iterations run and trial-seconds spent, over the whole run (for ``tuneplat simulate``)
        self.iterations = 0
        self.trial_seconds = 0.0

    # ------------------------------------------------------------------ the seam
    def setup(self, ctx: ExecutorContext) -> None:
        self.ctx = ctx
        if ctx.world_size > self.num_slots:
            raise ValueError(f"A trial needs {ctx.world_size} rank(s) but VirtualTimeExecutor(num_slots="
                             f"{self.num_slots}) has fewer slots; raise num_slots.")
        if self._curve is None and not callable(ctx.raw_trainable):
            raise TypeError("VirtualTimeExecutor runs learning curves: give the Tuner a function "
                            "curve(config) that yields result dicts.")

    def checkpoint_store(self) -> VirtualCheckpointStore:
        return self.store

    def now(self) -> float:
        return self._now

    def running(self) -> int:
        return len(self._trials)

    def reserve(self, request: Mapping[str, float] | None = None, world_size: int | None = None) -> int | None:
        need = self.ctx.world_size if world_size is None else world_size
        if self._free < need:
            return None
        self._free -= need
        return need

    def check_fits(self, request: Mapping[str, float], world_size: int) -> None:
        if world_size > self.num_slots:
            from ..execution._errors import PlacementError

            raise PlacementError(f"A trial needs {world_size} rank(s) but VirtualTimeExecutor(num_slots="
                                 f"{self.num_slots}) has fewer slots; raise num_slots.")

    def unreserve(self, reservation: int) -> None:
        self._free += reservation

    def start(self, spec: TrialSpec, reservation: int) -> list[str]:
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
            return [f"virtual:{spec.trial_id}"]
        vt = _VTrial(spec, results, reservation, iteration=spec.start_iteration, elapsed=spec.time_offset)
        self._trials[spec.trial_id] = vt
        self._ready.append(Started(spec.trial_id))
        self._advance(vt, self.start_s)
        return [f"virtual:{spec.trial_id}"]

    def answer(self, trial_id: str, decision: Decision, *, save: bool = False) -> None:
        vt = self._trials.get(trial_id)
        if vt is None or not vt.waiting:
            return
        vt.waiting = False
        if decision is Decision.CONTINUE:
            self._advance(vt, 0.0)
        else:
            self._end(vt, Outcome.FINISHED)

    def abort(self, trial_id: str, reason: str) -> None:
        vt = self._trials.get(trial_id)
        if vt is not None:
            self._end(vt, Outcome.ABORTED, reason)

    def fail(self, trial_id: str, message: str) -> None:
        vt = self._trials.get(trial_id)
        if vt is not None:
            self._ready.append(RankFailed(trial_id, vt.spec.attempt, message))
            self._end(vt, Outcome.FAILED, message)

    def poll(self, timeout: float | None) -> list[Event]:
        if self._ready:
            events, self._ready = self._ready, []
            return events
        limit = None if timeout is None else self._now + timeout
        while self._heap:
            when, _, trial_id, seq = self._heap[0]
            if limit is not None and when > limit:
                break
            heapq.heappop(self._heap)
            vt = self._trials.get(trial_id)
            if vt is None or vt.seq != seq:
                continue  # (ended or rescheduled meanwhile)
            self._now = max(self._now, when)
            self._report(vt)
            events, self._ready = self._ready, []
            return events
        if limit is not None:
            self._now = max(self._now, limit)
        return []

    def teardown(self, reason: str, timeout: float = 30.0) -> list[Event]:
        for vt in list(self._trials.values()):
            self._end(vt, Outcome.ABORTED, reason)
        events, self._ready = self._ready, []
        return events

    def close(self) -> None:
        self.store.materialize()
        self._trials.clear()
        self._heap.clear()

    def describe(self) -> str:
        return f"virtual time, {self.num_slots} slot(s)"

    # ------------------------------------------------------------------ the simulation
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
            vt.hung = True  # never reports again: only an abort ends it
            return
        if not isinstance(nxt, dict):
            self._fail(vt, TypeError(f"a curve yielded {type(nxt).__name__}, not a dict of metrics"))
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
        self._end(vt, Outcome.FAILED, message, tb)

    def _end(self, vt: _VTrial, outcome: Outcome, message: str | None = None, tb: str | None = None) -> None:
        if self._trials.pop(vt.spec.trial_id, None) is None:
            return
        vt.seq += 1  # cancels its scheduled report
        self._free += vt.slots
        self._ready.append(Ended(vt.spec.trial_id, outcome, message, tb))
