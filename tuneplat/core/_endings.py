"""How trials end: outcomes of attempts, failures and the failure policy, the experiment failing, teardown
(a mixin of the tuner's loop)."""

from __future__ import annotations

import dataclasses
from typing import Any

from schedulers import Decision

from ..execution._executor import (
    Ended,
    Outcome,
    RankFailed,
)
from ..execution._failure import ERROR, OOM, Failure
from . import _events as ev
from ._failure import End, RetrySmaller
from ._journal import pickle_hex, to_jsonable
from ._loop_state import _LoopState
from ._phase import ExperimentPhase
from ._trial import RunState, Trial, TrialStatus
from ._view import copy_result

__all__: list[str] = []


class _Endings(_LoopState):
    """An attempt's end turned into a transition; a trial's final state; every group ended."""

    def _on_ended(self, event: Ended) -> None:
        run = self.running.pop(event.trial_id, None)
        trial = self.by_id[event.trial_id]
        decision = run.decision if run is not None else None
        self.searcher_blocked = False
        self.trial_files.close(trial.trial_id)
        if self.min_world_size is not None and event.outcome in (Outcome.RESIZED, Outcome.FAILED):
            self._resize_reasons[trial.trial_id] = (event.world_size, event.message or "")
        elif self.min_world_size is not None and event.outcome is Outcome.NOT_STARTED:
            # that attempt never ran: the next one's size is compared with it, and says why it differs
            self._resize_reasons[trial.trial_id] = (
                event.world_size, f"the attempt with {event.world_size or '?'} rank(s) never started ("
                                  f"{event.message or 'a worker was lost before the trial started'})")
        stop_reason = trial.stop_reason or (run.stop_reason if run is not None else None)
        if event.outcome is Outcome.RESIZED and event.preempted:
            self._write(ev.TrialPreempted(trial_id=trial.trial_id, message=event.message))
            preempted = self.failure_policy.preempted(trial, event.message)
            if isinstance(preempted, End) and not self.stopping:
                self._end_trial(trial, TrialStatus.ERROR, error=preempted.error)
                self.actions.trial_ended(trial.trial_id)
                return
        if event.outcome is Outcome.RESIZED and not self.stopping and decision is None:
            # it starts again at once, from the checkpoint just committed
            self._write(ev.TrialRequeued(trial_id=trial.trial_id, reason=f"elastic resize: {event.message}"))
            self.queue.appendleft(trial)
        elif event.outcome is Outcome.RESIZED and not self.interrupted and decision is None:
            self._end_trial(trial, TrialStatus.TERMINATED, stop_reason=stop_reason)  # (the experiment is stopping)
        elif event.outcome is Outcome.RESIZED and decision is Decision.PAUSE:
            self._write(ev.TrialPaused(trial_id=trial.trial_id, iteration=trial.iteration))
        elif event.outcome is Outcome.RESIZED:
            self._write(ev.TrialRequeued(trial_id=trial.trial_id, reason=f"elastic resize: {event.message}"))
        elif event.outcome is Outcome.NOT_STARTED and not self.stopping:
            requeue = self.failure_policy.lost_start(event.message)
            self._write(ev.TrialRequeued(trial_id=trial.trial_id, reason=requeue.reason, not_started=True))
            self.queue.appendleft(trial)
        elif (event.outcome is Outcome.FAILED and (not self.interrupted or trial.trial_id in self._no_retry)
              and decision is None):
            self._on_failure(trial, run, event.message or "unknown failure", event.traceback, event.failure)
        elif event.outcome is Outcome.FAILED and self.interrupted:
            self._write(ev.TrialRequeued(trial_id=trial.trial_id, reason=_INTERRUPTED))
        elif decision is Decision.PAUSE:
            self._write(ev.TrialPaused(trial_id=trial.trial_id, iteration=trial.iteration))
        elif self.interrupted and decision is None:
            self._write(ev.TrialRequeued(trial_id=trial.trial_id, reason=_INTERRUPTED))  # restorable
        else:
            self._end_trial(trial, TrialStatus.TERMINATED, stop_reason=stop_reason)
        self.actions.trial_ended(trial.trial_id)

    def _on_failure(self, trial: Trial, run: RunState | None, message: str, tb: str | None,
                    failure: Failure | None) -> None:
        """An attempt failed: the failure policy decides (retry, retry smaller, end); the loop carries it out."""
        failure = failure or Failure(ERROR, message=message)  # (an executor that does not type its failures)
        if failure.message != message:
            failure = dataclasses.replace(failure, message=message)
        if failure.kind == OOM and self.shapes.auto_sized(trial.trial_id):  # GPU_memory="auto": successors ask more
            line = self.shapes.gpu_auto.on_oom(trial.trial_id, self.executor.gpu_memory_bytes())
            if line:
                self.reporter.event(line)
        decision = self.failure_policy.decide(
            trial, failure, retryable=not self.stopping and trial.trial_id not in self._no_retry)
        smaller = decision if isinstance(decision, RetrySmaller) else None
        retry = not isinstance(decision, End)
        self._write(ev.TrialFailure(
            trial_id=trial.trial_id, attempt=run.attempt if run is not None else trial.attempts - 1,
            message=message, traceback=tb, retry=retry, failure_kind=failure.kind,
            types=list(failure.types) or None, oom_retry=True if smaller is not None else None))
        if smaller is not None:
            old = trial.config
            self._write(ev.OomRetry(trial_id=trial.trial_id, retry=trial.oom_retries + 1,
                                    change=to_jsonable(smaller.change), old_config=to_jsonable(old),
                                    new_config=to_jsonable(smaller.config), config_pickle=pickle_hex(smaller.config),
                                    config_object=smaller.config))
        self.hooks.trial_failure(trial, message, retry)
        if smaller is not None:
            fc = self.failure_policy.config
            changes = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in smaller.change.items())
            self.reporter.event(f"trial {trial.trial_id} ran out of memory; retrying with {changes} "
                                f"(OOM retry {trial.oom_retries} of {fc.max_oom_retries})")
            self.queue.append(trial)
            return
        if not isinstance(decision, End):
            self.reporter.event(f"trial {trial.trial_id} failed ({message}); retrying from its latest checkpoint")
            self.queue.append(trial)
            return
        self._end_trial(trial, TrialStatus.ERROR, traceback=tb, error=decision.error)
        if self.rc.failure_config.fail_fast and not self.fail_fast_error:  # type: ignore[union-attr]
            self._fail_experiment(f"trial {trial.trial_id} failed: {message}", prefix="fail_fast: ")

    def _fail_experiment(self, message: str, prefix: str = "") -> None:
        """End the experiment because of one trial's failure; the others stay restorable."""
        self.fail_fast_error = message
        self.reporter.say(f"tuneplat: {prefix}{message.rstrip('. ')}; ending the experiment")
        self._move(ExperimentPhase.FAILING)  # leave the others restorable
        while self.queue:  # (restorable: they stay PENDING)
            self.queue.popleft()
        for tid in list(self.running):
            self.executor.abort(tid, "the experiment is ending: another trial failed")

    def _end_trial(self, trial: Trial, status: TrialStatus, *, error: str | None = None,
                   traceback: str | None = None, stop_reason: str | None = None, resumable: bool = False,
                   pruned: bool | None = None) -> None:
        """The trial reaches ``status`` (``stop_reason`` None: the one it has)."""
        if (status is TrialStatus.TERMINATED and not trial.results and stop_reason is None
                and not trial.stop_reason):  # never TERMINATED with neither a result nor a reason
            stop_reason = "it reported no result: its function returned before calling report()"
        self._write(ev.TrialEnd(
            trial_id=trial.trial_id, status=status.value, error=error, traceback=traceback,
            stop_reason=stop_reason if stop_reason is not None else trial.stop_reason, iteration=trial.iteration,
            error_kind=trial.error_kind if status is TrialStatus.ERROR else None,
            resumable=True if resumable else None, pruned=pruned))
        if status is TrialStatus.ERROR:
            error_file = self.trial_files.write_error(trial)
            self.scheduler.on_trial_error(trial.trial_id)
            info = {"oom": True} if trial.error_kind == OOM and _takes_info(self.searcher) else {}
            self.searcher.on_trial_complete(trial.trial_id, result=copy_result(trial.last_result) or None, error=True,
                                            **info)
            self.reporter.trial_error(trial, error_file)
        elif trial.resumable:
            pass  # not complete: the searcher and scheduler keep it as it was, for a restore
        else:
            self.scheduler.on_trial_complete(trial.trial_id, trial.last_result or None)
            info = {"pruned": True} if trial.stopped_by_scheduler else {}
            self.searcher.on_trial_complete(trial.trial_id, result=copy_result(trial.last_result) or None,
                                            error=False, **info)
        self.hooks.trial_complete(trial)

    def _teardown_all(self, reason: str) -> None:
        """End every running group (Ctrl-C, SIGTERM, an error in the loop) and wait for them."""
        if not self.phase.leaves_restorable:
            self._move(ExperimentPhase.INTERRUPTED)
        for event in self.executor.teardown(reason):
            if isinstance(event, Ended):
                self._guarded(self._on_ended, event)
            elif isinstance(event, RankFailed):
                self._guarded(self._on_event, event)
        for tid in list(self.running):
            self.running.pop(tid)
            self._write(ev.TrialRequeued(trial_id=tid, reason=_INTERRUPTED))


#: why trials of an interrupted experiment go back to the queue (a restore resumes them)
_INTERRUPTED = "the experiment was interrupted"


def _takes_info(searcher: Any) -> bool:
    """Whether the searcher's ``on_trial_complete`` takes extra keyword information (``**info``)."""
    import inspect

    try:
        params = inspect.signature(searcher.on_trial_complete).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)

