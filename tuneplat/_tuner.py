"""``Tuner``: the entry point."""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from ._compat import reporter_callbacks
from ._config import RunConfig, ScalingConfig, ScalingSpace, TuneConfig
from ._mainguard import check_main_guard
from .air.integrations.mlflow import mirror_config, target_callbacks
from .core import ExperimentLock, TuneError, TuneLoop
from .core._lock import LOCK_NAME
from .core._replay import (
    TunerStateError,
    load_trials,
    load_tuner_state,
    prepare_resume,
    restore_problem,
    save_tuner_state,
)
from .execution._dask_executor import DaskTrialExecutor
from .execution._executor import TrialExecutor
from .execution._trial_io import log_files, make_trial_io
from .logger import CSVLoggerCallback, TBXLoggerCallback, default_file_loggers
from .results._result import ResultGrid
from .search._space import validate_space
from .storage._storage import (
    CheckpointStore,
    ExperimentSync,
    FsspecCheckpointStore,
    LocalCheckpointStore,
    fetch_experiment,
    fs_for_url,
    is_remote,
    local_cache_for,
    resolve_storage,
    resolve_storage_path,
    rjoin,
)
from .tracking import make_callbacks
from .tracking._files import FileLoggers
from .tracking._user_callbacks import adapt_callbacks
from .trainables._adapt import ConvertibleTrainer, for_run, function_of
from .trainables._wrappers import resources_of, trial_resources_of

__all__ = ["Tuner"]

logger = logging.getLogger("tuneplat")


def _trainable_name(trainable: Any) -> str:
    name = getattr(trainable, "__name__", None) or type(trainable).__name__
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "trainable"


def _check_picklable(trainable: Any) -> None:
    import cloudpickle

    try:
        cloudpickle.dumps(trainable)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the user's to fix
        raise TypeError(
            f"The trainable {getattr(trainable, '__qualname__', trainable)!r} cannot be pickled to ship it to "
            f"Dask workers: {type(exc).__name__}: {exc}. Create locks, open files, clients and datasets inside the "
            "function (or pass picklable data with tune.with_parameters) instead of capturing them."
        ) from exc


def _check_trainer_space(trainer: Any, space: Mapping[str, Any]) -> None:
    """Ray's rule: a Trainer's search space goes under ``"train_loop_config"`` (its loop sees nothing else)."""
    stray = [k for k in space if k not in ("train_loop_config", "scaling_config")]
    if not stray:
        return
    loop_space = dict(space.get("train_loop_config") or {})
    fixed = {"train_loop_config": {**loop_space, **{k: space[k] for k in stray}}}
    raise ValueError(
        f"param_space has the top-level key(s) {stray}, but {type(trainer).__name__}'s train_loop_per_worker "
        "receives only param_space['train_loop_config'] (Ray's rule for a Trainer in a Tuner): every trial would "
        f"fail with KeyError. Put them under 'train_loop_config': param_space={fixed!r}")


def _local_path(storage_path: str | None) -> str:
    return resolve_storage_path(storage_path)


def rerun_note(experiment_dir: str, name: str, kept: str, moved_folder: bool = False) -> str:
    """One line for a new run in a folder that already held this experiment: how to continue or keep apart.

    A folder started by ``tuneplat run`` (it holds ``sweep.yaml``) gets the command-line
    advice; one started from Python gets the API's. ``kept`` is where the old run
    went: a folder of its own (``moved_folder``), or the old journal's new name.
    """
    old = kept if moved_folder else experiment_dir
    if os.path.isfile(os.path.join(old, "sweep.yaml")):
        how = f"to continue it instead: tuneplat resume {old}; to keep runs apart: --name NEW_NAME"
    else:
        how = (f"to continue it instead: Tuner.restore({old!r}, trainable); to keep runs apart: "
               "RunConfig(name=...)")
    if moved_folder:
        return (f"{experiment_dir} already held a run of experiment {name!r}: it moved, whole, to {kept} (its own "
                f"experiment folder); this run starts afresh in {experiment_dir}; {how}.")
    return f"{experiment_dir} already held experiment {name!r}: starting it afresh (the old journal is kept as {kept}); {how}."


