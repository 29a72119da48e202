"""Results of an experiment: :class:`Result` per trial and the :class:`ResultGrid`."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core._trial import Trial, TrialStatus
from ..search._space import flatten_dict
from ..storage._checkpoint import Checkpoint
from ..storage._storage import rjoin

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from ..plot import SavedPlots

__all__ = ["Result", "ResultGrid", "TrialError"]


class TrialError(RuntimeError):
    """A trial's failure, carrying the remote traceback."""

    def __init__(self, message: str, traceback: str | None = None, trial_id: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback
        self.trial_id = trial_id

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n\n{self.traceback}" if self.traceback else base


@dataclass
class Result:
    """One trial's outcome.

    Attributes:
        config: the trial's config.
        metrics: its last (non-superseded) result.
        checkpoint: its latest checkpoint, or None.
        best_checkpoints: ``(checkpoint, metrics)`` pairs of the kept checkpoints.
        error: a :class:`TrialError` when the trial failed, else None.
        path: the trial's folder (a URL on remote storage, see :attr:`filesystem`).
        mlflow_run_id: the trial's MLflow child run, when MLflow is on.
    """

    config: dict[str, Any]
    metrics: dict[str, Any]
    path: str
    error: TrialError | None = None
    checkpoint: Checkpoint | None = None
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    status: str = "TERMINATED"
    trial_id: str = ""
    mlflow_run_id: str | None = None
    lineage: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    return_value: Any = None
    _history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _filesystem: Any = field(default=None, repr=False)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], storage_filesystem: Any = None) -> Result:
        """The :class:`Result` of the trial whose folder is ``path`` (``ray.train.Result.from_path``).

        Read from the experiment's journal (the folder above) when there is one,
        else from the trial folder's ``params.json``, ``result.json`` and
        checkpoint folders.

        Args:
            path: the trial folder (a local path).
            storage_filesystem: Ray's argument; only a local filesystem (None or a
                ``pyarrow.fs.LocalFileSystem``) is read here.

        Raises:
            FileNotFoundError: ``path`` is not a trial folder.
            NotImplementedError: ``storage_filesystem`` is a remote one.

        Example:
            >>> result = Result.from_path("~/tuneplat_results/exp/objective_1a2b3_00000")  # doctest: +SKIP
        """
        if storage_filesystem is not None and type(storage_filesystem).__name__ != "LocalFileSystem":
            raise NotImplementedError(
                f"Result.from_path(storage_filesystem={type(storage_filesystem).__name__}): only local folders are "
                "read; for a remote experiment use tuneplat.ResultGrid of Tuner.restore(url).get_results().")
        import json

        from ..storage._storage import list_checkpoints

        folder = os.path.abspath(os.path.expanduser(os.fspath(path)))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{folder} is not a trial folder (Result.from_path takes storage_path/name/trial).")
        experiment = os.path.dirname(folder)
        if os.path.isfile(os.path.join(experiment, "journal.jsonl")):
            from ..core._replay import load_trials

            trials, meta = load_trials(experiment)
            mine = [t for t in trials if os.path.abspath(t.path) == folder]
            if mine:
                return ResultGrid.from_trials(mine, meta.get("metric"), meta.get("mode"), experiment)[0]
        params = os.path.join(folder, "params.json")
        results = os.path.join(folder, "result.json")
        if not (os.path.isfile(params) or os.path.isfile(results)):
            raise FileNotFoundError(f"{folder} has neither params.json nor result.json: not a trial folder.")
        config: dict[str, Any] = {}
        if os.path.isfile(params):
            with open(params, encoding="utf-8") as f:
                try:
                    config = json.load(f)
                except ValueError as exc:
                    raise ValueError(f"{params} is damaged (not JSON: {exc}); it holds the trial's config: "
                                     "restore it from a backup or remove it (the config is then empty)") from None
        history: list[dict[str, Any]] = []
        if os.path.isfile(results):
            with open(results, encoding="utf-8") as f:
                for line in f:
                    try:
                        history.append(json.loads(line))
                    except ValueError:
                        pass  # a line torn by a crash
        ckpts = [Checkpoint(p) for p in list_checkpoints(folder)]
        return cls(config=config, metrics=dict(history[-1]) if history else {}, path=folder,
                   checkpoint=ckpts[-1] if ckpts else None, best_checkpoints=[(c, {}) for c in ckpts],
                   trial_id=str(history[-1].get("trial_id", "")) if history else "", _history=history)

    @property
    def metrics_dataframe(self) -> pd.DataFrame:
        """Every reported result as a row (superseded results of retries excluded)."""
        import pandas as pd

        return pd.DataFrame([flatten_dict(r) for r in self._history])

    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs.FileSystem`` that :attr:`path` is on (``ray.train.Result.filesystem``).

        A ``pyarrow.fs.LocalFileSystem`` for a local folder; for remote storage, the experiment's
        fsspec filesystem wrapped as a ``pyarrow.fs.PyFileSystem`` (the fsspec one itself is
        :attr:`fsspec_filesystem`). ``pyarrow.fs`` is imported, so ``import pyarrow`` then
        ``pyarrow.fs.FileSystem`` works, as Ray's guides write it.
        """
        import pyarrow.fs

        if self._filesystem is None:
            return pyarrow.fs.LocalFileSystem()
        if isinstance(self._filesystem, pyarrow.fs.FileSystem):
            return self._filesystem
        return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(self._filesystem))

    @property
    def fsspec_filesystem(self) -> Any:
        """The fsspec filesystem of :attr:`path` when the experiment is on remote storage, else None."""
        return self._filesystem

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint:
        """The kept checkpoint whose reported ``metric`` is best (``ray.train.Result.get_best_checkpoint``).

        Raises:
            ValueError: ``mode`` is not "min" or "max".
            RuntimeError: the trial kept no checkpoint, or none was reported with ``metric``.
        """
        if mode not in ("min", "max"):
            raise ValueError(f"The value of `mode` is {mode!r}, but must be 'min' or 'max'.")
        if not self.best_checkpoints:
            raise RuntimeError(f"Trial {self.trial_id} kept no checkpoint (report one with "
                               "tune.report(metrics, checkpoint=Checkpoint.from_directory(...))).")
        scored = [(_value(m.get(metric)), i) for i, (_, m) in enumerate(self.best_checkpoints)]
        scored = [(v if mode == "min" else -v, i) for v, i in scored if math.isfinite(v)]
        if not scored:
            raise RuntimeError(f"No checkpoint of trial {self.trial_id} was reported with a numeric {metric!r}; "
                               f"its metrics are {sorted(self.metrics)}.")
        return self.best_checkpoints[min(scored)[1]][0]


def _value(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def _score(result: Result, metric: str, mode: str, scope: str) -> float:
    """Lower is better; NaN when the trial has no usable value."""
    sign = 1.0 if mode == "min" else -1.0
    if scope == "last":
        values = [_value(result.metrics.get(metric))]
    else:
        values = [_value(r.get(metric)) for r in result._history if metric in r]
        if scope.startswith("last-") and scope.endswith("-avg"):
            values = values[-int(scope[5:-4]):]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return math.nan
    if scope == "all":
        return min(sign * v for v in values)
    if scope == "last":
        return sign * values[0]
    return sign * sum(values) / len(values)


class NoBestTrialError(ValueError, RuntimeError):
    """``get_best_result()`` found no trial with a finite value of the metric (Ray raises RuntimeError here)."""


def _with_auto(trial: Any) -> dict[str, Any]:
    """The trial's last result with what Ray's ``Result.metrics`` adds: ``config`` and ``done`` (the trial ended)."""
    metrics = dict(trial.last_result)
    if metrics:
        metrics.setdefault("config", trial.config)
        metrics["done"] = trial.status == TrialStatus.TERMINATED
    return metrics


class ResultGrid(Sequence[Result]):
    """All trials of an experiment, in creation order.

    Example:
        >>> results = tuner.fit()  # doctest: +SKIP
        >>> results.get_best_result().config  # doctest: +SKIP
    """

    def __init__(self, results: list[Result], metric: Any = None, mode: Any = None, experiment_path: str | None = None) -> None:
        self._results = results
        self._metric = metric
        self._mode = mode
        self.experiment_path = experiment_path

    @classmethod
    def from_trials(cls, trials: Sequence[Trial], metric: Any, mode: Any, experiment_dir: str,
                    storage_fs: Any = None, remote_dir: str | None = None) -> ResultGrid:
        """The grid of ``trials`` (the tuner's, or those replayed from a journal).

        Args:
            trials: the experiment's trials, in creation order.
            metric, mode: the experiment's (``TuneConfig``'s) defaults for :meth:`get_best_result`.
            experiment_dir: the local experiment folder.
            storage_fs, remote_dir: the fsspec filesystem and URL of a remote experiment; each
                result's ``path`` then points there.
        """
        results = []
        for t in trials:
            err = (TrialError(t.error or "unknown error", t.error_traceback, t.trial_id)
                   if t.status == TrialStatus.ERROR else None)
            path = t.path if remote_dir is None else rjoin(remote_dir, os.path.basename(t.path))
            results.append(Result(
                config=t.config, metrics=_with_auto(t), path=path, error=err, checkpoint=t.checkpoint,
                best_checkpoints=list(t.checkpoints), status=str(t.status), trial_id=t.trial_id,
                mlflow_run_id=t.mlflow_run_id, lineage=list(t.lineage), stop_reason=t.stop_reason,
                _history=list(t.results), _filesystem=storage_fs if remote_dir is not None else None,
            ))
        return cls(results, metric, mode, remote_dir or experiment_dir)

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: Any) -> Any:
        return self._results[i]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    def __repr__(self) -> str:
        return f"ResultGrid<{len(self)} trials, {self.num_terminated} terminated, {self.num_errors} errors>"

    @property
    def errors(self) -> list[TrialError]:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return sum(1 for r in self._results if r.status == "TERMINATED")

    def get_best_result(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                        filter_nan_and_inf: bool = True) -> Result:
        """The trial with the best ``metric``.

        Args:
            scope: "last" (the last result), "all" (the best result ever reported),
                "avg" or "last-N-avg" (averages).

        Raises:
            ValueError: no metric/mode known, a bad scope, or no trial reported the metric.
        """
        metric = metric or self._metric
        mode = mode or self._mode
        if isinstance(metric, list):
            raise ValueError("This experiment has several metrics: pass metric= and mode= for one of them, "
                             "or use get_best_results() for the Pareto front.")
        if metric is None or mode not in ("min", "max"):
            raise ValueError("get_best_result() needs a metric and a mode ('min' or 'max'): pass them here or "
                             "in TuneConfig(metric=..., mode=...).")
        if scope not in ("last", "all", "avg") and not (scope.startswith("last-") and scope.endswith("-avg") and scope[5:-4].isdigit()):
            raise ValueError(f"The value of `scope` is {scope!r}, but must be 'last', 'all', 'avg' or 'last-N-avg'.")
        scored = [(_score(r, metric, mode, scope), i) for i, r in enumerate(self._results)]
        scored = [(s, i) for s, i in scored if not math.isnan(s)]
        if not scored:
            errored = (f" All {len(self)} trials errored (errored trials are candidates only with a finite value, "
                       "as in Ray): see results.errors." if len(self) and self.num_errors == len(self)
                       else f" {self.num_errors} of {len(self)} trials errored.")
            raise NoBestTrialError(f"No best trial found for the given metric: {metric!r}. This means that no trial "
                                   f"has reported this metric, or all values reported for it are NaN or infinite."
                                   + errored)
        return self._results[min(scored)[1]]

    def get_best_results(self, metric: Sequence[str] | str | None = None, mode: Sequence[str] | str | None = None,
                         scope: str = "last") -> list[Result]:
        """The Pareto front of a multi-objective experiment: the non-dominated trials, in creation order.

        A trial is on the front when no other trial is at least as good in
        every metric and strictly better in one. Trials with a missing or
        non-finite value of any metric are left out (they neither are on the
        front nor dominate anything); trials with identical values are all on
        it. With one metric, the front is the best trial(s).

        Args:
            metric: the metrics (default: ``TuneConfig.metric``, a list for a
                multi-objective experiment).
            mode: ``"min"``/``"max"`` per metric (default: ``TuneConfig.mode``).
            scope: which value of each trial counts: "last" (its last result),
                "avg" or "last-N-avg" (averages over its results).

        Raises:
            ValueError: no metrics/modes known, lengths differ, a bad mode or scope.

        Example:
            >>> tc = TuneConfig(metric=["loss", "latency"], mode=["min", "min"])  # doctest: +SKIP
            >>> front = tuner.fit().get_best_results()  # doctest: +SKIP
            >>> [(r.metrics["loss"], r.metrics["latency"]) for r in front]  # doctest: +SKIP
        """
        metrics, modes = self._objectives(metric, mode, "get_best_results()")
        if scope not in ("last", "avg") and not (scope.startswith("last-") and scope.endswith("-avg")
                                                  and scope[5:-4].isdigit()):
            raise ValueError(f"The value of `scope` is {scope!r}, but must be 'last', 'avg' or 'last-N-avg' "
                             "for get_best_results().")
        return [self._results[i] for i in self._pareto_indices(metrics, modes, scope)]

    def _objectives(self, metric: Any, mode: Any, where: str) -> tuple[list[str], list[str]]:
        metric = metric if metric is not None else self._metric
        mode = mode if mode is not None else self._mode
        metrics = [metric] if isinstance(metric, str) else list(metric or [])
        modes = [mode] if isinstance(mode, str) else list(mode or [])
        if not metrics or len(metrics) != len(modes) or any(m not in ("min", "max") for m in modes):
            raise ValueError(f"{where} needs metrics and one mode ('min' or 'max') per metric, got metric={metric!r}, "
                             f"mode={mode!r}: pass them here or in TuneConfig(metric=[...], mode=[...]).")
        return metrics, modes

    def _pareto_indices(self, metrics: list[str], modes: list[str], scope: str = "last") -> list[int]:
        from ..search._pareto import pareto_front

        rows: list[list[float] | None] = []
        for r in self._results:
            # with mode "min", _score is the plain value (NaN when missing or non-finite)
            row = [_score(r, m, "min", scope) for m in metrics]
            rows.append(None if any(math.isnan(v) for v in row) else row)
        return pareto_front(rows, modes)

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None) -> pd.DataFrame:
        """One row per trial: its last result (or best by ``filter_metric``), ``config/...`` columns.

        For a multi-objective experiment (``TuneConfig(metric=[...])``) a boolean
        ``pareto`` column marks the trials on the Pareto front of their last
        results (see :meth:`get_best_results`).
        """
        import pandas as pd

        on_front: set[int] | None = None
        if isinstance(self._metric, (list, tuple)):
            try:
                metrics, modes = self._objectives(None, None, "get_dataframe()")
            except ValueError:
                on_front = None
            else:
                on_front = set(self._pareto_indices(metrics, modes))
        rows: list[dict[str, Any]] = []
        for r in self._results:
            chosen = r.metrics
            if filter_metric and filter_mode and r._history:
                sign = 1 if filter_mode == "min" else -1
                finite = [h for h in r._history if math.isfinite(_value(h.get(filter_metric)))]
                if finite:
                    chosen = min(finite, key=lambda h: sign * _value(h.get(filter_metric)))
            row = dict(flatten_dict(chosen))
            row.update({f"config/{k}": v for k, v in flatten_dict(r.config).items()})
            row["trial_id"] = r.trial_id
            row["status"] = r.status
            row["logdir"] = r.path
            row["error"] = str(r.error).splitlines()[0] if r.error else None
            if r.mlflow_run_id:
                row["mlflow_run_id"] = r.mlflow_run_id
            if on_front is not None:
                row["pareto"] = len(rows) in on_front
            rows.append(row)
        return pd.DataFrame(rows)

    # ------------------------------------------------------------------ plots (tuneplat.plot; matplotlib)
    def plot_learning_curves(self, metric: str | None = None, **kwargs: Any) -> Figure:
        """Every trial's ``metric`` over ``training_iteration`` (or ``x="time"``), with the points where the
        scheduler stopped, paused or cloned it (see :func:`tuneplat.plot.plot_learning_curves`).

        Example:
            >>> fig = results.plot_learning_curves("loss")  # doctest: +SKIP
            >>> fig.savefig("curves.png")  # doctest: +SKIP
        """
        from ..plot import plot_learning_curves

        return plot_learning_curves(self, metric, **kwargs)

    def plot_optimization_history(self, metric: str | None = None, mode: str | None = None, **kwargs: Any) -> Figure:
        """Trial values in creation order and the best so far (:func:`tuneplat.plot.plot_optimization_history`)."""
        from ..plot import plot_optimization_history

        return plot_optimization_history(self, metric, mode, **kwargs)

    def plot_param_importances(self, metric: str | None = None, mode: str | None = None, **kwargs: Any) -> Figure:
        """fANOVA importance of each varying config key (:func:`tuneplat.plot.plot_param_importances`)."""
        from ..plot import plot_param_importances

        return plot_param_importances(self, metric, mode, **kwargs)

    def plot_parallel_coordinates(self, metric: str | None = None, mode: str | None = None, **kwargs: Any) -> Figure:
        """One polyline per trial through its config and final metric
        (:func:`tuneplat.plot.plot_parallel_coordinates`)."""
        from ..plot import plot_parallel_coordinates

        return plot_parallel_coordinates(self, metric, mode, **kwargs)

    def plot_intermediate_values(self, metric: str | None = None) -> Figure:
        """Reports colored by outcome: complete, pruned, failed (:func:`tuneplat.plot.plot_intermediate_values`)."""
        from ..plot import plot_intermediate_values

        return plot_intermediate_values(self, metric)

    def plot_pbt_lineage(self, metric: str | None = None, **kwargs: Any) -> Figure:
        """Which trial cloned which, when, into what config (:func:`tuneplat.plot.plot_pbt_lineage`)."""
        from ..plot import plot_pbt_lineage

        return plot_pbt_lineage(self, metric, **kwargs)

    def plot_timeline(self) -> Figure:
        """When each trial ran and the scheduler's decisions (:func:`tuneplat.plot.plot_timeline`)."""
        from ..plot import plot_timeline

        return plot_timeline(self)

    def plot_pareto_front(self, metrics: Sequence[str] | None = None, modes: Sequence[str] | None = None) -> Figure:
        """Multi-objective sweeps: the non-dominated trials (:func:`tuneplat.plot.plot_pareto_front`)."""
        from ..plot import plot_pareto_front

        return plot_pareto_front(self, metrics, modes)

    def save_plots(self, out_dir: str, kinds: Sequence[str] | str | None = None, **kwargs: Any) -> SavedPlots:
        """Write every plot that applies (or ``kinds``) as PNGs into ``out_dir`` (:func:`tuneplat.plot.save_plots`)."""
        from ..plot import save_plots

        return save_plots(self, out_dir, kinds, **kwargs)
