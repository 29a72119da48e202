"""User-facing configuration objects, with Ray Tune's names and defaults."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CheckpointConfig",
    "FailureConfig",
    "MLflowConfig",
    "RunConfig",
    "ScalingConfig",
    "TuneConfig",
]


#: the Dask worker resource that marks a node's accelerator (``accelerator_type:A100``), as Ray names it
ACCELERATOR_PREFIX = "accelerator_type:"


def _check(cond: bool, argument: str, value: Any, rule: str) -> None:
    if not cond:
        raise ValueError(f"The value of `{argument}` is {value!r}, but must be {rule}.")


def _check_modes(metric: Any, mode: Any, where: str) -> None:
    if isinstance(metric, (list, tuple)):
        _check(isinstance(mode, (list, tuple)) and len(mode) == len(metric), f"{where}.mode", mode,
               f"a list of 'min'/'max' as long as metric={list(metric)!r}")
        for m in mode:
            _check(m in ("min", "max"), f"{where}.mode", mode, "'min' or 'max' for every metric")
    elif mode is not None:
        _check(mode in ("min", "max"), f"{where}.mode", mode, "'min' or 'max'")


@dataclass
class TuneConfig:
    """How to search: metric/mode, the searcher, the scheduler, how many trials.

    Args:
        metric: the reported key to optimise (a list for multi-objective search).
        mode: "min" or "max" (a list for multi-objective search).
        search_alg: a :class:`tuneplat.search.Searcher`; default random + grid.
        scheduler: a scheduler from :mod:`tuneplat.schedulers`; default FIFO.
        num_samples: how many times the grid is repeated (random search), or how
            many trials a searcher may suggest. -1 means "sample until stopped"
            (Ray's meaning): until ``time_budget_s`` or a stopper's
            ``stop_all()`` ends the experiment; one of them is required.
        max_concurrent_trials: upper bound on trials running at once (None: as
            many as the cluster fits).
        time_budget_s: stop starting trials and stop running ones after this.
        seed: seeds the default searcher (same seed ⇒ same configs, same order).
        reuse_actors: accepted for Ray compatibility; Dask worker processes are
            always reused between trials.
        trial_name_creator, trial_dirname_creator: the trials' names and folder names (Ray's).
        chdir_to_trial_dir: Ray's deprecated option: a value other than ``"DEPRECATED"`` is refused, pointing
            at ``RAY_CHDIR_TO_TRIAL_DIR=0`` / ``TUNEPLAT_CHDIR_TO_TRIAL_DIR=0``, as Ray does.
    """

    metric: str | list[str] | None = None
    mode: str | list[str] | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    seed: int | None = None
    reuse_actors: bool = False
    trial_name_creator: Callable[[Any], str] | None = None
    trial_dirname_creator: Callable[[Any], str] | None = None
    chdir_to_trial_dir: Any = "DEPRECATED"

    def __post_init__(self) -> None:
        if self.chdir_to_trial_dir != "DEPRECATED":
            raise DeprecationWarning("TuneConfig(chdir_to_trial_dir=...) is deprecated (as in Ray): set the "
                                     "environment variable RAY_CHDIR_TO_TRIAL_DIR=0 (or TUNEPLAT_CHDIR_TO_TRIAL_DIR=0) "
                                     "to keep the tuner's working directory in the trials.")
        _check(isinstance(self.num_samples, int) and (self.num_samples >= 1 or self.num_samples == -1),
               "TuneConfig.num_samples", self.num_samples, "an int >= 1 (or -1 for 'sample until stopped')")
        _check(self.max_concurrent_trials is None or (isinstance(self.max_concurrent_trials, int) and self.max_concurrent_trials >= 1),
               "TuneConfig.max_concurrent_trials", self.max_concurrent_trials, "None or an int >= 1")
        _check(self.time_budget_s is None or (isinstance(self.time_budget_s, (int, float)) and self.time_budget_s > 0),
               "TuneConfig.time_budget_s", self.time_budget_s, "None or a number of seconds > 0")
        _check_modes(self.metric, self.mode, "TuneConfig")


@dataclass
class CheckpointConfig:
    """Which checkpoints to keep.

    Args:
        num_to_keep: keep at most this many (None: all). The latest is never deleted.
        checkpoint_score_attribute: rank kept checkpoints by this reported metric
            (None: keep the most recent).
        checkpoint_score_order: "max" or "min".
        checkpoint_frequency, checkpoint_at_end: when a :class:`tuneplat.Trainable`
            class saves: every N iterations, and at the end (as in Ray). Function
            trainables checkpoint through ``report`` and ignore them.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        _check(self.num_to_keep is None or (isinstance(self.num_to_keep, int) and self.num_to_keep >= 1),
               "CheckpointConfig.num_to_keep", self.num_to_keep, "None or an int >= 1")
        _check(self.checkpoint_score_order in ("min", "max"), "CheckpointConfig.checkpoint_score_order",
               self.checkpoint_score_order, "'min' or 'max'")


