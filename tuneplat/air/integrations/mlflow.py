"""MLflow as Ray uses it (``ray.air.integrations.mlflow``), on tuneplat's built-in MLflow mirror.

tuneplat records every ``fit()`` in MLflow already (one parent run, one child
run per trial; see docs/mlflow.md). The two Ray entry points work with that
mirror instead of next to it, so nothing is logged twice:

- :class:`MLflowLoggerCallback` in ``RunConfig(callbacks=[...])`` says where the
  mirror logs (``tracking_uri``, ``experiment_name``, ``tags``) and whether kept
  checkpoints become run artifacts (``save_artifact``). It turns the mirror on
  even with ``RunConfig(mlflow=False)``.
- :func:`setup_mlflow` inside a trainable returns the ``mlflow`` module with the
  trial's child run active: ``mlflow.log_metric(...)``, ``mlflow.log_artifact(...)``,
  ``mlflow.pytorch.log_model(...)`` land in the run the mirror made for the trial.

The mirror writes where it logs into ``mlflow_target.json`` in the experiment
folder (readable by the owner only), which :func:`setup_mlflow` reads on the worker.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..._config import MLflowConfig
from ...core._callbacks import ControllerCallback
from ...logger import LoggerCallback

if TYPE_CHECKING:
    from ...core._view import TunerView

__all__ = ["MLflowLoggerCallback", "TARGET_FILE", "mirror_config", "setup_mlflow"]

logger = logging.getLogger("tuneplat")

#: in the experiment folder: the tracking URI and experiment the mirror logs to
TARGET_FILE = "mlflow_target.json"
_RUN_WAIT_S = 60.0


class MLflowLoggerCallback(LoggerCallback):
    """Log the experiment to MLflow (``ray.air.integrations.mlflow.MLflowLoggerCallback``).

    Args:
        tracking_uri: where to log; None: MLflow's default, as in Ray (``$MLFLOW_TRACKING_URI``, else
            MLflow's own default, ``mlflow.get_tracking_uri()``: ``sqlite:///mlflow.db`` in the working
            directory for MLflow 3), so ``mlflow.get_experiment_by_name(...)`` in the same script finds it.
            (Without this callback, tuneplat's mirror logs to a sqlite store in ``storage_path``.)
        registry_uri: accepted (the tracking URI serves the registry).
        experiment_name: the MLflow experiment (default: the tuneplat experiment's name).
        tags: tags of the experiment's parent run.
        tracking_token: sets ``MLFLOW_TRACKING_TOKEN`` for this process (never logged).
        save_artifact: log the trials' kept checkpoints as run artifacts.
        log_params_on_trial_end: accepted (params are logged when a trial is added).

    Example:
        >>> from tuneplat.air.integrations.mlflow import MLflowLoggerCallback
        >>> cb = MLflowLoggerCallback(tracking_uri="sqlite:///mlflow.db", experiment_name="exp",
        ...                           save_artifact=True)
    """

    def __init__(self, tracking_uri: str | None = None, *, registry_uri: str | None = None,
                 experiment_name: str | None = None, tags: Mapping[str, Any] | None = None,
                 tracking_token: str | None = None, save_artifact: bool = False,
                 log_params_on_trial_end: bool = False) -> None:
        if tracking_uri is not None and not isinstance(tracking_uri, str):
            raise TypeError(f"MLflowLoggerCallback(tracking_uri={tracking_uri!r}): a URI string or None")
        self.tracking_uri = tracking_uri
        self.registry_uri = registry_uri
        self.experiment_name = experiment_name
        self.tags = dict(tags or {})
        self.save_artifact = bool(save_artifact)
        self.log_params_on_trial_end = log_params_on_trial_end
        if tracking_token:
            os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token


def mirror_config(run_config: Any) -> Any:
    """``run_config`` with its MLflow mirror aimed where an :class:`MLflowLoggerCallback` says (unchanged without one).

    Raises:
        ValueError: several MLflowLoggerCallbacks, or one that contradicts ``RunConfig(mlflow=MLflowConfig(...))``.
    """
    given = [c for c in (run_config.callbacks or []) if isinstance(c, MLflowLoggerCallback)]
    if not given:
        return run_config
    if len(given) > 1:
        raise ValueError("RunConfig.callbacks holds several MLflowLoggerCallbacks; tuneplat's MLflow mirror logs "
                         "each experiment once: keep one.")
    cb = given[0]
    cfg = run_config.mlflow if isinstance(run_config.mlflow, MLflowConfig) else MLflowConfig()
    for name, mine in (("tracking_uri", cb.tracking_uri), ("experiment_name", cb.experiment_name)):
        theirs = getattr(cfg, name)
        if mine is not None and theirs is not None and mine != theirs:
            raise ValueError(f"MLflowLoggerCallback({name}={mine!r}) and RunConfig(mlflow=MLflowConfig({name}="
                             f"{theirs!r})) disagree; give it in one place.")
    uri = cb.tracking_uri or cfg.tracking_uri
    if uri is None:  # the user named MLflow's callback: MLflow's default ($MLFLOW_TRACKING_URI, else MLflow's own)
        import mlflow

        uri = mlflow.get_tracking_uri()
    merged = dataclasses.replace(
        cfg, tracking_uri=uri, experiment_name=cb.experiment_name or cfg.experiment_name,
        log_checkpoints=cb.save_artifact, tags={**dict(cfg.tags or {}), **{str(k): str(v) for k, v in cb.tags.items()}},
    )
    return dataclasses.replace(run_config, mlflow=merged)


class TargetFile(ControllerCallback):
    """Writes ``mlflow_target.json`` (where the mirror logs) for :func:`setup_mlflow` on the workers."""

    def __init__(self, config: MLflowConfig) -> None:
        self.config = config

    def on_experiment_start(self, ctrl: TunerView) -> None:
        from ...tracking import default_tracking_uri

        uri = self.config.tracking_uri or default_tracking_uri(os.path.dirname(ctrl.experiment_dir))[0]
        body = json.dumps({"tracking_uri": uri, "experiment_name": self.config.experiment_name or ctrl.experiment_name})
        path = os.path.join(ctrl.experiment_dir, TARGET_FILE)
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a URI may hold credentials
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        os.replace(path + ".tmp", path)


def target_callbacks(run_config: Any) -> list[ControllerCallback]:
    """The :class:`TargetFile` writer when the mirror is on."""
    cfg = getattr(run_config, "mlflow", None)
    if cfg is False:
        return []
    return [TargetFile(cfg if isinstance(cfg, MLflowConfig) else MLflowConfig())]


class _Noop:
    """What non-zero ranks get with ``rank_zero_only=True``: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return _Noop()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def __enter__(self) -> _Noop:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _mirror_run_id(experiment_dir: str, trial_id: str, tracking_uri: str, experiment_name: str) -> str | None:
    """The run the mirror made for ``trial_id``; waits while its uploader process makes it.

    Read from the mirror's ids file (no MLflow call before the run exists: two
    workers opening a new sqlite store at once would both create its tables);
    on another host, where that file is not, MLflow is searched by the trial's tag.
    """
    from ...tracking._mlflow import IDS_FILE

    ids = os.path.join(experiment_dir, IDS_FILE)
    deadline = time.monotonic() + _RUN_WAIT_S
    delay = 0.02
    while True:
        try:
            with open(ids, encoding="utf-8") as f:
                lines = f.readlines()
        except OSError:
            lines = []
        for line in reversed(lines):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("key") == trial_id:
                return str(rec["run_id"])
        if not os.path.isdir(experiment_dir):  # another host: ask MLflow
            import mlflow

            mlflow.set_tracking_uri(tracking_uri)
            exp = mlflow.get_experiment_by_name(experiment_name)
            if exp is not None:
                runs = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`tuneplat.trial_id` = '{trial_id}'",
                                          output_format="list", max_results=1)
                if runs:
                    return str(runs[0].info.run_id)
        if time.monotonic() > deadline:
            return None
        time.sleep(delay)  # the uploader process creates the run asynchronously (usually within milliseconds)
        delay = min(delay * 2, 0.5)


def _detach(mlflow: Any, run_id: str, end: bool) -> None:
    """At the trial's end: the run is no longer this worker's active run (the mirror sets its final status)."""
    if end:
        mlflow.end_run()
        return
    try:
        from mlflow.tracking import fluent

        stack = fluent._active_run_stack.get()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].info.run_id == run_id:
                del stack[i]
        from mlflow.environment_variables import MLFLOW_RUN_ID

        MLFLOW_RUN_ID.unset()
    except Exception:  # noqa: BLE001 - MLflow's internals moved: end the run instead (FINISHED; the mirror fixes it)
        logger.debug("tuneplat: could not detach the MLflow run; ending it", exc_info=True)
        if mlflow.active_run() is not None and mlflow.active_run().info.run_id == run_id:
            mlflow.end_run()


