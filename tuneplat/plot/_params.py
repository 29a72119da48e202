"""How the configs relate to the metric: parameter importances and parallel coordinates."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from ._data import PlotError, _number, load_experiment, looks_log
from ._plots import _figure, _title, _value_colors

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MAX_FANOVA_TRIALS", "param_importances", "plot_parallel_coordinates", "plot_param_importances"]


#: trials the default fANOVA evaluator looks at (a seeded sample beyond)
MAX_FANOVA_TRIALS = 200


def param_importances(source: Any, metric: str | None = None, mode: str | None = None, *,
                      evaluator: Any = None, params: list[str] | None = None,
                      at: str | int = "auto") -> tuple[dict[str, float], str]:
    """Importance of each varying config key for ``metric``, by an Optuna importance evaluator.

    Which value of each trial is explained (``at``):

    * ``"auto"`` (default): its value at the highest ``training_iteration``
      that 90% of the trials reached. Without early stopping that is the final
      value; under ASHA/HyperBand it is the first rung, where every config is
      still in the race: the survivors alone are a biased sample (the
      scheduler kept them *because* of their config), which makes importances
      of the parameters it selected on look small.
    * ``"last"``: Optuna's choice: the last values of the trials that ran to
      their end (COMPLETE); if fewer than 4 did, every trial's last value.
    * an int: the value at that ``training_iteration``, over the trials that reached it.

    Args:
        evaluator: an ``optuna.importance`` evaluator; default fANOVA
            (``FanovaImportanceEvaluator(n_trees=32, max_depth=8, seed=0)``,
            needs scikit-learn; over a seeded sample of 200 trials when there are
            more), else Optuna's PED-ANOVA (no extra dependency).

    Returns:
        ``({param: importance}, note)``: importances sum to 1, most important
        first; the note says which evaluator and values were used.

    Raises:
        PlotError: fewer than 2 trials to compare, no varying key, a bad ``at``.
    """
    from ._optuna import _quiet_optuna, import_optuna, to_optuna_study

    import_optuna()
    from optuna.importance import get_param_importances
    from optuna.trial import TrialState

    exp = load_experiment(source)
    metric = exp.resolve_metric(metric)
    if not (at in ("auto", "last") or (isinstance(at, int) and not isinstance(at, bool))):
        raise PlotError(f"The value of `at` is {at!r}, but must be 'auto', 'last' or a training_iteration (int).")
    iteration = exp.common_iteration(metric) if at == "auto" else at if isinstance(at, int) else None
    study = to_optuna_study(exp, metric, mode, params=params, at=iteration, intermediate=False)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if iteration is not None:
        note = f"{len(complete)} trials at training_iteration {iteration}"
    else:
        note = f"{len(complete)} trials that ran to their end"
    if iteration is None and len(complete) < 4:
        import optuna
        from optuna.trial import create_trial

        widened = []
        for t in study.trials:
            last = t.user_attrs.get("tuneplat_last_value")
            if last is not None and t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING):
                widened.append(create_trial(state=TrialState.COMPLETE, value=last, params=t.params,
                                            distributions=t.distributions, user_attrs=t.user_attrs))
        with _quiet_optuna():
            study = optuna.create_study(direction=study.direction)
            study.add_trials(widened)
        note = f"last values of all {len(widened)} trials (only {len(complete)} ran to their end)"
        complete = widened
    if len(complete) < 2:
        raise PlotError(f"{exp.path}: parameter importance needs at least 2 trials with a value to compare "
                        f"({note}).")
    if not any(t.distributions for t in complete):
        raise PlotError(f"{exp.path}: no config key varies between trials: nothing to rank.")
    if evaluator is None:
        evaluator = _default_evaluator()
        if len(complete) > MAX_FANOVA_TRIALS and type(evaluator).__name__ == "FanovaImportanceEvaluator":
            # fANOVA's cost grows faster than its trees' leaves: a seeded sample keeps 1,000 trials under a second
            import optuna

            sample = random.Random(0).sample(complete, MAX_FANOVA_TRIALS)
            with _quiet_optuna():
                study = optuna.create_study(direction=study.direction)
                study.add_trials(sample)
            note = note.replace(f"{len(complete)} trials", f"{MAX_FANOVA_TRIALS} of {len(complete)} trials (sampled)")
    with _quiet_optuna():
        try:
            imp = get_param_importances(study, evaluator=evaluator)
        except (RuntimeError, ValueError) as exc:
            raise PlotError(f"{exp.path}: {type(evaluator).__name__} could not rank the parameters: {exc}") from None
    name = type(evaluator).__name__.replace("ImportanceEvaluator", "")
    return {k: float(v) for k, v in imp.items()}, f"{'fANOVA' if name == 'Fanova' else name} on {note}"


def _default_evaluator() -> Any:
    try:
        import sklearn  # noqa: F401
    except ImportError:
        from optuna.importance import PedAnovaImportanceEvaluator

        return PedAnovaImportanceEvaluator()
    from optuna.importance import FanovaImportanceEvaluator

    return FanovaImportanceEvaluator(n_trees=32, max_depth=8, seed=0)


def plot_param_importances(source: Any, metric: str | None = None, mode: str | None = None, *,
                           evaluator: Any = None, params: list[str] | None = None,
                           at: str | int = "auto") -> Figure:
    """Horizontal bars: how much each varying config key explains ``metric`` (see :func:`param_importances`
    for ``evaluator`` and ``at``).

    Works on any experiment, whatever searcher drew the configs. Returns a
    Figure whose bars (gid ``"importances"``) are ordered most important on top;
    the y tick labels are the parameter names.
    """
    exp = load_experiment(source)
    imp, note = param_importances(exp, metric, mode, evaluator=evaluator, params=params, at=at)
    metric = exp.resolve_metric(metric)
    names = list(imp)[::-1]
    vals = [imp[n] for n in names]
    fig = _figure(8, max(2.5, 0.9 + 0.38 * len(names)))
    ax = fig.add_subplot()
    for bar in ax.barh(range(len(names)), vals, color="#1f77b4"):
        bar.set_gid("importances")
    ax.set_yticks(range(len(names)), names)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, max(vals + [0.01]) * 1.15)
    ax.set_xlabel(f"importance for {metric}")
    _title(ax, exp, "parameter importances", note)
    return fig


def plot_parallel_coordinates(source: Any, metric: str | None = None, mode: str | None = None, *,
                              params: list[str] | None = None, max_params: int = 12) -> Figure:
    """One polyline per trial through its config values and, on the last axis, its final ``metric``.

    Numeric parameters are scaled to their observed range (log-scaled when
    positive and spanning two decades or more); categorical ones are spread
    evenly, with their values as tick labels. Lines are colored by the final
    value (best brightest, drawn on top).

    Args:
        params: flattened config keys to show (default: the varying ones, at most ``max_params``).

    Returns:
        A Figure; the polylines are one LineCollection (gid ``"lines"``).
    """
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import LineCollection

    exp = load_experiment(source)
    metric = exp.resolve_metric(metric)
    mode = exp.resolve_mode(mode, metric)
    keys, rows = exp.param_table(params)
    note = ""
    if len(keys) > max_params:
        note = f"first {max_params} of {len(keys)} varying parameters (pass params=[...] to choose)"
        keys = keys[:max_params]
    if not keys:
        raise PlotError(f"{exp.path}: no config key varies between trials: nothing to draw.")
    values = [exp.final_value(t, metric, mode) for t in exp.trials]
    data = [(row, v) for row, v in zip(rows, values) if v is not None]
    if not data:
        raise PlotError(f"{exp.path}: no trial has a final {metric!r}.")
    axes = [_Axis.build(k, [r.get(k) for r, _ in data]) for k in keys]
    axes.append(_Axis.build(metric, [v for _, v in data]))
    order = sorted(range(len(data)), key=lambda i: data[i][1], reverse=(mode == "min"))  # best last, on top
    lines = []
    for i in order:
        row, v = data[i]
        lines.append([(j, ax_.position(row.get(ax_.name) if j < len(keys) else v)) for j, ax_ in enumerate(axes)])
    colors, norm, cmap = _value_colors([data[i][1] for i in order], mode)
    fig = _figure(max(7.0, 1.4 * len(axes) + 2), 5)
    ax = fig.add_subplot()
    ax.add_collection(LineCollection(lines, colors=colors, linewidths=1.0, alpha=0.75, gid="lines"))
    for j, a in enumerate(axes):
        ax.axvline(j, color="#444444", lw=0.8)
        for pos, label in a.ticks():
            ax.text(j + 0.03, pos, label, fontsize=7, va="center", ha="left", color="#333333")
    ax.set_xlim(-0.2, len(axes) - 0.5)
    ax.set_ylim(-0.06, 1.06)
    ax.set_xticks(range(len(axes)), [a.label() for a in axes], rotation=20, ha="right", fontsize=8)
    ax.set_yticks([])
    if norm is not None:
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=f"{metric}")
    _title(ax, exp, f"parallel coordinates ({len(data)} trials, {mode} {metric})", note)
    return fig


class _Axis:
    """One vertical axis of a parallel-coordinates plot: where each value sits in [0, 1]."""

    def __init__(self, name: str, kind: str, lo: float = 0.0, hi: float = 1.0, log: bool = False,
                 cats: list[str] | None = None) -> None:
        self.name, self.kind, self.lo, self.hi, self.log, self.cats = name, kind, lo, hi, log, cats or []
        self.distinct: list[float] = []

    @classmethod
    def build(cls, name: str, values: list[Any]) -> _Axis:
        nums = [_number(v) for v in values]
        if values and all(n is not None for n in nums):
            fl = [n for n in nums if n is not None]
            lo, hi = min(fl), max(fl)
            axis = cls(name, "num", lo, hi, log=looks_log(fl))
            distinct = sorted(set(fl))
            axis.distinct = distinct if len(distinct) <= 8 and len(fl) > len(distinct) else []
            return axis
        cats = sorted({str(v) for v in values})
        return cls(name, "cat", cats=cats)

    def position(self, v: Any) -> float:
        if self.kind == "cat":
            n = len(self.cats)
            return 0.5 if n <= 1 else self.cats.index(str(v)) / (n - 1)
        f = _number(v)
        if f is None:
            return math.nan
        if self.hi == self.lo:
            return 0.5
        if self.log:
            return (math.log(f) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (f - self.lo) / (self.hi - self.lo)

    def ticks(self) -> list[tuple[float, str]]:
        if self.kind == "cat":
            cats = self.cats if len(self.cats) <= 12 else [self.cats[0], self.cats[-1]]
            return [(self.position(c), c[:14]) for c in cats]
        if self.hi == self.lo:
            return [(0.5, f"{self.lo:.3g}")]
        if 0 < len(self.distinct) <= 8:  # a choice of numbers: its values
            return [(self.position(v), f"{v:.4g}") for v in self.distinct]
        if self.log:
            mid = math.exp((math.log(self.lo) + math.log(self.hi)) / 2)
        else:
            mid = (self.lo + self.hi) / 2
        return [(self.position(v), f"{v:.3g}") for v in (self.lo, mid, self.hi)]

    def label(self) -> str:
        return self.name + (" (log)" if self.log else "")
