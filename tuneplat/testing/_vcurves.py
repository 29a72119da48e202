"""Learning curves in virtual time: a trial is a generator of results and fault sentinels (a mixin of
:class:`~tuneplat.testing.VirtualTimeExecutor`)."""

from __future__ import annotations

import heapq
import traceback

from ..execution._executor import (
    Ended,
    Outcome,
    Preempted,
    RankFailed,
    Reported,
)
from ..execution._failure import LOST, Failure
from ._vstate import _VState, _VTrial
from ._vtrainable import HANG, LOSE_HOST, LOSE_WORKER, PREEMPT, OutOfMemoryError

__all__: list[str] = []


class _Curves(_VState):
    """Pull, report, fail and end the trials of learning curves."""

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
