"""``tune.run``: Ray Tune's legacy entry point, as a thin wrapper over :class:`Tuner`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, TuneConfig
from .core import TuneError
from .results._result import Result, ResultGrid

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ExperimentAnalysis", "run"]


class ExperimentAnalysis:
    """What :func:`run` returns (``ray.tune.ExperimentAnalysis``), over a :class:`ResultGrid`.

    Trials are :class:`Result` objects here (``.config``, ``.metrics``,
    ``.last_result``-like ``.metrics``, ``.path``, ``.checkpoint``).
    """

    def __init__(self, grid: ResultGrid, metric: str | None, mode: str | None) -> None:
        self.result_grid = grid
        self.default_metric = metric
        self.default_mode = mode
        self.experiment_path = grid.experiment_path

    @property
    def trials(self) -> list[Result]:
        return list(self.result_grid)

    def _need(self, metric: str | None, mode: str | None) -> tuple[str, str]:
        metric = metric or self.default_metric
        mode = mode or self.default_mode
        if metric is None or mode not in ("min", "max"):
            raise ValueError("Pass metric= and mode= ('min' or 'max') here or to tune.run(...) to pick a best trial.")
        return metric, mode

    def get_best_trial(self, metric: str | None = None, mode: str | None = None, scope: str = "last") -> Result:
        metric, mode = self._need(metric, mode)
        return self.result_grid.get_best_result(metric, mode, scope)

    def get_best_config(self, metric: str | None = None, mode: str | None = None, scope: str = "last") -> dict[str, Any]:
        return self.get_best_trial(metric, mode, scope).config

    def get_best_checkpoint(self, trial: Result, metric: str | None = None, mode: str | None = None) -> Any:
        metric, mode = self._need(metric, mode)
        return trial.get_best_checkpoint(metric, mode) if trial.best_checkpoints else None

    @property
    def best_trial(self) -> Result:
        return self.get_best_trial()

    @property
    def best_config(self) -> dict[str, Any]:
        return self.get_best_config()

    @property
    def best_result(self) -> dict[str, Any]:
        return self.best_trial.metrics

    @property
    def best_checkpoint(self) -> Any:
        return self.get_best_checkpoint(self.best_trial)

    @property
    def best_logdir(self) -> str:
        return self.best_trial.path

    @property
    def best_result_df(self) -> pd.DataFrame:
        return self.result_grid.get_dataframe().query(f"trial_id == {self.best_trial.trial_id!r}")

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        return {r.trial_id: r.metrics for r in self.result_grid}

    @property
    def results_df(self) -> pd.DataFrame:
        return self.result_grid.get_dataframe().set_index("trial_id")

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> pd.DataFrame:
        return self.result_grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    @property
    def trial_dataframes(self) -> dict[str, pd.DataFrame]:
        return {r.path: r.metrics_dataframe for r in self.result_grid}


def run(run_or_experiment: Callable[..., Any], *, name: str | None = None, metric: str | None = None,
        mode: str | None = None, stop: Any = None, time_budget_s: float | None = None,
        config: Mapping[str, Any] | None = None, resources_per_trial: Mapping[str, float] | ScalingConfig | None = None,
        num_samples: int = 1, storage_path: str | None = None, search_alg: Any = None, scheduler: Any = None,
        checkpoint_config: CheckpointConfig | None = None, verbose: int = 1, callbacks: Sequence[Any] | None = None,
        max_failures: int = 0, fail_fast: bool | str = False, max_concurrent_trials: int | None = None,
        raise_on_failed_trial: bool = True, trial_name_creator: Callable[[Any], str] | None = None,
        trial_dirname_creator: Callable[[Any], str] | None = None, resume: bool | str = False,
        reuse_actors: bool | None = None, progress_reporter: Any = None, client: Any = None,
        checkpoint_freq: int = 0, checkpoint_at_end: bool = False, **ray_only: Any) -> ExperimentAnalysis:
    """Run an experiment, the Ray Tune 1.x way (``ray.tune.run``); prefer :class:`Tuner`.

    Args:
        run_or_experiment: the function trainable, or a :class:`tuneplat.Trainable` class.
        config: the search space (``param_space``).
        resources_per_trial: as :func:`tuneplat.with_resources`.
        resume: True/"AUTO" continues the experiment ``storage_path/name`` when it exists.
        raise_on_failed_trial: raise :class:`TuneError` at the end if a trial errored.
        checkpoint_freq, checkpoint_at_end: for a :class:`tuneplat.Trainable` class, as
            ``CheckpointConfig(checkpoint_frequency=..., checkpoint_at_end=...)``.
        Others: as in :class:`TuneConfig`, :class:`RunConfig`, :class:`FailureConfig`.

    Raises:
        TypeError: an argument of ``ray.tune.run`` that tuneplat does not support.
        TuneError: a trial failed and ``raise_on_failed_trial`` is true.

    Example:
        >>> import tuneplat as tune
        >>> analysis = tune.run(objective, config={"x": tune.uniform(0, 1)}, metric="loss",  # doctest: +SKIP
        ...                     mode="min", num_samples=8)
        >>> analysis.best_config  # doctest: +SKIP
    """
    import os

    from ._tuner import Tuner, _local_path
    from .trainables._wrappers import with_resources

    if ray_only:
        raise TypeError(f"tune.run() got arguments tuneplat does not support: {sorted(ray_only)} "
                        "(see docs/porting-from-ray.md).")
    if checkpoint_freq or checkpoint_at_end:
        if checkpoint_config is not None:
            raise ValueError("tune.run() got checkpoint_freq/checkpoint_at_end and checkpoint_config; give them in "
                             "one place: CheckpointConfig(checkpoint_frequency=..., checkpoint_at_end=...).")
        checkpoint_config = CheckpointConfig(checkpoint_frequency=checkpoint_freq, checkpoint_at_end=checkpoint_at_end)
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    tune_config = TuneConfig(metric=metric, mode=mode, search_alg=search_alg, scheduler=scheduler,
                             num_samples=num_samples, max_concurrent_trials=max_concurrent_trials,
                             time_budget_s=time_budget_s, reuse_actors=bool(reuse_actors),
                             trial_name_creator=trial_name_creator, trial_dirname_creator=trial_dirname_creator)
    run_config = RunConfig(name=name, storage_path=storage_path, stop=stop, checkpoint_config=checkpoint_config,
                           failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
                           verbose=verbose, callbacks=callbacks, progress_reporter=progress_reporter)
    path = os.path.join(_local_path(storage_path), name) if name else None
    if resume and path and Tuner.can_restore(path):
        tuner = Tuner.restore(path, trainable, resume_errored=resume == "ERRORED_ONLY",
                              param_space=config, tune_config=tune_config, run_config=run_config, client=client)
    else:
        tuner = Tuner(trainable, param_space=config, tune_config=tune_config, run_config=run_config, client=client)
        tuner._caller = "tune.run()"
    grid = tuner.fit()
    if raise_on_failed_trial and grid.num_errors:
        raise TuneError(f"{grid.num_errors} trial(s) did not complete: "
                        f"{[e.trial_id for e in grid.errors]}. First error: {str(grid.errors[0]).splitlines()[0]}")
    return ExperimentAnalysis(grid, metric, mode)
