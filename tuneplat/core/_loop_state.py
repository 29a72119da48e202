"""The state the tuner's loop holds, shared by the loop and its mixins (``_launch``, ``_endings``)."""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from schedulers import FIFOScheduler, TrialScheduler

from .._config import FailureConfig, RunConfig, ScalingConfig, TuneConfig
from .._settings import env_seconds
from ..execution._executor import (
    Event,
    TrialExecutor,
)
from ..search._searcher import BasicVariantGenerator, Searcher
from ..storage._storage import CheckpointStore, ExperimentSync
from ..tracking._progress import ProgressReporter
from . import _events as ev
from ._actions import SchedulerActions
from ._callbacks import Callbacks
from ._commits import CheckpointCommits, TrialFiles
from ._failure import FailurePolicy
from ._journal import Journal
from ._phase import ExperimentPhase
from ._scaling import ScalingPolicy
from ._shapes import TrialShapes
from ._state import ExperimentState
from ._stop import MetricCheck, StopRules
from ._trial import RunState, Trial, TrialStatus
from ._view import TunerView

logger = logging.getLogger("tuneplat")

__all__: list[str] = []


class _LoopState:
    """What the tuner's loop holds: the trials, the queue, the running attempts, the policies and the hooks.

    :class:`~tuneplat.core._loop.TuneLoop` is one object split by job over mixins that share this state
    (``_launch``: suggestions, room, starts; ``_endings``: trial ends, failures, the experiment's failing; the loop
    itself: events, results and decisions, deadlines, closing); the methods one of them calls in another are
    declared here.
    """

    def __init__(self, *, trainable: Any, param_space: Mapping[str, Any], tune_config: TuneConfig,
                 run_config: RunConfig, scaling_config: ScalingConfig, experiment_dir: str, experiment_name: str,
                 trainable_name: str, executor: TrialExecutor, store: CheckpointStore,
                 callbacks: list[Any] | None = None, trials: list[Trial] | None = None, resume: bool = False,
                 syncer: ExperimentSync | None = None, raw_trainable: Any = None,
                 trial_resources: Callable[[Mapping[str, Any]], ScalingConfig] | None = None,
                 trial_io: Any = None, reopen: Mapping[str, bool] | None = None, trainer: bool = False) -> None:
        self.trainable = trainable
        #: the trials run a Train trainer (TorchTrainer, XGBoostTrainer, ...): their resources are one bundle per
        #: rank, as Ray Train's (journaled with the experiment's scaling, so a replay knows it)
        self.trainer = trainer
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
        #: how big a trial's group is (start bounds; Noop | Resize(n) at a checkpoint), handed to the executor,
        #: which carries its decisions out; the loop tells it how many trials wait for room
        self.scaling = ScalingPolicy.of(self.world_size, self.min_world_size,
                                        scaling_config.elastic_resize_monitor_interval_s)
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

    # ------------------------------------------------------------------ implemented by the loop and its mixins
    def _write(self, event: ev.Event) -> None:
        raise NotImplementedError

    def _record(self, handed_back: Any) -> None:
        raise NotImplementedError

    def _on_event(self, event: Event) -> None:
        raise NotImplementedError

    def _check_stop_all(self) -> bool:
        raise NotImplementedError

    def _end_trial(self, trial: Trial, status: TrialStatus, *, error: str | None = None,
                   traceback: str | None = None, stop_reason: str | None = None, resumable: bool = False,
                   pruned: bool | None = None) -> None:
        raise NotImplementedError