@dataclass
class FailureConfig:
    """What happens when a trial fails.

    Args:
        max_failures: retries from the latest checkpoint before the trial is ERROR
            (-1: unlimited).
        fail_fast: end the experiment at the first trial error (it stays restorable).
        max_preemption_failures: Ray Train V2's separate budget for restarts
            caused by a preempted (drained, retired) worker, default -1
            (unlimited), so preemptions do not use up ``max_failures``. Kept
            with the run for the elastic groups' preemption handling
            (``docs/elastic.md``); where no preemption is detected, a lost
            worker counts against ``max_failures`` (``docs/porting-from-ray.md``).
        oom_halve: opt-in retry of a trial that ran out of memory (``torch.cuda.OutOfMemoryError``,
            ``MemoryError``): the config key to halve before it runs again, e.g. ``"micro_batch_size"``
            (nested: ``"train_loop_config.micro_batch_size"``). Such retries have their own budget
            (``max_oom_retries``) and do not use up ``max_failures``; a key already at 1 is not retried.
        oom_double: a config key doubled with each halving (e.g. the gradient-accumulation steps, so the
            effective batch stays the same).
        max_oom_retries: how many times one trial may be shrunk and retried (``>= 0``).
        controller_failure_limit: Ray Train V2's retries of its controller; accepted (default -1, as Ray's):
            tuneplat's controller is the driver's loop, which does not fail apart from the driver; a run
            whose driver stopped resumes when the script runs again (``docs/fault-tolerance.md``).
        relax_collectives_on_preemption: Ray Train V2's option (default False) to complete ``report()``
            and ``get_preemption_info()`` with only the ranks that stay. Accepted, validated and kept with
            the run; it changes nothing yet: tuneplat's just-in-time checkpoint is committed by every rank of
            the group while the leaving Dask worker is still closing (``docs/elastic.md``), and a group whose
            leaving rank is gone first restarts from its previous checkpoint.
        preemption_grace_s: Ray Train V2's extra time (seconds, ``>= 0``, default 0) past the preemption
            deadline. Accepted and kept; Dask announces no deadline, so there is none to extend.
    """

    max_failures: int = 0
    fail_fast: bool | str = False
    max_preemption_failures: int = -1
    oom_halve: str | None = None
    oom_double: str | None = None
    max_oom_retries: int = 3
    controller_failure_limit: int = -1
    relax_collectives_on_preemption: bool = False
    preemption_grace_s: float = 0.0

    def __post_init__(self) -> None:
        _check(isinstance(self.max_failures, int) and self.max_failures >= -1,
               "FailureConfig.max_failures", self.max_failures, "an int >= 0, or -1 for unlimited")
        _check(isinstance(self.max_preemption_failures, int) and not isinstance(self.max_preemption_failures, bool)
               and self.max_preemption_failures >= -1, "FailureConfig.max_preemption_failures",
               self.max_preemption_failures, "an int >= 0, or -1 for unlimited (Ray's default)")
        _check(self.oom_halve is None or (isinstance(self.oom_halve, str) and self.oom_halve != ""),
               "FailureConfig.oom_halve", self.oom_halve, "a config key (str) or None")
        _check(self.oom_double is None or (isinstance(self.oom_double, str) and self.oom_double != ""),
               "FailureConfig.oom_double", self.oom_double, "a config key (str) or None")
        _check(self.oom_double is None or self.oom_halve is not None, "FailureConfig.oom_double", self.oom_double,
               "given together with oom_halve (the key that is halved)")
        _check(isinstance(self.max_oom_retries, int) and not isinstance(self.max_oom_retries, bool)
               and self.max_oom_retries >= 0, "FailureConfig.max_oom_retries", self.max_oom_retries, "an int >= 0")
        _check(isinstance(self.controller_failure_limit, int) and not isinstance(self.controller_failure_limit, bool)
               and self.controller_failure_limit >= -1, "FailureConfig.controller_failure_limit",
               self.controller_failure_limit, "an int >= 0, or -1 for unlimited (Ray's default)")
        _check(isinstance(self.relax_collectives_on_preemption, bool), "FailureConfig.relax_collectives_on_preemption",
               self.relax_collectives_on_preemption, "True or False")
        _check(isinstance(self.preemption_grace_s, (int, float)) and not isinstance(self.preemption_grace_s, bool)
               and math.isfinite(self.preemption_grace_s) and self.preemption_grace_s >= 0,
               "FailureConfig.preemption_grace_s", self.preemption_grace_s, "a number of seconds >= 0")