def setup_mlflow(config: Mapping[str, Any] | None = None, tracking_uri: str | None = None,
                 registry_uri: str | None = None, experiment_id: str | None = None,
                 experiment_name: str | None = None, tracking_token: str | None = None,
                 artifact_location: str | None = None, run_name: str | None = None,
                 create_experiment_if_not_exists: bool = False, tags: Mapping[str, Any] | None = None,
                 rank_zero_only: bool = True) -> Any:
    """The ``mlflow`` module with this trial's MLflow run active (``ray.air.integrations.mlflow.setup_mlflow``).

    Inside a trial, with tuneplat's MLflow mirror on and no other target given,
    the active run is the child run the mirror made for the trial (its params,
    metrics and status are the mirror's; what you log lands there too). With a
    ``tracking_uri``/``experiment_name`` other than the mirror's, a new run named
    after the trial is started there, as Ray does. Outside a trial: a new run.

    Args:
        config: the trial's config (logged as params of a run made here).
        tracking_uri, registry_uri, experiment_id, experiment_name, artifact_location,
            create_experiment_if_not_exists, run_name, tags: as in Ray.
        tracking_token: sets ``MLFLOW_TRACKING_TOKEN`` in this process.
        rank_zero_only: on other ranks of a multi-rank trial, return an object
            whose every call does nothing.

    Returns:
        the ``mlflow`` module.

    Example:
        >>> def train_fn(config):  # doctest: +SKIP
        ...     mlflow = setup_mlflow(config)
        ...     for step in range(10):
        ...         mlflow.log_metric("custom", step * 2, step=step)
        ...         tune.report({"loss": 1 / (step + 1)})
    """
    import mlflow

    from ...train._session import _local, _process_session

    session = getattr(_local, "session", None) or _process_session
    if session is not None and rank_zero_only and session.spec.rank != 0:
        return _Noop()
    if tracking_token:
        os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token
    target = None
    if session is not None:
        experiment_dir = os.path.dirname(session.spec.trial_dir)
        target = _read_json(os.path.join(experiment_dir, TARGET_FILE))
    uri = tracking_uri or (target or {}).get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
    name = experiment_name or (target or {}).get("experiment_name")
    on_mirror = (session is not None and target is not None and uri == target.get("tracking_uri")
                 and experiment_id is None and name == target.get("experiment_name"))
    mirror_run = None
    if on_mirror:
        assert session is not None and uri is not None and name is not None
        mirror_run = _mirror_run_id(os.path.dirname(session.spec.trial_dir), session.spec.trial_id, uri, name)
        if mirror_run is None:
            raise RuntimeError(f"setup_mlflow(): tuneplat's MLflow mirror made no run for trial "
                               f"{session.spec.trial_id} within {_RUN_WAIT_S:.0f}s (is MLflow reachable at {uri}?)")
    if uri:
        mlflow.set_tracking_uri(uri)
    if registry_uri:
        mlflow.set_registry_uri(registry_uri)
    if experiment_id is not None:
        mlflow.set_experiment(experiment_id=experiment_id)
    elif name:
        if mlflow.get_experiment_by_name(name) is None:
            if not (create_experiment_if_not_exists or (target and name == target.get("experiment_name"))):
                raise ValueError(f"setup_mlflow(): the MLflow experiment {name!r} does not exist at {uri}; pass "
                                 "create_experiment_if_not_exists=True to create it.")
            mlflow.create_experiment(name, artifact_location=artifact_location)
        mlflow.set_experiment(name)
    active = mlflow.active_run()
    if active is not None:  # a run left active by an earlier trial of this reused worker process
        _detach(mlflow, active.info.run_id, end=False)
    if mirror_run is not None:
        assert session is not None
        run_id = mirror_run
        mlflow.start_run(run_id=run_id, tags=dict(tags) if tags else None)
        session.cleanups.append(lambda: _detach(mlflow, run_id, end=False))
        return mlflow
    trial_name = session.spec.trial_name if session is not None else None
    run = mlflow.start_run(run_name=run_name or trial_name, tags=dict(tags) if tags else None)
    if config:
        from ...search._space import flatten_dict

        mlflow.log_params({k: str(v)[:6000] for k, v in flatten_dict(dict(config)).items()})
    if session is not None:
        run_id = run.info.run_id
        session.cleanups.append(lambda: _detach(mlflow, run_id, end=True))
    return mlflow
