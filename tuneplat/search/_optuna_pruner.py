"""Optuna's pruners as a tuneplat trial scheduler (``OptunaPrunerScheduler``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from schedulers import Decision, TrialScheduler

from ._optuna_state import TRIAL_ID_ATTR
from ._pareto import _as_float

__all__ = ["OptunaPrunerScheduler"]


class OptunaPrunerScheduler(TrialScheduler):
    """Runs an Optuna pruner (``MedianPruner``, ``HyperbandPruner``, ...) as a trial scheduler.

    The scheduler keeps its **own** in-memory Optuna study (independent of
    any ``OptunaSearch``) with one Optuna trial per tuneplat trial: every
    result's metric is reported at step ``result[time_attr]`` and the pruner's
    ``prune(study, trial)`` answer becomes ``Decision.STOP`` (True) or
    ``Decision.CONTINUE``. Completed trials are told COMPLETE with their last
    metric value (pruners such as ``MedianPruner`` compare with completed
    trials), stopped ones PRUNED, failed ones FAIL. A result without the
    metric or ``time_attr`` is ignored (CONTINUE); a NaN/non-numeric metric is
    reported as NaN, which Optuna's pruners prune.

    When the tuner ends a trial because of a STOP from this scheduler it
    should call ``searcher.on_trial_complete(..., pruned=True)``.

    Args:
        pruner: An ``optuna.pruners.BasePruner``.
        metric: Metric (single objective) or from ``TuneConfig``.
        mode: ``"min"``/``"max"`` or from ``TuneConfig``.
        time_attr: Result key used as the Optuna step (``training_iteration``).

    Example:
        >>> import optuna
        >>> s = OptunaPrunerScheduler(optuna.pruners.MedianPruner(), metric="loss", mode="min")
    """

    name = "optuna_pruner"

    def __init__(self, pruner: optuna.pruners.BasePruner, metric: str | None = None, mode: str | None = None,
                 time_attr: str = "training_iteration") -> None:
        if not isinstance(pruner, optuna.pruners.BasePruner):
            raise TypeError(f"`pruner` must be an optuna.pruners.BasePruner, got {pruner!r}")
        if isinstance(metric, (list, tuple)):
            raise ValueError("OptunaPrunerScheduler is single-objective: Optuna pruners do not "
                             "support multi-objective studies. Pass one metric.")
        super().__init__(metric, mode)
        self.pruner = pruner
        self.time_attr = time_attr
        self._study: optuna.Study | None = None
        self._trials: dict[str, optuna.trial.Trial] = {}
        self._stopped: set[str] = set()

    @property
    def study(self) -> optuna.Study:
        """The scheduler's own in-memory study (created once the mode is known)."""
        if self._study is None:
            if self.mode not in ("min", "max"):
                raise ValueError("OptunaPrunerScheduler needs a metric and a mode: pass them to the "
                                 "scheduler or to TuneConfig(metric=..., mode=...).")
            self._study = optuna.create_study(
                direction="minimize" if self.mode == "min" else "maximize",
                pruner=self.pruner, sampler=optuna.samplers.RandomSampler(seed=0),
            )
        return self._study

    def set_objective(self, metric: str | list[str] | None, mode: str | list[str] | None) -> None:
        if isinstance(metric, (list, tuple)):
            raise ValueError("OptunaPrunerScheduler is single-objective: Optuna pruners do not "
                             "support multi-objective studies.")
        super().set_objective(metric, mode)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "pruner": type(self.pruner).__name__, "time_attr": self.time_attr}

    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, config)
        if trial_id not in self._trials:
            trial = self.study.ask()
            trial.set_user_attr(TRIAL_ID_ATTR, trial_id)
            self._trials[trial_id] = trial

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._require_known(trial_id)
        if trial_id in self._stopped:
            return Decision.STOP
        trial = self._trials[trial_id]
        step = result.get(self.time_attr)
        if not isinstance(self.metric, str) or self.metric not in result or step is None or isinstance(step, bool):
            return Decision.CONTINUE
        try:
            step_int = int(step)
        except (TypeError, ValueError):
            return Decision.CONTINUE
        value = _as_float(result.get(self.metric))
        trial.report(math.nan if value is None else value, step_int)
        if trial.should_prune():
            self._stopped.add(trial_id)
            shown = "NaN" if value is None else f"{value:.4g}"
            return self._record_stop(
                trial_id, f"pruned by {type(self.pruner).__name__} at {self.time_attr}={step_int}: "
                          f"{self.metric}={shown}")
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        trial = self._trials.get(trial_id)
        if trial is None:
            return
        if trial_id in self._stopped:
            self.study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
            return
        value = _as_float(result.get(self.metric)) if result is not None and self.metric else None
        if value is None:
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        else:
            self.study.tell(trial, value, skip_if_finished=True)

    def on_trial_error(self, trial_id: str) -> None:
        trial = self._trials.get(trial_id)
        if trial is not None:
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