def _previous_run_folder(experiment_dir: str, journal: str) -> str:
    """A new sibling folder for the previous run: ``<name>.<its start time>`` (``.2``, ``.3``… if taken)."""
    started = None
    try:
        with open(journal, encoding="utf-8") as f:
            first = json.loads(f.readline() or "{}")
        started = datetime.datetime.fromtimestamp(float(first["time"]))
    except (OSError, ValueError, KeyError, TypeError):
        started = datetime.datetime.fromtimestamp(os.path.getmtime(journal))
    base = f"{experiment_dir.rstrip(os.sep)}.{started:%Y%m%d-%H%M%S}"
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}.{n}"
    return path


def _can_end_experiment(stop: Any) -> bool:
    """Whether ``RunConfig.stop`` may end the whole experiment (a stopper with a real ``stop_all()``)."""
    from .stopper import CombinedStopper, FunctionStopper, MaximumIterationStopper, NoopStopper, TrialPlateauStopper

    if isinstance(stop, CombinedStopper):
        return any(_can_end_experiment(s) for s in getattr(stop, "_stoppers", ()))
    if isinstance(stop, (NoopStopper, FunctionStopper, MaximumIterationStopper, TrialPlateauStopper)):
        return False  # their stop_all() is always false
    return callable(getattr(stop, "stop_all", None)) and not isinstance(stop, Mapping)


def _check_sample_until_stopped(tc: TuneConfig, rc: RunConfig) -> None:
    """``num_samples=-1`` samples until the experiment is stopped: something must stop it."""
    if tc.num_samples != -1 or tc.time_budget_s:
        return
    if _can_end_experiment(rc.stop):
        return
    raise ValueError(
        "TuneConfig(num_samples=-1) samples configurations until the experiment is stopped, but nothing here stops "
        f"it (time_budget_s={tc.time_budget_s!r}, RunConfig.stop={rc.stop!r}): Ray Tune would start trials forever "
        "(a stop dict or function ends trials, never the experiment). Give it an end: "
        "TuneConfig(time_budget_s=600), or RunConfig(stop=a Stopper whose stop_all() ends the experiment, e.g. "
        "tune.stopper.TimeoutStopper(600)); or pass num_samples=N for N trials.")


