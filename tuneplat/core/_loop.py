"""The tuner's loop: executor events in, trial transitions and decisions out.

The loop owns the trials, the searcher, the scheduler, the stop rules and the
journal; a :class:`~tuneplat.execution.TrialExecutor` owns whatever runs the
trials (Dask worker groups, or virtual time). One pass of the loop:

1. carry out the scheduler's queued actions (stop, resume, PBT's clone);
2. start what fits (queued trials first, then new suggestions);
3. wait for the executor's events and turn each into a transition:
   ``Reported`` → stop rules and scheduler → a decision answered at once;
   ``Ended`` → TERMINATED / PAUSED / retried / ERROR; ``Starved`` → end.

Any exception in the loop ends the experiment as errored: every group is torn
down, the journal records ``experiment_end: "error"`` with the traceback,
callbacks (MLflow) see ``"error"``, everything is closed, and the folder stays
restorable; :meth:`TuneLoop.run` then raises :class:`TuneError`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import traceback
from typing import Any

from schedulers import Decision

from ..execution._executor import (
    Ended,
    Event,
    ExecutorContext,
    Preempted,
    RankFailed,
    RankStats,
    Reported,
    Saved,
    StacksCaptured,
    Started,
    Starved,
)
from ..storage._storage import checkpoint_name
from ..tracking._progress import ProgressReporter
from . import _events as ev
from ._commits import COMMIT_POLL_S
from ._endings import _Endings
from ._journal import Journal, JournalDiskFull, to_jsonable
from ._launch import _Launching
from ._loop_state import _LoopState
from ._phase import ExperimentPhase
from ._search import restore_algorithms, set_objective
from ._state import apply
from ._stop import MetricCheck
from ._trial import Trial, TrialStatus
from ._view import copy_result

logger = logging.getLogger("tuneplat")

__all__ = ["TuneError", "TuneLoop"]


class TuneError(RuntimeError):
    """The experiment could not go on (an error in the tuner, fail_fast='raise', a misspelt metric)."""


class TuneLoop(_Launching, _Endings, _LoopState):
    """Runs one experiment to the end (see the module docstring).

    It owns the trials and their transitions and is the journal's one writer; it gives checkpoint commits
    (:class:`~tuneplat.core._commits.CheckpointCommits`), the scheduler's decisions and actions
    (:class:`~tuneplat.core._actions.SchedulerActions`), trial shapes (:class:`~tuneplat.core._shapes.TrialShapes`)
    and the callbacks' hooks (:class:`~tuneplat.core._callbacks.Callbacks`) to objects of their own. Callbacks
    receive :attr:`view` (a read-only :class:`~tuneplat.core._view.TunerView`), never the loop.
    """

    # ------------------------------------------------------------------ setup
    def _setup_search(self) -> None:
        self.metric, self.mode = set_objective(
            self.scheduler, self.searcher, self.metric, self.mode, self.param_space, num_samples=self.tc.num_samples,
            seed=self.tc.seed, experiment_dir=self.experiment_dir, resume=self.resume)
        self.checks = MetricCheck(self.metric, self.stop_rules.stop_keys)
        self.reporter = ProgressReporter(self.metric, self.mode, self.rc.verbose, self.rc.progress_interval_s)
        self.reporter.attach(self)
        if self.trials:  # a restore: rebuild searcher and scheduler state from the trials in the journal
            self._exp_tag = self.trials[0].trial_id.rsplit("_", 1)[0]
            self.suggested = len(self.trials)
            for t in self.trials:
                if t.recovered_result:  # its result line was lost with the last tuner: journal it now
                    self._write(ev.Result(trial_id=t.trial_id, result=to_jsonable(t.results[-1])))
            self.queue.extend(restore_algorithms(self.trials, self.searcher, self.scheduler))
        bind = getattr(self.scheduler, "bind_tuner", None)  # (ResourceChangingScheduler: reads the trials, cluster)
        if callable(bind):
            bind(self.view)

    # ------------------------------------------------------------------ run
    def run(self) -> None:
        """Run the experiment; raises :class:`TuneError` if the tuner itself failed (the folder stays restorable)."""
        os.makedirs(self.experiment_dir, exist_ok=True)
        self.journal = Journal(os.path.join(self.experiment_dir, "journal.jsonl"))
        old_handler = None
        try:
            self._setup_search()
            self.executor.setup(ExecutorContext(
                trainable=self.trainable, experiment_name=self.experiment_name, experiment_dir=self.experiment_dir,
                request=self.request, world_size=self.world_size, placement_strategy=self.sc.placement_strategy,
                backend=self.sc.backend, metric=self.metric, storage_fs=self.storage_fs,
                raw_trainable=self.raw_trainable, say=self.reporter.say, min_world_size=self.min_world_size,
                grow_interval_s=self.sc.elastic_resize_monitor_interval_s, trial_io=self.trial_io,
                scaling=self.scaling))
            if self.tc.time_budget_s:
                self._deadline = self.executor.now() + self.tc.time_budget_s
            if self.executor.dashboard_link:
                self.reporter.say(f"tuneplat: Dask dashboard at {self.executor.dashboard_link}")
            self.reporter.say(f"tuneplat: experiment folder {self.experiment_dir}")
            self._write(ev.Experiment(
                name=self.experiment_name, metric=self.metric, mode=self.mode, num_samples=self.tc.num_samples,
                scheduler=to_jsonable(self.scheduler.describe()), searcher=type(self.searcher).__name__,
                resume=self.resume, resume_errored=self.reopen.get("resume_errored") or None,
                restart_errored=self.reopen.get("restart_errored") or None,
                scaling={"num_workers": self.world_size, "resources_per_worker": to_jsonable(self.request),
                         **({"min_workers": self.min_world_size} if self.min_world_size is not None else {}),
                         **({"trainer": True} if self.trainer else {}),
                         **({"placement_strategy": self.sc.placement_strategy}
                            if self.sc.placement_strategy != "PACK" else {})}))
            self.hooks.experiment_start()
            if threading.current_thread() is threading.main_thread():
                old_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
            self._looping = True
            self._loop()
        except KeyboardInterrupt:
            self._move(ExperimentPhase.INTERRUPTED)
            logger.warning("tuneplat: interrupted; ending running trials")
            self._guarded(self._teardown_all, "experiment interrupted")
        except Exception as exc:  # noqa: BLE001 - any error of the tuner ends the experiment as errored
            self.error = exc
            self._move(ExperimentPhase.ERRORED)  # what did not finish stays restorable
            self._guarded(self._teardown_all, f"the tuner failed: {type(exc).__name__}: {exc}")
        except BaseException as exc:
            # the trial that runs this (nested) experiment ends: the scheduler stopped it (from its report() in a
            # TuneReportCallback), its group was aborted, or it goes back to the queue; end our groups, then unwind
            self._move(ExperimentPhase.INTERRUPTED)
            self._guarded(self._teardown_all, f"the enclosing trial ended ({type(exc).__name__})")
            raise
        finally:
            if old_handler is not None:
                signal.signal(signal.SIGTERM, old_handler)
            self._close()
        if self.error is not None and not self._looping:
            raise self.error  # a set-up error (a space, a placement that can never fit): the user's to fix
        if self.error is not None:
            raise TuneError(
                f"the experiment failed in the tuner: {type(self.error).__name__}: {self.error}. Every trial was "
                f"ended; finished results are kept, and the experiment can be continued with "
                f"Tuner.restore({self.experiment_dir!r}, trainable) once the cause is fixed.") from self.error

    def _end_unfinished(self) -> None:
        """A failed experiment (fail_fast, a misspelt metric, no worker fits): one final state for every trial.

        Trials it stopped end TERMINATED with the reason (a restore resumes them),
        never left RUNNING or PENDING in the journal while nothing runs.
        """
        if self.status != "failed" or self.journal is None:
            return
        why = (self.fail_fast_error or "the experiment failed").rstrip(". ")
        for t in self.trials:
            if t.status.is_finished() or t.trial_id in self.running:
                continue
            self._end_trial(t, TrialStatus.TERMINATED, resumable=True, stop_reason=(
                f"stopped when the experiment ended ({why}); Tuner.restore resumes it"
                if t.attempts else f"not started: the experiment ended ({why}); Tuner.restore runs it"))

    def _close(self) -> None:
        try:
            self._close_files()
        finally:  # whatever a callback raised on the way, the executor (and a cluster it started) is closed
            self._guarded(self.executor.close)

    def _close_files(self) -> None:
        self._guarded(self._end_unfinished)
        status = self.status
        lag = self.hooks.backlog_s()
        if lag >= 1.0:
            self.reporter.say(f"tuneplat: trials ended after {self.reporter.elapsed_text()}; writing what is left "
                              f"to MLflow (~{lag:.0f}s)")
        tb = "".join(traceback.format_exception(self.error)) if self.error is not None else None
        self.hooks.experiment_end(status)
        journal = self.journal
        if journal is not None:
            end = ev.ExperimentEnd(status=status, error=f"{type(self.error).__name__}: {self.error}" if tb else None,
                                   traceback=tb or None)
            self._guarded(self._write, end)
        self._guarded(self.commits.close)  # deletions (and commits of an ended loop) finish
        self._guarded(self.reporter.finish, self.trials, status)
        self.trial_files.close_all(self._guarded)
        if journal is not None:
            try:
                journal.close()
            except JournalDiskFull as exc:  # its disk stayed full: the experiment ends with that error, resumable
                if self.error is None:
                    self.error = exc
                    self._move(ExperimentPhase.ERRORED)
            except Exception:  # noqa: BLE001
                logger.warning("tuneplat: closing the journal failed", exc_info=True)
        self._guarded(self.searcher.close)
        if self.syncer is not None:
            self._guarded(self._final_sync)

    def _final_sync(self) -> None:
        assert self.syncer is not None
        error = self.syncer.close()
        if error:
            logger.warning("tuneplat: could not upload the experiment's files to %s (%s); they are complete in %s. "
                           "Copy that folder there, or run Tuner.restore on it.", self.syncer.remote_dir, error,
                           self.experiment_dir)

    def _loop(self) -> None:
        while True:
            self.actions.drain()
            if not self.stopping:
                self._launch_what_fits()
            self._sync_files()
            self.reporter.maybe_report(self.trials)
            if self._finished():
                break
            for event in self.executor.poll(self._next_timeout()):
                self._on_event(event)
            if self.commits.in_flight:
                self._finish_commits()
            self._check_deadlines()

    def _on_event(self, event: Event) -> None:
        if self.commits.hold(event):  # its trial's checkpoint is being committed: in order, after it
            return
        if isinstance(event, Reported):
            self.shapes.gpu_auto.observe(event.trial_id, event.result)  # (a trial sized by GPU_memory="auto" teaches)
            self._on_step(event)
        elif isinstance(event, Saved):  # a checkpoint asked for by answer(save=True)
            self.commits.saved(self.by_id[event.trial_id], event.iteration)
        elif isinstance(event, Ended):
            self._on_ended(event)
        elif isinstance(event, Started):
            run = self.running.get(event.trial_id)
            if run is not None:
                run.started = True
        elif isinstance(event, RankFailed):
            self._write(ev.RankFailure(trial_id=event.trial_id, attempt=event.attempt,
                                               message=event.message))
        elif isinstance(event, Preempted):
            self._write(ev.PreemptNotice(trial_id=event.trial_id, host=event.host, message=event.message))
            self.reporter.event(f"trial {event.trial_id}: host {event.host} is leaving ({event.message}); "
                                "checkpointing, then resizing")
        elif isinstance(event, Starved):
            self._starve(event.message)
        elif isinstance(event, RankStats):
            self._on_rank_stats(event)
        elif isinstance(event, StacksCaptured):
            self._on_stacks(event)

    def _on_rank_stats(self, event: RankStats) -> None:
        """System metrics of a trial's ranks: to the callbacks (MLflow's system metrics), to the journal rarely."""
        trial = self.by_id.get(event.trial_id)
        if trial is None:
            return
        self.hooks.system_metrics(trial, event.system, event.timestamp)
        last = self._stats_journaled.get(event.trial_id, 0.0)
        if event.timestamp - last >= self._stats_journal_s:
            self._stats_journaled[event.trial_id] = event.timestamp
            self._write(ev.SystemMetrics(trial_id=event.trial_id, timestamp=event.timestamp,
                                                 ranks={str(k): v for k, v in event.system.items()}))

    def _on_stacks(self, event: StacksCaptured) -> None:
        """Stacks of a trial's ranks were captured (a hang, or ``tuneplat stacks``): journal them, tell MLflow."""
        self._write(ev.Stacks(trial_id=event.trial_id, path=event.path, summary=event.summary,
                                      reason=event.reason))
        trial = self.by_id.get(event.trial_id)
        if trial is not None:
            self.hooks.stacks(trial, event.path, event.summary, event.reason)

    def _finished(self) -> bool:
        if self.running or (self.queue and not self.stopping):
            return False  # (when stopping, queued trials stay PENDING: restorable)
        if not (self.searcher_done or self.stopping):
            return False
        if not self.search_finished_told:
            self.search_finished_told = True
            self.scheduler.on_search_finished()
            self.actions.drain()
            if self.queue:
                return False
        paused = [t for t in self.trials if t.status == TrialStatus.PAUSED and not self.interrupted]
        for t in paused:  # nothing will ever resume them
            self._end_trial(t, TrialStatus.TERMINATED, stop_reason=t.stop_reason or "left paused when the experiment ended")
        return True

    def _next_timeout(self) -> float | None:
        now = self.executor.now()
        deadlines = []
        if self.reporter.verbose:
            deadlines.append(now + max(0.0, self.reporter.due() - time.monotonic()))
        if self._deadline is not None and not self.stopping:
            deadlines.append(self._deadline)
            if self._budget_note:
                deadlines.append(now + 0.5)  # the mirror's backlog may have shrunk: launch again
        assert self.journal is not None
        if self.journal.dirty:
            deadlines.append(now + self.journal.sync_interval_s)
        if self.stop_rules.has_stop_all and not self.stopping:
            deadlines.append(now + 1.0)  # e.g. a TimeoutStopper: ask it even while no trial reports
        deadlines.extend(r.abort_at for r in self.running.values() if r.abort_at is not None)
        if self.commits.in_flight:
            deadlines.append(now + COMMIT_POLL_S)
        if not deadlines:
            return 5.0
        return max(0.0, min(deadlines) - now)

    def _check_deadlines(self) -> None:
        now = self.executor.now()
        if self._deadline is not None and now >= self._deadline and not self.stopping:
            self.reporter.say(f"tuneplat: time budget of {self.tc.time_budget_s}s reached; stopping trials.")
            self._write(ev.TimeBudgetReached())
            self._stop_everything("time budget reached")
        self._check_stop_all()
        for tid, run in list(self.running.items()):
            if run.abort_at is not None and now >= run.abort_at:
                run.abort_at = None  # a trial that reports nothing (one long epoch, a hung loop): end it now
                self.executor.abort(tid, self.by_id[tid].stop_reason or run.stop_reason or "stopped")

    def _stop_everything(self, reason: str) -> None:
        """Stop running trials at their next report (or abort them after a grace); end queued ones."""
        self._move(ExperimentPhase.STOPPING)
        now = self.executor.now()
        for tid, run in self.running.items():
            run.stop_requested = Decision.STOP
            run.stop_reason = run.stop_reason or reason
            if not run.started:
                self.executor.abort(tid, reason)
            elif run.decision is None:
                run.abort_at = now + self.stop_grace_s
        while self.queue:
            t = self.queue.popleft()
            self._end_trial(t, TrialStatus.TERMINATED, stop_reason=f"{reason} before it could resume")

    def _check_stop_all(self) -> bool:
        """``RunConfig(stop=stopper)``: the stopper's ``stop_all()`` ends the experiment (as in Ray)."""
        if self.stopping or not self.stop_rules.stop_all():
            return False
        name = self.stop_rules.name()
        self.reporter.say(f"tuneplat: {name}.stop_all() is true; stopping every trial.")
        self._write(ev.StopAll(stopper=name))
        self._stop_everything(f"{name}.stop_all()")
        return True

    def _starve(self, message: str) -> None:
        """No worker can take a trial and nothing runs that could free one: end, saying why."""
        self.reporter.say(f"tuneplat: {message}; ending the experiment (restorable)")
        self._write(ev.Starved(message=message))
        self._move(ExperimentPhase.FAILING)  # what did not run stays restorable
        self.fail_fast_error = message
        # a trial that ran and waits to be placed again (its worker or host was lost and not replaced): it
        # failed, for this reason; not PENDING as if it had never started
        for trial in [t for t in self.queue if t.num_failures > 0]:
            self.queue.remove(trial)
            self._end_trial(trial, TrialStatus.ERROR,
                            error=f"its worker was lost and it could not be placed again: {message}")

    def _sync_files(self) -> None:
        journal = self.journal
        assert journal is not None
        if journal.sync_due():
            self.trial_files.flush()
            journal.sync()
        if self.syncer is not None:
            self.syncer.maybe_sync()

    # ------------------------------------------------------------------ results and decisions
    def _on_step(self, event: Reported) -> None:
        trial = self.by_id[event.trial_id]
        if self.commits.submit(trial, event):  # a remote commit: recorded when done (_finish_commits)
            return
        path = self.commits.commit(trial, event.iteration) if event.staged else None
        if event.staged and path is None:  # the ranks staged it where they run; the tuner does not see it there
            self._checkpoint_unseen(trial, event)
            return
        self._record_step(event, path)

    def _checkpoint_unseen(self, trial: Trial, event: Reported) -> None:
        """No filesystem shared by the tuner and the workers: fail now, never a silent ``checkpoint=None``."""
        unseen = (f"rank 0 on host {event.result.get('hostname', '?')} saved checkpoint "
                  f"{checkpoint_name(event.iteration)} under {trial.path}, but the tuner (on {socket.gethostname()}) "
                  "cannot see it there: RunConfig(storage_path=...) must be a filesystem shared by the tuner "
                  "and every Dask worker (NFS, a parallel filesystem), or object storage such as "
                  "'s3://bucket/results' (docs/multi-host.md)")
        self.executor.fail(trial.trial_id, unseen)
        self._no_retry.add(trial.trial_id)  # every trial would lose its checkpoints the same way: end the experiment
        self._fail_experiment(f"trial {trial.trial_id} failed: {unseen}")

    def _finish_commits(self) -> None:
        """Record the steps whose remote commit is done, then the events their trials sent meanwhile."""
        for event, path, failure, later in self.commits.finished():
            if failure is not None:  # the trial fails (and is retried); the loop goes on
                self._write(ev.TrialWarning(trial_id=event.trial_id, message=failure))
                self._record_step(event, None)
                self.executor.fail(event.trial_id, failure)
            else:
                self._record_step(event, path)
            for e in later:
                self._on_event(e)

    def _record_step(self, event: Reported, path: str | None) -> None:
        assert self.journal is not None
        trial = self.by_id[event.trial_id]
        run = self.running[event.trial_id]
        result, iteration = event.result, event.iteration
        # Ray's checkpoint_dir_name: the folder of the checkpoint this result carried (None without one)
        result["checkpoint_dir_name"] = os.path.basename(path.rstrip("/")) if event.staged and path else None
        result["experiment_tag"] = trial.experiment_tag  # (Ray's; computed once per trial, at its creation)
        if event.staged:
            if path is not None:
                self.commits.record(trial, iteration, result, path)
        if run.resumed_from_clone:
            run.resumed_from_clone = False  # (its iterations may go back: they continue the source's)
        elif trial.results and trial.results[-1].get("training_iteration", 0) >= iteration:
            self._supersede(trial, iteration - 1)
        try:
            line = json.dumps(result)
        except (TypeError, ValueError):
            line = json.dumps(to_jsonable(result))
        self.journal.append_line(f'{{"event": "result", "trial_id": "{trial.trial_id}", "result": {line}}}')
        apply(self.state, ev.Result(trial_id=trial.trial_id, result=result))  # (journaled just above, on the hot path)
        self.trial_files.write_result(trial, line)
        problem, misspelt = self.checks.problem(trial.trial_id, result)
        if problem:
            self.executor.fail(trial.trial_id, problem)
            if misspelt:  # every trial would make this mistake: end the experiment now, without retries
                self._no_retry.add(trial.trial_id)
                self._fail_experiment(f"trial {trial.trial_id} failed: {problem}")
            return
        for m, v in self.checks.non_finite(result):
            logger.warning("tuneplat: trial %s reported non-finite %s=%r at iteration %s; schedulers count it "
                           "as the worst value", trial.trial_id, m, v, result.get("training_iteration"))
            self._write(ev.TrialWarning(trial_id=trial.trial_id, message=f"non-finite metric {m}={v!r}"))
        # Ray's order: the scheduler decides, then the searcher hears the result, then the callbacks; the searcher
        # and the callbacks get one copy of it, nested values too, and callbacks a read-only trial whose config is
        # their own copy (core/_view.py), so an edit there changes neither the decision, the journal nor the best
        # trial (as in Ray, a callback sees what the searcher left in it)
        try:
            decision, reason, pruned = self.actions.decide(trial, run, result)
        except TypeError as exc:  # e.g. a non-numeric time_attr value: this trial fails (not the experiment)
            self._no_retry.add(trial.trial_id)  # (its next result would fail the same way)
            self.executor.fail(trial.trial_id, f"TypeError: {exc}")
            return
        seen = copy_result(result)
        self.searcher.on_trial_result(trial.trial_id, seen)
        self.hooks.trial_result(trial, seen)
        if self.hooks.wants_group_reports:  # (Ray V2's UserCallback: every rank's metrics)
            others = (event.rank_metrics or [None])[1:]
            self.hooks.group_report(trial, copy_result(result),
                                    [copy_result(result), *(copy_result(m) if m else {} for m in others)])
        if decision is not Decision.CONTINUE:
            run.decision = decision
            run.abort_at = None
            self._write(ev.Decision(
                trial_id=trial.trial_id, iteration=iteration, decision=decision.value, reason=reason,
                # cut short by the scheduler (not its max_t, not a stop rule)?
                pruned=pruned if decision is Decision.STOP else None))
            self.reporter.event(f"trial {trial.trial_id}: {decision.value} at iteration {iteration} ({reason})")
        # a callback may still ask for a checkpoint of this step (Ray's result[SHOULD_CHECKPOINT] = True in
        # on_trial_result: its custom_checkpointing_with_callback example); that key of its copy is read back
        save = bool(result.get("should_checkpoint") or seen.get("should_checkpoint"))
        if event.staged and path is not None:
            # a checkpoint is durable once report() returns (as in Ray): its journal line is on disk before the
            # answer, so a driver killed now resumes from it (job-level restarts, Tuner.restore)
            self.journal.sync(force=True)
        self.executor.answer(trial.trial_id, decision, save=save)

    def _write(self, event: ev.Event) -> None:
        """Journal ``event``, then apply it to the state: the one writer (the loop's helpers record through it)."""
        assert self.journal is not None
        if event.time is None:  # (stamped once, on the event the loop just built, before anything reads it)
            object.__setattr__(event, "time", time.time())
        self.journal.append(event)
        apply(self.state, event)

    def _record(self, handed_back: Any) -> None:
        """What a callback's hook returned: the MLflow runs made for the experiment and its trials.

        The loop alone writes the journal and the trials: it sets ``trial.mlflow_run_id`` and journals each.
        """
        if not handed_back:
            return
        for event in handed_back:
            if not isinstance(event, (ev.MlflowRun, ev.MlflowParentRun)):
                continue
            if self.journal is not None:
                self._write(event)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