@dataclass
class MLflowConfig:
    """Where and how trials are recorded in MLflow.

    Args:
        tracking_uri: MLflow tracking URI. None: ``$MLFLOW_TRACKING_URI`` if set,
            else a sqlite store inside the experiment folder.
        experiment_name: MLflow experiment (default: the run's name).
        log_checkpoints: log kept checkpoints as run artifacts.
        register_best_model: register the best trial's checkpoint under this name.
        tags: extra tags on the parent run.
        log_plots: at the end of the experiment, draw its plots (learning curves, optimization
            history, parameter importances, ...; see :mod:`tuneplat.plot`) and log them as
            ``plots/*.png`` artifacts of the parent run. They are drawn by the MLflow uploader
            process, from the journal, after the last trial ended.
    """

    tracking_uri: str | None = None
    experiment_name: str | None = None
    log_checkpoints: bool = True
    register_best_model: str | None = None
    tags: Mapping[str, str] | None = None
    log_plots: bool = True


@dataclass
class RunConfig:
    """Where results go and when trials stop.

    Args:
        name: experiment name (default: trainable name + timestamp).
        storage_path: folder, ``file://`` URL, or URL of any fsspec filesystem
            (``s3://bucket/results``, ``gs://...``) holding experiments;
            default ``./tuneplat_results``. On a remote filesystem, ranks upload
            checkpoints there and the tuner keeps a local cache of the small files
            (``$TUNEPLAT_CACHE_DIR``, default ``~/.cache/tuneplat``), uploaded as it goes.
        storage_filesystem: an fsspec filesystem (endpoint, credentials) for a
            remote ``storage_path``; default: the one fsspec builds from the URL.
        stop: dict of ``{metric: threshold}`` (stop when ``result[metric] >= threshold``),
            a callable ``(trial_id, result) -> bool``, or a :class:`tuneplat.Stopper`
            (see :mod:`tuneplat.stopper`; its ``stop_all()`` ends the whole experiment).
        failure_config, checkpoint_config: see those classes.
        mlflow: an :class:`MLflowConfig`, or False to turn MLflow off.
        verbose: 0 silent, 1 status table (the default; None means 1), 2 also trial events.
        address: a Dask scheduler address (``tcp://host:8786``, ``tls://host:8786``) to run on.
        security: the cluster's TLS settings for ``address``: a
            ``distributed.security.Security`` or a dict of its arguments
            (``tls_ca_file``, ``tls_client_cert``, ``tls_client_key``, ...). With a
            TLS cluster the ranks' channel to the tuner uses TLS too.
        tuner_host: the address Dask workers use to reach the tuner (default
            ``TUNEPLAT_TUNER_HOST``, else found from the cluster).
        tuner_port: the tuner's result port, a port (``8790``) or a range
            (``"8790-8799"``) to open in a firewall (default ``TUNEPLAT_TUNER_PORT``,
            else any free port).
        progress_interval_s: how often the status table is printed.
        callbacks: :class:`tuneplat.Callback` instances (Ray's hooks).
        log_to_file: Ray's capture of each trial's output into its trial folder:
            True (files ``stdout`` and ``stderr``), a file name (both in one file),
            or a pair ``(stdout_file, stderr_file)``. What the trial prints still
            reaches the worker's own streams too.
        progress_reporter: a :class:`tuneplat.CLIReporter` or :class:`tuneplat.ProgressReporter`, accepted for Ray
            compatibility: its ``max_report_frequency`` sets ``progress_interval_s``.
        sync_config: accepted for Ray compatibility (results are written to
            ``storage_path`` directly; nothing to sync).
        local_dir: Ray's deprecated name of ``storage_path``: refused, saying so (as Ray does).
        worker_runtime_env: Ray Train V2's per-run worker environment: not ported (refused when given).
        logging_config: Ray Train V2's ``LoggingConfig``: accepted; tuneplat logs through the ``tuneplat`` logger.
    """

    name: str | None = None
    storage_path: str | None = None
    storage_filesystem: Any = None
    stop: Mapping[str, float] | Callable[..., bool] | None = None
    failure_config: FailureConfig | None = None
    checkpoint_config: CheckpointConfig | None = None
    mlflow: MLflowConfig | bool | None = None
    verbose: int = None  # type: ignore[assignment]  # None (Ray's default): 1, set in __post_init__
    address: str | None = None
    security: Any = None
    tuner_host: str | None = None
    tuner_port: int | str | None = None
    progress_interval_s: float = 5.0
    callbacks: Sequence[Any] | None = None
    log_to_file: bool | str | tuple[str, str] = False
    progress_reporter: Any = None
    sync_config: Any = None
    local_dir: str | None = None
    worker_runtime_env: Any = None
    logging_config: Any = None

    def __post_init__(self) -> None:
        if self.verbose is None:  # (Ray's default: the usual output)
            self.verbose = 1
        if self.local_dir is not None:  # Ray's older name; Ray 2.x refuses it the same way
            raise DeprecationWarning(f"RunConfig(local_dir={self.local_dir!r}) is deprecated (as in Ray): give "
                                     f"RunConfig(storage_path={self.local_dir!r}) instead.")
        if self.worker_runtime_env:
            raise NotImplementedError("RunConfig(worker_runtime_env=...) is Ray's: ranks run in the Dask workers' own "
                                      "environment here. Install packages where the workers run and set environment "
                                      "variables before starting them (docs/porting-from-ray.md).")
        freq = getattr(self.progress_reporter, "max_report_frequency", None)  # tune.CLIReporter
        if isinstance(freq, (int, float)) and not isinstance(freq, bool) and freq > 0:
            self.progress_interval_s = float(freq)
        if self.stop is not None and not callable(self.stop):
            _check(isinstance(self.stop, Mapping), "RunConfig.stop", self.stop,
                   "a dict {metric: threshold} or a callable (trial_id, result) -> bool")
            for k, v in self.stop.items():
                _check(isinstance(v, (int, float)) and not math.isnan(v),
                       f"RunConfig.stop[{k!r}]", v, "a number (or a bool, e.g. {'done': True})")
        _check(self.verbose in (0, 1, 2, 3), "RunConfig.verbose", self.verbose, "0, 1, 2 or 3")
        if self.tuner_port is not None:
            from .execution._channel import parse_port_range

            parse_port_range(self.tuner_port, "RunConfig.tuner_port")
        self.failure_config = self.failure_config or FailureConfig()
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()