class Tuner:
    """Tunes a trainable over a search space on a Dask cluster.

    Args:
        trainable: ``fn(config)`` that calls :func:`tuneplat.report`, a
            :class:`tuneplat.Trainable` subclass, or a :class:`tuneplat.TorchTrainer`
            (then ``param_space`` may hold a ``"train_loop_config"`` dict, as in Ray).
        param_space: the search space (domains from :mod:`tuneplat.search`).
        tune_config: metric, mode, searcher, scheduler, num_samples.
        run_config: name, storage_path, stop, failure/checkpoint/MLflow config.
        scaling_config: ranks per trial and their resources (default: 1 rank, 1 CPU).
        client: a ``distributed.Client`` to run on (default: the active client,
            else ``run_config.address``, else an embedded LocalCluster).
        executor: what runs the trials (default: a Dask executor on ``client``);
            :class:`tuneplat.testing.VirtualTimeExecutor` replays learning
            curves in simulated time, without Dask.

    Example:
        >>> import tuneplat as tune
        >>> def objective(config):
        ...     for step in range(5):
        ...         tune.report({"loss": (config["x"] - 3) ** 2})
        >>> tuner = tune.Tuner(objective, param_space={"x": tune.uniform(-10, 10)},
        ...                    tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=4))
        >>> results = tuner.fit()  # doctest: +SKIP
        >>> results.get_best_result().config  # doctest: +SKIP
    """

    def __init__(self, trainable: Callable[..., Any] | Any = None, *, param_space: Mapping[str, Any] | None = None,
                 tune_config: TuneConfig | None = None, run_config: RunConfig | None = None,
                 scaling_config: ScalingConfig | None = None, client: Any = None,
                 executor: TrialExecutor | None = None, _resume: tuple[Any, ...] | None = None) -> None:

        if trainable is None:
            raise TypeError("Tuner needs a trainable: a function fn(config) that calls tuneplat.report(...).")
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or RunConfig()
        self.param_space = dict(param_space or {})
        self.scaling_config = scaling_config
        parts = trainable.as_trainable() if isinstance(trainable, ConvertibleTrainer) else None
        self._trial_resources: Callable[[Mapping[str, Any]], ScalingConfig] | None = trial_resources_of(trainable)
        space_sc = self.param_space.get("scaling_config")
        if isinstance(space_sc, ScalingConfig) and space_sc.has_search_domains():
            space_sc = self.param_space["scaling_config"] = space_sc.to_space()
        if isinstance(space_sc, ScalingSpace):
            # Ray Train's Tuner guide: ScalingConfig(num_workers=tune.grid_search([1, 2])): resolved per trial
            if self._trial_resources is not None or scaling_config is not None:
                raise ValueError("param_space['scaling_config'] has search domains, and the trial's resources are "
                                 "given elsewhere too (scaling_config= or with_resources()); give them in one place.")
            self._trial_resources = _scaling_of_trial
        elif isinstance(self.param_space.get("scaling_config"), ScalingConfig):
            # Ray Train's Tuner guide: param_space={"scaling_config": ScalingConfig(...), "train_loop_config": ...}
            self.scaling_config = scaling_config = self.param_space.pop("scaling_config")
        elif "scaling_config" in self.param_space and parts is not None:
            raise TypeError(f"param_space['scaling_config'] is {self.param_space['scaling_config']!r}; it must be "
                            "a ScalingConfig(...) (the same for every trial).")
        if parts is not None:  # a trainer (TorchTrainer): it converted itself
            _check_trainer_space(trainable, self.param_space)
            self.scaling_config = scaling_config or parts.scaling_config
            loop_space = self.param_space.get("train_loop_config", {})
            self.param_space["train_loop_config"] = {**parts.train_loop_config, **loop_space}
            if parts.run_config is not None and run_config is None:
                self.run_config = parts.run_config
            fn = parts.fn
        else:
            fn = function_of(trainable)
        resources = resources_of(trainable)
        if self._trial_resources is not None and scaling_config is not None and not isinstance(space_sc, ScalingSpace):
            raise ValueError("The trainable has resources from tune.with_resources() and the Tuner got "
                             "scaling_config= as well; give them in one place.")
        if resources is not None:  # tune.with_resources: what every trial asks for
            if scaling_config is not None:
                raise ValueError("The trainable has resources from tune.with_resources() and the Tuner got "
                                 "scaling_config= as well; give them in one place.")
            self.scaling_config = resources
        self.scaling_config = self.scaling_config or ScalingConfig()
        if self.scaling_config.num_workers == 0:
            raise ValueError("ScalingConfig(num_workers=0) is Ray Train V2's local mode: it runs a Trainer's fit() in "
                             "this process, not trials of a Tuner. Give the Tuner num_workers >= 1.")
        if not isinstance(self.tune_config, TuneConfig):
            raise TypeError(f"tune_config must be a tuneplat.TuneConfig, got {type(self.tune_config).__name__}")
        if not isinstance(self.run_config, RunConfig):
            raise TypeError(f"run_config must be a tuneplat.RunConfig, got {type(self.run_config).__name__}")

        self.run_config = mirror_config(self.run_config)  # an MLflowLoggerCallback aims the built-in MLflow mirror
        _check_sample_until_stopped(self.tune_config, self.run_config)
        validate_space(self.param_space)
        log_files(self.run_config.log_to_file)  # a wrong log_to_file is refused now, not at fit()
        adapt_callbacks(self.run_config.callbacks)  # refuse a wrong callback now, not at fit()
        fn = for_run(fn, self.tune_config, self.run_config)  # a Trainable class: its checkpoint policy
        _check_picklable(fn)
        self.trainable = fn
        self.trainable_name = _trainable_name(parts.fn if parts is not None else trainable)
        self.client = client
        self._executor = executor
        self._raw_trainable = trainable
        self._resume = _resume
        storage = resolve_storage(self.run_config.storage_path, self.run_config.storage_filesystem)
        self._storage_fs = storage.fs
        if _resume is not None:
            self.experiment_dir = _resume[0]
            self.experiment_name = os.path.basename(self.experiment_dir)
            self._remote_dir: str | None = _resume[2] if len(_resume) > 2 else None
            if self._remote_dir is None:
                self._storage_fs = None
        else:
            root = storage.local_root
            name = self.run_config.name
            if name is None:  # a generated name never lands in another experiment's folder
                stem = f"{self.trainable_name}_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
                name, n = stem, 1
                while storage.exists(name):
                    n += 1
                    name = f"{stem}_{n}"
                os.makedirs(os.path.join(root, name), exist_ok=True)
            elif storage.is_remote and os.path.isdir(os.path.join(root, name)):
                # the local copy of a remote experiment is a cache: a new experiment of that name starts clean
                import shutil

                shutil.rmtree(os.path.join(root, name))
            self.experiment_name = name
            self.experiment_dir = os.path.join(root, name)
            self._remote_dir = storage.remote_experiment(name)
        self._results: ResultGrid | None = None
        #: where a re-run moved the previous run of this experiment (set by fit())
        self.previous_run_dir: str | None = None
        #: called in fit() once the folder is this run's (the command line saves the sweep file there)
        self._before_run: Callable[[], None] | None = None
        self._caller = "Tuner.fit()"  # what the user called (TorchTrainer.fit(), tune.run() set theirs)
        self._auto_file_loggers = True  # progress.csv/TensorBoard files unasked (not for a Trainer inside a trial)

    def fit(self) -> ResultGrid:
        """Run the experiment to the end; returns every trial's :class:`Result`.

        A failing trial never raises here: it is ERROR in the grid, its error in
        ``result.error``. Ctrl-C ends running trials and returns what finished;
        the experiment can be continued with :meth:`Tuner.restore`.
        """

        executor = self._executor
        if executor is None:
            check_main_guard(self.client, self.run_config.address, self._caller)  # a process spawned by the user
            rc = self.run_config
            executor = DaskTrialExecutor(self.client, rc.address, security=rc.security, tuner_host=rc.tuner_host,
                                         tuner_port=rc.tuner_port)
        with ExperimentLock(self.experiment_dir):  # refuse a second Tuner on this experiment before touching it
            callbacks = make_callbacks(self.run_config, self.experiment_name)
            if callbacks:  # the MLflow mirror: where it logs, for setup_mlflow() in the trials
                callbacks += target_callbacks(self.run_config)
            # Ray's per-trial progress.csv and TensorBoard files, then the user's callbacks
            callbacks += self._file_loggers() + adapt_callbacks(self.run_config.callbacks)
            callbacks += reporter_callbacks(self.run_config.progress_reporter)  # a ProgressReporter of the user's
            syncer = None
            if self._remote_dir is not None:
                store: CheckpointStore = FsspecCheckpointStore(self._storage_fs, self._remote_dir)
                syncer = ExperimentSync(self.experiment_dir, self._storage_fs, self._remote_dir)
            else:
                store = LocalCheckpointStore()
            store = executor.checkpoint_store(store) or store
            loop = TuneLoop(
                trainable=self.trainable, param_space=self.param_space, tune_config=self.tune_config,
                run_config=self.run_config, scaling_config=self.scaling_config or ScalingConfig(),
                experiment_dir=self.experiment_dir, experiment_name=self.experiment_name,
                trainable_name=self.trainable_name, executor=executor,
                store=store, callbacks=callbacks, trials=self._resume[1] if self._resume else None,
                resume=self._resume is not None, syncer=syncer, raw_trainable=self._raw_trainable,
                reopen=self._resume[3] if self._resume is not None and len(self._resume) > 3 else None,
                trial_resources=self._trial_resources,
                trial_io=make_trial_io(self.run_config.log_to_file),
                trainer=isinstance(self._raw_trainable, ConvertibleTrainer),
            )
            if self._resume is None:
                self._set_aside_previous_journal()
                loop.previous_run_dir = self.previous_run_dir
                if self._before_run is not None:
                    self._before_run()
                save_tuner_state(self.experiment_dir, {"param_space": self.param_space,
                                                       "tune_config": self.tune_config,
                                                       "run_config": self.run_config,
                                                       "scaling_config": self.scaling_config})
            try:
                loop.run()
            finally:
                self._results = ResultGrid.from_trials(loop.trials, loop.metric, loop.mode, self.experiment_dir,
                                                       self._storage_fs, self._remote_dir)
        if loop.fail_fast_error and self.run_config.failure_config.fail_fast == "raise":  # type: ignore[union-attr]
            raise TuneError(loop.fail_fast_error)
        return self._results

    def _file_loggers(self) -> list[Any]:
        """Ray's progress.csv/TensorBoard writers: automatic for Tune runs; for a Trainer's run inside a trial
        (Ray Train V2 writes none there) only those passed explicitly."""
        if self._auto_file_loggers:
            return default_file_loggers(self.run_config.callbacks)
        given = list(self.run_config.callbacks or [])
        csv = any(isinstance(c, CSVLoggerCallback) for c in given)
        tb = any(isinstance(c, TBXLoggerCallback) for c in given)
        return [FileLoggers(csv=csv, tensorboard=tb)] if csv or tb else []

    def _set_aside_previous_journal(self) -> None:
        """A new run in a folder that holds a run of the same experiment starts in a clean folder.

        Locally, every file of the previous run (journal, trial folders, plots,
        the Optuna study, the saved sweep) moves to a sibling folder
        ``<name>.<start time of that run>``: an experiment folder of its own, which
        ``tuneplat status``/``plot`` and ``Tuner.restore`` read as before. Nothing is
        lost and nothing of it mixes with the new run. On remote storage the old
        journal is kept beside the new one (renamed).
        """
        journal = os.path.join(self.experiment_dir, "journal.jsonl")
        stamp = f"{datetime.datetime.now():%Y%m%d-%H%M%S-%f}"
        if self._remote_dir is not None:  # the local cache was emptied: the remote copy is the one to keep
            kept = os.path.join(self.experiment_dir, f"journal.{stamp}.jsonl.old")
            study = os.path.join(self.experiment_dir, "optuna_journal.log")  # the old study is kept too
            if os.path.isfile(study):
                os.replace(study, os.path.join(self.experiment_dir, f"optuna_journal.{stamp}.log.old"))
            remote = f"{self._remote_dir}/journal.jsonl"
            if not self._storage_fs.exists(remote):
                return
            self._storage_fs.mv(remote, f"{self._remote_dir}/{os.path.basename(kept)}")
            logger.warning("tuneplat: %s", rerun_note(self.experiment_dir, self.experiment_name,
                                                     os.path.basename(kept)))
            return
        if not os.path.isfile(journal) or os.path.getsize(journal) == 0:
            return
        moved = _previous_run_folder(self.experiment_dir, journal)
        os.makedirs(moved)
        for name in os.listdir(self.experiment_dir):
            if name == LOCK_NAME:
                continue  # this run's lock (held)
            os.replace(os.path.join(self.experiment_dir, name), os.path.join(moved, name))
        self.previous_run_dir = moved
        logger.warning("tuneplat: %s", rerun_note(self.experiment_dir, self.experiment_name, moved, moved_folder=True))

    def get_results(self) -> ResultGrid:
        """The results of the last :meth:`fit` (or of the restored experiment)."""
        if self._results is None:

            trials, meta = load_trials(self.experiment_dir, self._storage_fs, trusted=True)  # our own, or restored
            self._results = ResultGrid.from_trials(trials, meta.get("metric"), meta.get("mode"), self.experiment_dir,
                                                  self._storage_fs, self._remote_dir)
        return self._results

    @classmethod
    def can_restore(cls, path: str | os.PathLike[str], storage_filesystem: Any = None) -> bool:
        """Whether ``path`` (a folder or a remote URL) holds an experiment that :meth:`restore` can read.

        A local folder is checked whole: its journal must parse into events of the right shape, and its
        ``tuner.pkl`` (if any) must be a whole pickle (checked without unpickling it).
        """
        p = os.fspath(path)
        if storage_filesystem is not None or is_remote(p):
            fs = storage_filesystem if storage_filesystem is not None else fs_for_url(p)[0]
            return bool(fs.exists(rjoin(fs.unstrip_protocol(fs._strip_protocol(p)), "journal.jsonl")))
        return restore_problem(_local_path(p)) is None

    @classmethod
    def restore(cls, path: str | os.PathLike[str], trainable: Callable[..., Any] | Any, *, resume_unfinished: bool = True,
                resume_errored: bool = False, restart_errored: bool = False, param_space: Mapping[str, Any] | None = None,
                tune_config: TuneConfig | None = None, run_config: RunConfig | None = None,
                scaling_config: ScalingConfig | None = None, client: Any = None,
                storage_filesystem: Any = None, executor: TrialExecutor | None = None) -> Tuner:
        """Continue an experiment that was interrupted or crashed.

        Finished trials are kept, unfinished ones resume from their latest
        checkpoint, and the searcher continues where it stopped.

        Args:
            resume_errored: retry ERROR trials from their latest checkpoint.
            restart_errored: rerun ERROR trials from scratch.
            param_space, tune_config, run_config, scaling_config: needed again
                when they hold objects the journal cannot restore (searchers,
                schedulers, callables); by default they are read from
                ``tuner.pkl`` in the experiment folder.
            storage_filesystem: the fsspec filesystem of a remote ``path``
                (``s3://bucket/results/exp``); default: fsspec's for the URL.
        """

        p = os.fspath(path)
        remote_dir = None
        fs = None
        if storage_filesystem is not None or is_remote(p):
            fs = storage_filesystem if storage_filesystem is not None else fs_for_url(p)[0]
            remote_dir = fs.unstrip_protocol(fs._strip_protocol(p).rstrip("/"))
            if not cls.can_restore(remote_dir, fs):
                raise FileNotFoundError(f"{remote_dir} has no journal.jsonl: not a tuneplat experiment folder "
                                        "(pass the folder storage_path/name).")
            p = local_cache_for(remote_dir)
            fetch_experiment(fs, remote_dir, p)  # the remote copy is the truth: refresh the local cache
        path = _local_path(p)
        if not os.path.isfile(os.path.join(path, "journal.jsonl")):
            raise FileNotFoundError(f"{path} has no journal.jsonl: not a tuneplat experiment folder "
                                    "(pass the folder storage_path/name).")
        try:
            saved = load_tuner_state(path)
        except TunerStateError:
            if param_space is None or tune_config is None or run_config is None:
                raise
            logger.warning("tuneplat: %s is damaged; restoring with the settings given to Tuner.restore",
                           os.path.join(path, "tuner.pkl"))
            saved = {}
        trials = prepare_resume(path, resume_errored=resume_errored, restart_errored=restart_errored, storage_fs=fs)
        rc = run_config or saved.get("run_config")
        if fs is not None and rc is not None:
            import dataclasses

            parent = remote_dir.rsplit("/", 1)[0]  # type: ignore[union-attr]
            rc = dataclasses.replace(rc, storage_path=parent, storage_filesystem=fs)
        return cls(
            trainable, param_space=param_space if param_space is not None else saved.get("param_space"),
            tune_config=tune_config or saved.get("tune_config"), run_config=rc,
            scaling_config=scaling_config or (None if resources_of(trainable) else saved.get("scaling_config")),
            client=client, executor=executor,
            _resume=(path, trials, remote_dir, {"resume_errored": resume_errored, "restart_errored": restart_errored}),
        )


def _scaling_of_trial(config: Mapping[str, Any]) -> ScalingConfig:
    """A trial's ScalingConfig from its resolved ``config['scaling_config']`` (a ScalingConfig with domains)."""
    return ScalingConfig.from_trial_config(config.get("scaling_config"))
