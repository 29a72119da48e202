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

import collections
import copy
import dataclasses
import json
import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from schedulers import Decision, FIFOScheduler, TrialScheduler

from .._config import FailureConfig, RunConfig, ScalingConfig, TuneConfig
from .._settings import env_seconds
from ..execution._executor import (
    Ended,
    Event,
    ExecutorContext,
    Outcome,
    Preempted,
    RankFailed,
    RankStats,
    Reported,
    Saved,
    StacksCaptured,
    Started,
    Starved,
    TrialExecutor,
    TrialSpec,
)
from ..execution._failure import ERROR, OOM, Failure
from ..search._searcher import BasicVariantGenerator, Searcher
from ..storage._storage import CheckpointStore, ExperimentSync, checkpoint_name
from ..tracking._progress import ProgressReporter
from . import _events as ev
from ._actions import SchedulerActions
from ._callbacks import Callbacks
from ._commits import COMMIT_POLL_S, CheckpointCommits, TrialFiles
from ._failure import End, FailurePolicy, RetrySmaller
from ._journal import Journal, JournalDiskFull, pickle_hex, to_jsonable
from ._phase import ExperimentPhase
from ._search import restore_algorithms, set_objective
from ._shapes import ShapeRefused, TrialShapes
from ._state import ExperimentState, apply
from ._stop import MetricCheck, StopRules
from ._trial import RunState, Trial, TrialStatus
from ._view import TunerView

logger = logging.getLogger("tuneplat")

__all__ = ["TuneError", "TuneLoop"]


class TuneError(RuntimeError):
    """The experiment could not go on (an error in the tuner, fail_fast='raise', a misspelt metric)."""