@dataclass
class ScalingConfig:
    """How many ranks each trial runs, and what each rank needs.

    Args:
        num_workers: ranks per trial (one torch process group); 0 (Ray Train V2's local mode): a
            Trainer's ``fit()`` runs the training function in the calling process, without a
            cluster or worker group (for debugging and unit tests); or ``(min_workers, max_workers)``
            for an elastic group (Ray Train V2's form; see ``docs/elastic.md``): it starts as soon as
            ``min_workers`` ranks fit, uses up to ``max_workers``, goes on with fewer ranks (from its
            latest checkpoint) when a host is lost or preempted, and grows at a checkpoint boundary
            when workers are free.
        use_gpu: give each rank one GPU (unless resources_per_worker says otherwise).
        resources_per_worker: e.g. ``{"CPU": 1, "GPU": 0.5}``; fractional GPUs share a device.
        placement_strategy: "PACK" (fill hosts first) or "SPREAD" (one rank per host first);
            "STRICT_PACK"/"STRICT_SPREAD" accepted as their non-strict forms.
        trainer_resources: accepted for Ray compatibility (the tuner needs no slot).
        elastic_resize_monitor_interval_s: elastic groups only: a group grows (restarts from a
            checkpoint with more ranks) at a checkpoint boundary at least this many seconds after it
            started (Ray's name; Ray's default is 60). None (the default): at the first checkpoint
            boundary at which workers are free and no other trial waits for room.
        accelerator_type: place each rank on a Dask worker that has the resource
            ``accelerator_type:<value>`` (``dask worker --resources "accelerator_type:A100=1"``), as Ray
            places on nodes with that accelerator; a trial whose cluster has none fails at once, naming it.
        label_selector, use_tpu, topology: Ray's; accepted when unset (``None``/False). Node labels
            and TPUs are not ported: a value is refused, saying so.
    """

    num_workers: int | tuple[int, int] = 1
    use_gpu: bool = False
    resources_per_worker: Mapping[str, float] | None = None
    placement_strategy: str = "PACK"
    trainer_resources: Mapping[str, float] | None = None
    elastic_resize_monitor_interval_s: float | None = None
    accelerator_type: str | None = None
    label_selector: Any = None
    use_tpu: bool = False
    topology: str | None = None

    def __post_init__(self) -> None:
        if self.has_search_domains():
            # Ray Train's Tuner guide: param_space={"scaling_config": ScalingConfig(num_workers=tune.grid_search(
            # [1, 2]))}; each trial's resolved values are checked when the Tuner builds its ScalingConfig
            return
        self._validate_rest()

    def has_search_domains(self) -> bool:
        """Whether a field holds a search domain (``tune.grid_search``, ``tune.choice``, ...)."""
        values: list[Any] = [self.num_workers, self.use_gpu, self.resources_per_worker]
        if isinstance(self.resources_per_worker, Mapping) and "grid_search" not in self.resources_per_worker:
            values.extend(self.resources_per_worker.values())
        return any((isinstance(v, Mapping) and "grid_search" in v) or hasattr(v, "sample") for v in values)

    def _validate_rest(self) -> None:
        self._check_num_workers()
        _check(self.accelerator_type is None or (isinstance(self.accelerator_type, str) and self.accelerator_type != ""),
               "ScalingConfig.accelerator_type", self.accelerator_type, "None or a name such as 'A100'")
        for name in ("label_selector", "use_tpu", "topology"):
            _check(not getattr(self, name), f"ScalingConfig.{name}", getattr(self, name),
                   "unset: node labels and TPUs are not ported (use resources_per_worker with Dask worker "
                   "resources, or accelerator_type=)")
        interval = self.elastic_resize_monitor_interval_s
        _check(interval is None or (isinstance(interval, (int, float)) and not isinstance(interval, bool)
                                    and interval >= 0),
               "ScalingConfig.elastic_resize_monitor_interval_s", interval, "None or a number of seconds >= 0")
        _check(self.placement_strategy in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
               "ScalingConfig.placement_strategy", self.placement_strategy, "'PACK' or 'SPREAD'")
        for k, v in (self.resources_per_worker or {}).items():
            if str(k).lower() == "gpu_memory":  # {"GPU_memory": "10GiB"}: packed by memory (docs/resources.md)
                from .execution._gpu_memory import parse_memory

                parse_memory(v, f"ScalingConfig.resources_per_worker[{k!r}]")
                continue
            _check(isinstance(v, (int, float)) and v >= 0, f"ScalingConfig.resources_per_worker[{k!r}]", v,
                   "a number >= 0")
        gpu = self.per_worker().get("GPU", 0)
        _check(gpu <= 1 or float(gpu).is_integer(), "ScalingConfig.resources_per_worker['GPU']", gpu,
               "a fraction <= 1 or a whole number")

    def _check_num_workers(self) -> None:
        value = self.num_workers
        if isinstance(value, list) and len(value) == 2:  # (a YAML sweep file or JSON gives a list)
            value = self.num_workers = (value[0], value[1])
        if isinstance(value, tuple):
            _check(len(value) == 2, "ScalingConfig.num_workers", value,
                   "an int >= 1, or a tuple (min_workers, max_workers) of two ints")
            lo, hi = value
            for part, name in ((lo, "min_workers"), (hi, "max_workers")):
                _check(isinstance(part, int) and not isinstance(part, bool), f"ScalingConfig.num_workers ({name})",
                       part, "an int (num_workers=(min_workers, max_workers), e.g. (2, 4))")
            _check(lo >= 1, "ScalingConfig.num_workers (min_workers)", lo,
                   ">= 1 (an elastic group needs at least one rank: num_workers=(1, max_workers))")
            _check(lo <= hi, "ScalingConfig.num_workers", value,
                   f"(min_workers, max_workers) with min_workers <= max_workers, e.g. ({hi}, {lo})")
            return
        _check(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
               "ScalingConfig.num_workers", value, "an int >= 1 (0: local mode, a Trainer's fit() in this process), "
               "or a tuple (min_workers, max_workers) of ints")

    @property
    def elastic(self) -> bool:
        """Whether the group is elastic: ``num_workers=(min, max)`` with ``min < max``."""
        return isinstance(self.num_workers, tuple) and self.num_workers[0] < self.num_workers[1]

    @property
    def min_workers(self) -> int:
        """The fewest ranks a trial runs with (``num_workers`` for a fixed-size group)."""
        return self.num_workers[0] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def max_workers(self) -> int:
        """The most ranks a trial runs with (``num_workers`` for a fixed-size group)."""
        return self.num_workers[1] if isinstance(self.num_workers, tuple) else self.num_workers

    def per_worker(self) -> dict[str, float]:
        """Resources of one rank, with defaults filled in (CPU 1; GPU 1 when use_gpu)."""
        res: dict[str, float] = {}
        for k, v in (self.resources_per_worker or {}).items():
            if str(k).lower() == "gpu_memory":
                from .execution._gpu_memory import GPU_MEMORY, parse_memory

                res[GPU_MEMORY] = parse_memory(v)
                continue
            res[str(k).upper() if str(k).lower() in ("cpu", "gpu") else str(k)] = float(v)
        if self.accelerator_type:  # Ray's custom resource name for nodes with that accelerator
            res.setdefault(f"{ACCELERATOR_PREFIX}{self.accelerator_type}", 0.001)
        res.setdefault("CPU", 1.0)
        if self.use_gpu:
            res.setdefault("GPU", 1.0)
        if res.get("GPU", 0) == 0:
            res.pop("GPU", None)
        return res

    @property
    def backend(self) -> str:
        per = self.per_worker()
        return "nccl" if per.get("GPU", 0) > 0 or per.get("GPU_memory", 0) > 0 else "gloo"

    def to_space(self) -> ScalingSpace:
        """This config as a search space (its domains resolved per trial, as Ray Train's Tuner does)."""
        space = ScalingSpace(num_workers=self.num_workers, use_gpu=self.use_gpu,
                             placement_strategy=self.placement_strategy)
        if self.accelerator_type is not None:
            space["accelerator_type"] = self.accelerator_type
        if self.resources_per_worker is not None:
            space["resources_per_worker"] = (dict(self.resources_per_worker)
                                             if "grid_search" not in self.resources_per_worker
                                             else self.resources_per_worker)
        return space

    @classmethod
    def from_trial_config(cls, value: Any, where: str = "param_space['scaling_config']") -> ScalingConfig:
        """The ScalingConfig of one trial, from its resolved ``config['scaling_config']``.

        Raises:
            ValueError: naming ``where`` and the value when it is not a valid ScalingConfig.
        """
        if isinstance(value, ScalingConfig):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"The value of `{where}` is {value!r}, but must be a ScalingConfig's fields.")
        fields = {k: v for k, v in value.items()
                  if k in ("num_workers", "use_gpu", "resources_per_worker", "placement_strategy", "accelerator_type")}
        try:
            sc = cls(**fields)
        except ValueError as exc:
            raise ValueError(f"{where} resolved to {dict(value)!r}: {exc}") from None
        if sc.has_search_domains():
            raise ValueError(f"{where} resolved to {dict(value)!r}, which still holds a search domain.")
        return sc


class ScalingSpace(dict):  # type: ignore[type-arg]
    """``param_space["scaling_config"]`` of a :class:`ScalingConfig` with search domains, as a dict of its
    fields: the searcher resolves it per trial and the Tuner builds each trial's ScalingConfig from it."""
