"""Real trainables in virtual time: each trial's code in a thread of its own, one running at a time (a mixin of
:class:`~tuneplat.testing.VirtualTimeExecutor`)."""

from __future__ import annotations

import heapq
import logging
import os
import threading
import traceback
from typing import Any

from ..execution import _protocol as proto
from ..execution._executor import (
    Ended,
    Outcome,
    RankFailed,
    Reported,
    Started,
    TrialSpec,
)
from ..execution._failure import Failure, exception_types
from ..execution._trial_io import apply_trial_io
from ..train._session import RankSpec, StopTrial, TrialAborted, _set_session
from ._vstate import _VState
from ._vtrainable import _Runner, _TTrial, _VirtualSession

logger = logging.getLogger("tuneplat")

__all__: list[str] = []


class _Threads(_VState):
    """Start, step, deliver, unwind and end the trials of real trainables."""

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