class TuneLoop:
    """Runs one experiment to the end (see the module docstring).

    It owns the trials and their transitions and is the journal's one writer; it gives checkpoint commits
    (:class:`~tuneplat.core._commits.CheckpointCommits`), the scheduler's decisions and actions
    (:class:`~tuneplat.core._actions.SchedulerActions`), trial shapes (:class:`~tuneplat.core._shapes.TrialShapes`)
    and the callbacks' hooks (:class:`~tuneplat.core._callbacks.Callbacks`) to objects of their own. Callbacks
    receive :attr:`view` (a read-only :class:`~tuneplat.core._view.TunerView`), never the loop.
    """

    def __init__(self, *, trainable: Any, param_space: Mapping[str, Any], tune_config: TuneConfig,
                 run_config: RunConfig, scaling_config: ScalingConfig, experiment_dir: str, experiment_name: str,
                 trainable_name: str, executor: TrialExecutor, store: CheckpointStore,
                 callbacks: list[Any] | None = None, trials: list[Trial] | None = None, resume: bool = False,
                 syncer: ExperimentSync | None = None, raw_trainable: Any = None,
                 trial_resources: Callable[[Mapping[str, Any]], ScalingConfig] | None = None,
                 trial_io: Any = None, reopen: Mapping[str, bool] | None = None) -> None:
        self.trainable = trainable
        self.trial_io = trial_io  # each trial's working directory and captured output (execution/_trial_io.py)
        self.raw_trainable = raw_trainable
        self.executor = executor
        self.store = store
        self.storage_fs = store.filesystem
        self.syncer = syncer
        self.param_space = dict(param_space or {})
        self.tc = tune_config
        self.rc = run_config
        self.sc = scaling_config
        self.experiment_dir = experiment_dir
        self.experiment_name = experiment_name
        self.trainable_name = trainable_name
        self.callbacks = list(callbacks or [])
        self.metric: Any = tune_config.metric
        self.mode: Any = tune_config.mode
        self.request = scaling_config.per_worker()
        self.world_size = scaling_config.max_workers
        #: each trial's (resources per rank, ranks): its own (per-trial resources), GPU_memory="auto" sized
        self.shapes = TrialShapes(self.request, self.world_size, trial_resources, executor)
        #: an elastic group's fewest ranks (ScalingConfig(num_workers=(min, max))); None for fixed-size groups
        self.min_world_size = scaling_config.min_workers if scaling_config.elastic else None
        self._resize_reasons: dict[str, tuple[int | None, str]] = {}  # trial id -> (old size, why) until it restarts
        self.resume = resume
        #: a restore's resume_errored/restart_errored (journaled with the experiment event, which reopens the trials)
        self.reopen = dict(reopen or {})

        self.searcher: Searcher = tune_config.search_alg or BasicVariantGenerator()
        self.scheduler: TrialScheduler = tune_config.scheduler or FIFOScheduler()
        self.trials: list[Trial] = list(trials or [])
        #: the experiment's state: :func:`~tuneplat.core._state.apply` of each event the loop journals is its
        #: only writer (a restore's replay applies the same events), so the loop never assigns a trial field
        self.state = ExperimentState(trials=self.trials, experiment_dir=experiment_dir,
                                     storage_fs=store.filesystem, trusted=True, strict=True)
        self.by_id: dict[str, Trial] = self.state.by_id
        self._no_retry: set[str] = set()  # trials whose failure a retry cannot fix (a misspelt metric)
        self.view = TunerView(self)  # what callbacks see (read-only)
        #: every hook on every callback, with the view; what hooks hand back is recorded by the loop
        self.hooks = Callbacks(self.callbacks, self.view, self._record)
        self.queue: collections.deque[Trial] = collections.deque()
        self.running: dict[str, RunState] = {}
        self.searcher_done = False
        self.searcher_blocked = False
        self.search_finished_told = False
        self.suggested = 0
        #: where the experiment is (one state machine: see core/_phase.py)
        self.phase = ExperimentPhase.RUNNING
        self.fail_fast_error: str | None = None
        self.error: BaseException | None = None
        self._exp_tag = os.urandom(3).hex()[:5]
        self.stop_rules = StopRules(run_config.stop)
        #: what follows a failed attempt, within FailureConfig's three budgets
        self.failure_policy = FailurePolicy(run_config.failure_config or FailureConfig())
        #: checkpoint commits, retention (remote stores: on I/O threads) and each trial's result.json
        self.commits = CheckpointCommits(store, run_config.checkpoint_config, self._write, self.hooks.checkpoint)
        self.trial_files = TrialFiles()
        #: the scheduler's decisions on results and its queued actions (stop, resume, PBT's exploit)
        self.actions = SchedulerActions(
            scheduler=self.scheduler, stop_rules=self.stop_rules, trials=self.by_id, running=self.running,
            queue=self.queue, store=store, record=self._write, end_trial=self._end_trial,
            check_stop_all=self._check_stop_all, on_exploit=self.hooks.trial_exploit)
        self.checks = MetricCheck(self.metric, self.stop_rules.stop_keys)
        self._deadline: float | None = None  # set once the cluster is up: the budget is for trials
        self._budget_note = False
        self.reporter = ProgressReporter(self.metric, self.mode, run_config.verbose, run_config.progress_interval_s)
        self.stop_grace_s = env_seconds("TUNEPLAT_STOP_GRACE_S", 5)  # a stopped trial that does not report
        self.journal: Journal | None = None
        self._stats_journaled: dict[str, float] = {}  # trial id -> when its system metrics were last journaled
        # system metrics reach the journal at most this often per trial (every sample goes to the callbacks/MLflow)
        self._stats_journal_s = env_seconds("TUNEPLAT_SYSTEM_METRICS_JOURNAL_S", 60)
        self._looping = False
        #: where a re-run moved the previous run of this experiment (the MLflow mirror renames its parent run)
        self.previous_run_dir: str | None = None

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
                grow_interval_s=self.sc.elastic_resize_monitor_interval_s, trial_io=self.trial_io))
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
                         **({"min_workers": self.min_world_size} if self.min_world_size is not None else {})}))
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

    @property
    def stopping(self) -> bool:
        """No new trial starts (and no failed one is retried): the phase is past RUNNING."""
        return not self.phase.starts_trials

    @property
    def interrupted(self) -> bool:
        """Trials that did not finish go back to the queue, for a restore."""
        return self.phase.leaves_restorable

    @property
    def status(self) -> str:
        """How the experiment ends (``experiment_end``'s status)."""
        return self.phase.status

    def _move(self, phase: ExperimentPhase) -> None:
        """The experiment goes to ``phase`` (:class:`~tuneplat.core._phase.InvalidTransition` if it may not)."""
        self.phase = self.phase.to(phase)

    def _guarded(self, fn: Any, *args: Any) -> None:
        """Run a clean-up step; its own failure is logged, never raised over the first error."""
        try:
            fn(*args)
        except Exception:  # noqa: BLE001
            logger.warning("tuneplat: %s failed while ending the experiment", getattr(fn, "__name__", fn),
                           exc_info=True)

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

    # ------------------------------------------------------------------ launching
    def _new_trial(self, config: dict[str, Any]) -> Trial:
        index = len(self.trials)
        trial_id = f"{self._exp_tag}_{index:05d}"
        name = f"{self.trainable_name}_{trial_id}"
        path = os.path.join(self.experiment_dir, name)
        # what the name creators see (the trial exists once its trial_add event is applied)
        draft = Trial(trial_id=trial_id, config=config, path=path, name=name, trainable_name=self.trainable_name)
        if self.tc.trial_name_creator is not None:
            name = str(self.tc.trial_name_creator(draft))
        if self.tc.trial_dirname_creator is not None:
            dirname = str(self.tc.trial_dirname_creator(draft)).replace(os.sep, "_")
            path = os.path.join(self.experiment_dir, dirname)
            path = path if not os.path.exists(path) else f"{path}_{trial_id}"
        os.makedirs(path, exist_ok=True)
        self.trial_files.write_params(path, config)
        self._write(ev.TrialAdd(trial_id=trial_id, config=to_jsonable(config), path=path, name=name,
                                config_pickle=pickle_hex(config), trainable_name=self.trainable_name or None,
                                config_object=config))
        trial = self.by_id[trial_id]
        self.scheduler.on_trial_add(trial_id, config)
        self.hooks.trial_add(trial)
        return trial

    def _suggest(self) -> Trial | None:
        if self.searcher_done or self.searcher_blocked:
            return None
        limit = self.tc.num_samples
        if not isinstance(self.searcher, BasicVariantGenerator) and limit != -1 and self.suggested >= limit:
            self.searcher_done = True
            return None
        config = self.searcher.suggest(f"{self._exp_tag}_{len(self.trials):05d}")
        if config is None:
            self.searcher_blocked = True
            return None
        if config == Searcher.FINISHED or not isinstance(config, dict):
            self.searcher_done = True
            return None
        self.suggested += 1
        return self._new_trial(config)

    def _searcher_exhausted(self) -> bool:
        """The searcher will suggest nothing more, known without asking it: no room is waited for a trial that will
        never come (a cluster that lost the room for the experiment's shape after the last trial is not starved)."""
        limit = self.tc.num_samples
        if isinstance(self.searcher, BasicVariantGenerator):
            done = self.searcher.is_finished()
        else:
            done = limit != -1 and self.suggested >= limit
        if done:
            self.searcher_done = True
        return done

    def _budget_spent(self) -> bool:
        """Starting another trial would carry the end past the time budget: the mirror's backlog fills the rest."""
        if self._deadline is None:
            return False
        lag = self.hooks.backlog_s()
        spent = self.executor.now() + lag >= self._deadline
        if spent and not self._budget_note:
            self._budget_note = True
            self.reporter.say(f"tuneplat: not starting more trials for now: the MLflow mirror has ~{lag:.0f}s of runs "
                              "to write, and the time budget's end waits for it.")
        return spent

    def _launch_what_fits(self) -> None:
        """Start queued trials, then new ones, while the executor has room for each (chosen before reserving)."""
        limit = self.tc.max_concurrent_trials
        while True:
            if not self.queue and (self.searcher_done or self.searcher_blocked or self._searcher_exhausted()):
                self._set_waiting(0)
                return
            if self._budget_spent():
                return
            if limit is not None and self.executor.running() >= limit:
                self._set_waiting(0)  # (none of them could start now anyway)
                return
            self._set_waiting(self._could_start() - 1)  # (elastic groups: the others that wait for room)
            if self.queue:  # first in line: it waits for room of its own shape (no overtaking)
                trial = self.queue[0]
                shape = self._shape(trial)
                if shape is None:
                    self.queue.popleft()
                    continue
                reservation = self.executor.reserve(*shape)
                if reservation is None:
                    self._set_waiting(self._could_start())
                    return
                self.queue.popleft()
                self._start(trial, reservation)
                continue
            if self.shapes.gpu_auto.wants(self.request):  # GPU_memory="auto": its room depends on the trial's figure
                new = self._suggest()
                if new is not None:
                    self.queue.appendleft(new)  # it waits, first in line, for room of its figure
                continue
            reservation = self.executor.reserve()  # the experiment's shape: no suggestion without room
            if reservation is None:
                self._set_waiting(self._could_start())
                return
            new = self._suggest()
            shape = self._shape(new) if new is not None else None
            if new is None or shape is None:
                self.executor.unreserve(reservation)
                continue
            if shape != (self.request, self.world_size):
                self.executor.unreserve(reservation)
                reservation = self.executor.reserve(*shape)
                if reservation is None:
                    self.queue.appendleft(new)  # it waits, first in line, for room of its shape
                    return
            self._start(new, reservation)

    def _shape(self, trial: Trial) -> tuple[dict[str, float], int] | None:
        """``(request per rank, ranks)`` of the trial, ``GPU_memory="auto"`` sized now; None: it can never run."""
        try:
            return self.shapes.of(trial, self.trials)
        except ShapeRefused as exc:  # a bad resources function/value, or a shape that never fits
            self.reporter.say(f"tuneplat: trial {trial.trial_id} cannot run: {exc}")
            self._end_trial(trial, TrialStatus.ERROR, error=str(exc))
            return None

    def _could_start(self) -> int:
        """How many trials could start now if there were room: queued ones, then new suggestions (elastic only)."""
        if self.min_world_size is None:
            return 0
        count = len(self.queue)
        if not (self.searcher_done or self.searcher_blocked or self.stopping):
            total = getattr(self.searcher, "total", None) if isinstance(self.searcher, BasicVariantGenerator) else None
            if total is None:
                total = self.tc.num_samples if self.tc.num_samples != -1 else self.suggested + 1
            count += max(0, int(total) - self.suggested)
        limit = self.tc.max_concurrent_trials
        if limit is not None:
            count = min(count, max(0, limit - self.executor.running()))
        return count

    def _set_waiting(self, count: int) -> None:
        if self.min_world_size is not None:  # (elastic groups only: fixed-size groups behave as before)
            self.executor.set_waiting(max(0, count))

    def _start(self, trial: Trial, reservation: Any) -> None:
        """Start an attempt of ``trial`` on the executor's ``reservation``."""
        attempt = trial.attempts
        self.store.clean_staging(trial.path)  # what a crashed attempt left half-staged must not leak into this one
        checkpoint = trial.checkpoint
        start_iteration = trial.iteration
        cloned = trial.restart_iteration is not None
        if cloned:  # PBT's clone: go on from the source's checkpoint and its training_iteration (as Ray)
            start_iteration = trial.restart_iteration or 0
        elif trial.checkpoint is not None and trial.results:
            # a retry or resume: continue from the checkpoint, later results are superseded
            ck_it = trial.checkpoint_iteration()
            if ck_it < start_iteration:
                self._supersede(trial, ck_it)
            start_iteration = ck_it
        elif trial.checkpoint is None and trial.results:
            self._supersede(trial, 0)
            start_iteration = 0
        time_offset = float(trial.last_result.get("time_total_s", 0.0)) if trial.results else 0.0
        spec = TrialSpec(trial_id=trial.trial_id, name=trial.name, path=trial.path, attempt=attempt,
                         config=trial.config, start_iteration=start_iteration, time_offset=time_offset,
                         checkpoint_path=checkpoint.path if checkpoint else None,
                         remote_trial_dir=self.store.trial_url(trial.path),
                         request=self.shapes.started(trial)[0], world_size=self.shapes.started(trial)[1])
        self.running[trial.trial_id] = RunState(attempt, resumed_from_clone=cloned)
        previous_size = trial.world_size
        where = self.executor.start(spec, reservation)
        self._write(ev.TrialStart(
            trial_id=trial.trial_id, attempt=attempt, start_iteration=start_iteration, workers=where,
            checkpoint=checkpoint.path if checkpoint else None,
            # its own resources (with_resources(fn), a ScalingConfig with domains)
            resources=None if spec.request is None else {"num_workers": spec.world_size,
                                                          "resources_per_worker": dict(spec.request)},
            gpu_memory_auto=self.shapes.gpu_auto.note(trial.trial_id) if self.shapes.auto_sized(trial.trial_id) else None))
        self._record_world_size(trial, previous_size, len(where), start_iteration)
        self.hooks.trial_start(trial)
        self.reporter.event(f"trial {trial.trial_id} started (attempt {attempt}) on {where}")

    def _record_world_size(self, trial: Trial, previous: int | None, size: int, start_iteration: int) -> None:
        """An elastic trial's group started with ``size`` ranks (``previous`` before): journal a resize when that
        changed (its ``trial_start`` recorded the size)."""
        old, why = self._resize_reasons.pop(trial.trial_id, (previous, ""))
        old = old if old is not None else previous
        if self.min_world_size is None or old is None or size == old:
            return
        why = why or f"{size} rank(s) fit the cluster when the trial started again"
        message = f"resized from {old} to {size} ranks: {why}"
        self._write(ev.Resize(trial_id=trial.trial_id, from_world_size=old, to_world_size=size,
                                      iteration=start_iteration, reason=why, message=message))
        self.reporter.event(f"trial {trial.trial_id} {message}")
        self.hooks.trial_resize(trial, old, size, why)

    def _supersede(self, trial: Trial, after: int) -> None:
        moved = sum(1 for r in trial.results if r.get("training_iteration", 0) > after)
        self._write(ev.Superseded(trial_id=trial.trial_id, after_iteration=after, count=moved))
        self.trial_files.supersede(trial, after)  # result.json (and the callbacks' progress.csv) follow the journal
        self.hooks.trial_superseded(trial, after)

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
        # Ray's order: the scheduler decides, then the searcher hears the result, then the callbacks get a copy of
        # it (an edit there changes neither the decision, the searcher's input, the journal nor the best trial)
        try:
            decision, reason, pruned = self.actions.decide(trial, run, result)
        except TypeError as exc:  # e.g. a non-numeric time_attr value: this trial fails (not the experiment)
            self._no_retry.add(trial.trial_id)  # (its next result would fail the same way)
            self.executor.fail(trial.trial_id, f"TypeError: {exc}")
            return
        self.searcher.on_trial_result(trial.trial_id, result)
        seen = _copy_result(result)
        self.hooks.trial_result(trial, seen)
        if self.hooks.wants_group_reports:  # (Ray V2's UserCallback: every rank's metrics)
            others = (event.rank_metrics or [None])[1:]
            self.hooks.group_report(trial, _copy_result(result),
                                    [_copy_result(result), *(_copy_result(m) if m else {} for m in others)])
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

    # ------------------------------------------------------------------ trial end
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
            self.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None, error=True, **info)
            self.reporter.trial_error(trial, error_file)
        elif trial.resumable:
            pass  # not complete: the searcher and scheduler keep it as it was, for a restore
        else:
            self.scheduler.on_trial_complete(trial.trial_id, trial.last_result or None)
            info = {"pruned": True} if trial.stopped_by_scheduler else {}
            self.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None, error=False, **info)
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


def _copy_result(result: dict[str, Any]) -> dict[str, Any]:
    """A copy of a result for callbacks, nested values too (what a callback edits stays its own)."""
    return {k: copy.deepcopy(v) if isinstance(v, (dict, list, set)) else v for k, v in result.items()}

def _takes_info(searcher: Any) -> bool:
    """Whether the searcher's ``on_trial_complete`` takes extra keyword information (``**info``)."""
    import inspect

    try:
        params = inspect.signature(searcher.on_trial_complete).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
