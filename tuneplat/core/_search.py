"""The searcher and the scheduler as the loop sets them up: one objective for both, and their state on a restore."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedulers import TrialScheduler

from ..search._searcher import Searcher
from ._trial import Trial, TrialStatus

__all__ = ["restore_algorithms", "set_objective"]


def set_objective(scheduler: TrialScheduler, searcher: Searcher, metric: Any, mode: Any,
                  param_space: Mapping[str, Any], *, num_samples: int, seed: Any, experiment_dir: str,
                  resume: bool) -> tuple[Any, Any]:
    """Give the scheduler and the searcher the experiment's objective; the ``(metric, mode)`` the loop checks.

    A metric left out of the TuneConfig is taken from the scheduler, then the searcher.

    Raises:
        ValueError: a multi-objective TuneConfig with a single-metric scheduler, or a searcher that has its
            own space while ``param_space`` is given too.
    """
    metric_of_tc, mode_of_tc = metric, mode
    multi = getattr(scheduler, "supports_multi_objective", None)
    if isinstance(metric, list) and callable(multi) and multi() and not isinstance(
            getattr(scheduler, "metric", None), str):
        # MO-ASHA / multi-objective HyperBand: the scheduler decides on every objective of the TuneConfig
        scheduler.set_objective(metric, mode)
        metric = mode = None
    elif (isinstance(metric, list) and scheduler.requires_objective()
            and getattr(scheduler, "metric", None) is None):
        raise ValueError(
            f"TuneConfig(metric={metric!r}, mode={mode!r}) is multi-objective, but "
            f"{type(scheduler).__name__} decides on one metric: pass it one, e.g. "
            f"{type(scheduler).__name__}(metric={metric[0]!r}, mode={mode[0]!r}, ...), "
            "or leave TuneConfig.scheduler unset (FIFO) for a multi-objective search.")
    scheduler.set_objective(metric if not isinstance(metric, list) else None,
                            mode if not isinstance(mode, list) else None)
    metric, mode = metric_of_tc, mode_of_tc
    if metric is None and getattr(scheduler, "metric", None):
        metric, mode = scheduler.metric, scheduler.mode
    ok = searcher.set_search_properties(metric, mode, param_space, num_samples=num_samples, seed=seed,
                                        experiment_dir=experiment_dir, resume=resume)
    if ok is False:
        raise ValueError(f"{type(searcher).__name__} was set up with its own search space; "
                         "don't pass param_space to the Tuner as well.")
    if metric is None and getattr(searcher, "metric", None):
        metric, mode = searcher.metric, searcher.mode
    return metric, mode


def restore_algorithms(trials: list[Trial], searcher: Searcher, scheduler: TrialScheduler) -> list[Trial]:
    """Restore: rebuild searcher and scheduler state from the trials in the journal; the trials to run again."""
    searcher.restore_trials([
        {"trial_id": t.trial_id, "config": t.config, "status": t.status.value, "result": t.last_result or None}
        for t in trials
    ])
    unfinished = []
    for t in trials:
        scheduler.on_trial_add(t.trial_id, t.config)
        for r in t.results:
            scheduler.on_trial_result(t.trial_id, r)
        if t.status == TrialStatus.TERMINATED:
            scheduler.on_trial_complete(t.trial_id, t.last_result or None)
        elif t.status == TrialStatus.ERROR:
            scheduler.on_trial_error(t.trial_id)
        else:
            unfinished.append(t)
    scheduler.pop_actions()  # decisions of the past were already carried out
    return unfinished
