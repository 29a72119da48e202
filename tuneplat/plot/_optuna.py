"""An experiment as an in-memory Optuna study: for Optuna's importance evaluators and visualizations.

Trials map to Optuna's states as Optuna's own pruners would leave them: a trial
that ran to its end (or to the scheduler's budget) is ``COMPLETE`` with its last
value, a trial the scheduler stopped early is ``PRUNED``, a failed one ``FAIL``,
one still paused or running ``RUNNING``. Every reported value is an
intermediate value at its ``training_iteration``. Distributions are inferred
from the values the configs took (a float range spanning two decades or more
of positive values is log-scaled).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ._data import TrialRecord, _number, load_experiment, looks_log

__all__ = ["infer_distributions", "to_optuna_study"]

_PRIMITIVE = (str, int, float, bool, type(None))


def _category(v: Any) -> Any:
    return v if isinstance(v, _PRIMITIVE) else repr(v)


def infer_distributions(rows: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    """Optuna distributions for ``keys`` from the values the flattened configs ``rows`` took.

    Numbers become Float/IntDistribution over their observed range (log-scaled
    when positive and spanning >= 100x); anything else a CategoricalDistribution.
    Keys with one value only are left out.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for k in keys:
        vals = [r[k] for r in rows if k in r]
        numbers = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if vals and len(numbers) == len(vals) and all(math.isfinite(float(v)) for v in numbers):
            lo, hi = min(numbers), max(numbers)
            if lo == hi:
                continue
            log = looks_log([float(v) for v in numbers])
            if all(isinstance(v, int) for v in numbers):
                out[k] = IntDistribution(int(lo), int(hi), log=log and lo >= 1)
            else:
                out[k] = FloatDistribution(float(lo), float(hi), log=log)
        else:
            choices = []
            for v in vals:
                c = _category(v)
                if c not in choices:
                    choices.append(c)
            if len(choices) > 1:
                out[k] = CategoricalDistribution(sorted(choices, key=lambda c: (type(c).__name__, str(c))))
    return out


def import_optuna() -> Any:
    """Import Optuna without tqdm's "IProgress not found" warning in notebooks without ipywidgets."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import optuna
        import optuna.importance  # noqa: F401
    return optuna


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    log = logging.getLogger("optuna")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(level)


def _state(t: TrialRecord) -> str:
    if t.status == "ERROR":
        return "FAIL"
    if t.stopped_early:
        return "PRUNED"
    if t.status == "TERMINATED":
        return "COMPLETE"
    return "RUNNING"


def to_optuna_study(source: Any, metric: str | None = None, mode: str | None = None, *,
                    params: list[str] | None = None, at: int | None = None, intermediate: bool = True) -> Any:
    """The experiment as an in-memory :class:`optuna.Study` (see the module docstring for the mapping).

    Useful for any of Optuna's ``optuna.visualization`` functions (interactive
    plotly figures included) and ``optuna.importance`` evaluators.

    Args:
        source: an experiment folder, a ResultGrid or an :class:`Experiment`.
        metric, mode: the objective (default: the experiment's).
        params: flattened config keys to include (default: every key that varies).
        at: compare trials at this ``training_iteration``: every trial that reported the metric there is
            ``COMPLETE`` with that value, the others ``PRUNED`` (default: the Optuna mapping above).
        intermediate: record every report as an intermediate value (False: final values only, faster).

    Raises:
        PlotError: no results, unknown metric, or no mode.

    Example:
        >>> import optuna
        >>> study = to_optuna_study("./tuneplat_results/digits-asha")  # doctest: +SKIP
        >>> optuna.visualization.plot_slice(study).show()  # doctest: +SKIP
    """
    optuna = import_optuna()
    from optuna.trial import TrialState, create_trial

    exp = load_experiment(source)
    metric = exp.resolve_metric(metric)
    mode = exp.resolve_mode(mode, metric)
    keys, rows = exp.param_table(params)
    dists = infer_distributions(rows, keys)
    frozen = []
    for number, (t, row) in enumerate(zip(exp.trials, rows)):
        state = getattr(TrialState, _state(t))
        value = exp.final_value(t, metric, mode)
        if at is not None:
            value = exp.final_value(t, metric, mode, at)
            state = TrialState.COMPLETE if value is not None else TrialState.PRUNED
        inter: dict[int, float] = {}
        for r in t.results if intermediate else ():
            v = _number(r.get(metric))
            if v is not None:
                inter[int(r.get("training_iteration", 0) or 0)] = v
        if state == TrialState.COMPLETE and value is None:
            state = TrialState.FAIL
        p = {k: _category(row[k]) if k in dists and type(dists[k]).__name__ == "CategoricalDistribution" else row[k]
             for k in dists if k in row}
        frozen.append(create_trial(
            state=state, value=value if state == TrialState.COMPLETE else None, params=p,
            distributions={k: dists[k] for k in p}, intermediate_values=inter,
            user_attrs={"tuneplat_trial_id": t.trial_id, "tuneplat_last_value": value, "number": number}))
    with _quiet_optuna():
        study = optuna.create_study(direction="minimize" if mode == "min" else "maximize",
                                    study_name=exp.name or "tuneplat")
        study.add_trials(frozen)
    return study
