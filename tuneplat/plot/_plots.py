"""The plots: each takes an experiment (folder, ResultGrid or :class:`Experiment`) and returns a Figure.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot,
no global state, no display needed): save one with ``fig.savefig(path)``, or
let a notebook show it. Many trials are drawn as one collection of lines, so a
1,000-trial experiment draws in a fraction of a second.

Every artist that carries data has a ``gid`` naming what it shows
(``"curves"``, ``"marks:stopped"``, ``"best"``, ``"edges"``, ...), so the
figure's content can be checked programmatically.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._data import (
    BUDGET,
    CLONED,
    ERRORED,
    PAUSED,
    STOPPED,
    Experiment,
    PlotError,
    TrialRecord,
    _number,
    load_experiment,
    looks_log,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "plot_intermediate_values",
    "plot_learning_curves",
    "plot_optimization_history",
    "plot_parallel_coordinates",
    "plot_param_importances",
    "plot_pareto_front",
    "plot_pbt_lineage",
    "plot_timeline",
]

#: how each kind of mark is drawn: (marker, color, size, legend label)
MARK_STYLE: dict[str, tuple[str, str, float, str]] = {
    STOPPED: ("x", "#d62728", 36.0, "stopped early"),
    BUDGET: ("|", "#222222", 60.0, "reached its budget"),
    PAUSED: ("o", "#ff7f0e", 22.0, "paused"),
    CLONED: ("^", "#9467bd", 34.0, "PBT clone (exploit)"),
    ERRORED: ("X", "#000000", 46.0, "error"),
}
_X_ALIASES = {"iteration": "training_iteration", "time": "time_total_s"}
_MAX_LEGEND_TRIALS = 10
#: trials the default fANOVA evaluator looks at (a seeded sample beyond)
MAX_FANOVA_TRIALS = 200


def _figure(w: float = 9.0, h: float = 5.0) -> Figure:
    return _figure_class()(figsize=(w, h), layout="constrained")


_FIGURE_CLASS: Any = None


def _figure_class() -> Any:
    """A Figure that shows itself as a PNG in Jupyter, without pyplot or an inline backend set up."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure as _Base

        class PlotFigure(_Base):
            def _repr_png_(self) -> bytes:
                import io

                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=100)
                return buf.getvalue()

        PlotFigure.__module__ = __name__
        PlotFigure.__qualname__ = "PlotFigure"
        globals()["PlotFigure"] = PlotFigure  # so that a figure pickles by reference to this module
        _FIGURE_CLASS = PlotFigure
    return _FIGURE_CLASS


def _title(ax: Axes, exp: Experiment, what: str, extra: str = "") -> None:
    name = exp.name or "experiment"
    ax.set_title(f"{name}: {what}" + (f"\n{extra}" if extra else ""), fontsize=11)


def _resolve_x(exp: Experiment, x: str) -> str:
    x = _X_ALIASES.get(x, x)
    if x != "training_iteration":
        exp.resolve_metric(x, where="x")
    return x


def _points(t: TrialRecord, metric: str, x: str, start: int, end: int) -> list[tuple[float, float]]:
    pts = []
    for i in range(start, end):
        r = t.results[i]
        yv = _number(r.get(metric))
        xv = _number(r.get(x)) if x != "training_iteration" else float(r.get("training_iteration", i + 1) or i + 1)
        if xv is not None and yv is not None:
            pts.append((xv, yv))
    return pts


def _point_at(t: TrialRecord, metric: str, x: str, index: int) -> tuple[float, float] | None:
    """The point of the last result at or before ``index`` that has both coordinates."""
    for i in range(min(index, len(t.results) - 1), -1, -1):
        pts = _points(t, metric, x, i, i + 1)
        if pts:
            return pts[0]
    return None


def _value_colors(values: list[float | None], mode: str | None) -> tuple[list[Any], Any, Any]:
    """Colors from the trials' values (best = bright yellow), and the norm/cmap for a colorbar."""
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    finite = [v for v in values if v is not None]
    cmap = colormaps["viridis" if mode == "max" else "viridis_r"]
    if not finite:
        return ["#1f77b4"] * len(values), None, None
    lo, hi = min(finite), max(finite)
    norm = Normalize(lo, hi if hi > lo else lo + 1e-12)
    return [cmap(norm(v)) if v is not None else (0.6, 0.6, 0.6, 0.6) for v in values], norm, cmap


def _mark_legend(ax: Axes, counts: dict[str, int], extra: list[Any] | None = None, outside: bool = False) -> None:
    handles = list(extra or [])
    from matplotlib.lines import Line2D

    for kind, n in counts.items():
        if n:
            marker, color, size, label = MARK_STYLE[kind]
            handles.append(Line2D([], [], ls="", marker=marker, color=color, markersize=math.sqrt(size),
                                  label=f"{label} ({n})"))
    if handles and outside:  # beside the axes: over them it would hide bars (the timeline's first trial is on top)
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    elif handles:
        ax.legend(handles=handles, fontsize=8, loc="best")


def _draw_marks(ax: Axes, exp: Experiment, metric: str, x: str, trials: Sequence[TrialRecord],
                kinds: Sequence[str] = (STOPPED, BUDGET, PAUSED, CLONED, ERRORED)) -> dict[str, int]:
    counts = {}
    for kind in kinds:
        xs, ys = [], []
        for t in trials:
            for m in t.marks:
                if m.kind != kind or m.index < 0:
                    continue
                p = _point_at(t, metric, x, m.index)
                if p is not None:
                    xs.append(p[0])
                    ys.append(p[1])
        marker, color, size, label = MARK_STYLE[kind]
        if xs:
            ax.scatter(xs, ys, marker=marker, c=color, s=size, zorder=4, linewidths=1.4, gid=f"marks:{kind}",
                       label=f"{label} ({len(xs)})")
        counts[kind] = len(xs)
    return counts


# ---------------------------------------------------------------------- learning curves


def plot_learning_curves(source: Any, metric: str | None = None, *, x: str = "training_iteration",
                         mode: str | None = None, log_y: bool | None = None,
                         trials: Sequence[str] | None = None) -> Figure:
    """Every trial's ``metric`` over ``x``, with the points where the scheduler acted on it.

    Marks (read from the journal's decisions): a red cross where a trial was
    stopped early, a bar where it reached its budget (``max_t`` or the stop
    criteria), an orange dot where it was paused (HyperBand, PBT), a purple
    triangle where PBT cloned another trial into it, a black cross where it
    failed. Lines are colored by each trial's last value (best is brightest);
    with up to 10 trials each has its own color and a legend entry, beyond
    that the best trial (by its last value) is drawn in red on top. A PBT
    trial's curve is broken where it took another trial's checkpoint.

    The y range follows what the trials reach, not their first iterations: when
    positive values span two orders of magnitude or more the axis is
    log-scaled; otherwise first-iteration values far above the rest are
    clipped (the title says so). Iteration ticks are whole numbers.

    Args:
        source: an experiment folder (``<storage_path>/<name>``), a ResultGrid or an :class:`Experiment`.
        metric: what to draw (default: the experiment's metric).
        x: ``"training_iteration"`` (default), ``"time"`` (``time_total_s``) or any reported metric.
        mode: "min"/"max", only to pick the colors (default: the experiment's).
        log_y: log-scale the y axis (True), never (False), or when the values
            span two orders of magnitude (None, the default).
        trials: trial ids to draw (default: all).

    Returns:
        A :class:`matplotlib.figure.Figure` (lines: gid ``"curves"``; marks: ``"marks:<kind>"``).

    Raises:
        PlotError: nothing reported yet, or a metric no trial reported (with a did-you-mean).

    Example:
        >>> fig = plot_learning_curves("./tuneplat_results/digits-asha", "val_loss")  # doctest: +SKIP
        >>> fig.savefig("curves.png")  # doctest: +SKIP
    """
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    exp = load_experiment(source)
    metric = exp.resolve_metric(metric)
    x = _resolve_x(exp, x)
    chosen = _select(exp, trials)
    try:
        mode = exp.resolve_mode(mode, metric)
    except PlotError:
        mode = None
    fig = _figure()
    ax = fig.add_subplot()
    segs, colors, ids = [], [], []
    few = len(chosen) <= _MAX_LEGEND_TRIALS
    last = [exp.final_value(t, metric, mode or "min") for t in chosen]
    value_colors, norm, cmap = _value_colors(last, mode)
    handles = []
    for n, (t, color) in enumerate(zip(chosen, value_colors)):
        c = f"C{n % 10}" if few else color
        for a, b in t.segments():
            pts = _points(t, metric, x, a, b)
            if pts:
                segs.append(pts)
                colors.append(c)
                ids.append(t.trial_id)
        if few:
            handles.append(Line2D([], [], color=c, label=_trial_label(t)))
    lc = LineCollection(segs, colors=colors, linewidths=1.4 if few else 0.9, alpha=0.9 if few else 0.7,
                        gid="curves")
    lc.trial_ids = ids  # type: ignore[attr-defined]
    ax.add_collection(lc)
    if segs:
        ax.autoscale_view()
    if mode is not None and not few:  # the best trial (by its last value, as get_best_result()) on top
        ranked = [(v if mode == "min" else -v, n) for n, v in enumerate(last) if v is not None]
        if ranked:
            best = chosen[min(ranked)[1]]
            for a, b in best.segments():
                pts = _points(best, metric, x, a, b)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color="#d62728", lw=1.8, zorder=3,
                            gid="best_curve")
            handles.append(Line2D([], [], color="#d62728", lw=1.8, label=f"best: {_trial_label(best)}"))
    counts = _draw_marks(ax, exp, metric, x, chosen)
    _mark_legend(ax, counts, handles)
    ys = [p[1] for seg in segs for p in seg if math.isfinite(p[1])]
    later = [p[1] for seg in segs for p in seg[1:] if math.isfinite(p[1])]  # each curve without its first point
    if log_y is None:
        log_y = bool(ys) and min(ys) > 0 and max(ys) / min(ys) >= 100.0
    clipped = ""
    if log_y:
        ax.set_yscale("log")
    elif ys and later:
        lo, hi = min(ys), max(ys)
        top = max(later)
        if top > lo and (hi - lo) > 3.0 * (top - lo):  # the first iterations would squash the rest
            pad = 0.05 * (top - lo)
            ax.set_ylim(lo - pad, top + pad)
            clipped = "; y clipped above the later iterations"
    if x == "training_iteration":
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(x)
    ax.set_ylabel(metric + (" (log scale)" if log_y else ""))
    stopped = sum(1 for t in chosen if t.stopped_early)
    _title(ax, exp, f"{metric} of {len(chosen)} trials",
           f"{stopped} stopped early" + (f" by {exp.scheduler}" if exp.scheduler and exp.scheduler != "fifo" else "")
           + clipped)
    ax.grid(alpha=0.3)
    return fig


def _trial_label(t: TrialRecord) -> str:
    from ..search._space import flatten_dict

    flat = flatten_dict(t.first_config or t.config)
    parts = []
    for k, v in list(flat.items())[:3]:
        parts.append(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}")
    return f"{t.trial_id} " + " ".join(parts)


def _select(exp: Experiment, trials: Sequence[str] | None) -> list[TrialRecord]:
    if trials is None:
        return [t for t in exp.trials if t.results]
    by_id = {t.trial_id: t for t in exp.trials}
    missing = [tid for tid in trials if tid not in by_id]
    if missing:
        raise PlotError(f"trials={list(trials)!r}: no trial {missing[0]!r} in {exp.path}; "
                        f"its trials are {', '.join(list(by_id)[:8])}{' ...' if len(by_id) > 8 else ''}.")
    return [by_id[tid] for tid in trials]


# ---------------------------------------------------------------------- intermediate values (Optuna's view)


def plot_intermediate_values(source: Any, metric: str | None = None) -> Figure:
    """Optuna's intermediate-values view: each trial's reports, colored by how the trial ended.

    Blue: ran to its end; red: stopped early (pruned); black: failed; grey:
    paused or still running. Compared with :func:`plot_learning_curves` the
    colors say *which trials were pruned* rather than how good they were.

    Returns:
        A Figure; one LineCollection per outcome (gid ``"intermediate:<outcome>"``).
    """
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    exp = load_experiment(source)
    metric = exp.resolve_metric(metric)
    fig = _figure()
    ax = fig.add_subplot()
    groups: dict[str, list[list[tuple[float, float]]]] = {"complete": [], "pruned": [], "failed": [], "unfinished": []}
    colors = {"complete": "#1f77b4", "pruned": "#d62728", "failed": "#000000", "unfinished": "#999999"}
    counts = dict.fromkeys(groups, 0)
    for t in exp.trials:
        if not t.results:
            continue
        g = ("failed" if t.status == "ERROR" else "pruned" if t.stopped_early
             else "complete" if t.status == "TERMINATED" else "unfinished")
        drew = False
        for a, b in t.segments():
            pts = _points(t, metric, "training_iteration", a, b)
            if pts:
                groups[g].append(pts)
                drew = True
        counts[g] += drew
    handles = []
    for g, segs in groups.items():
        if segs:
            ax.add_collection(LineCollection(segs, colors=colors[g], linewidths=0.9, alpha=0.75,
                                             gid=f"intermediate:{g}"))
            handles.append(Line2D([], [], color=colors[g], label=f"{g} ({counts[g]})"))
    ax.autoscale_view()
    ax.legend(handles=handles, fontsize=8)
    ax.set_xlabel("training_iteration")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    _title(ax, exp, f"intermediate values of {metric}")
    return fig


# ---------------------------------------------------------------------- optimization history


def plot_optimization_history(source: Any, metric: str | None = None, mode: str | None = None, *,
                              scope: str = "last") -> Figure:
    """Each trial's value in creation order, and the best value so far (Optuna's optimization history).

    Args:
        metric, mode: the objective (default: the experiment's).
        scope: which value of a trial counts: "last" (its last result, as
            ``get_best_result()``) or "all" (the best it ever reported).

    Returns:
        A Figure: trial values (gids ``"values:complete"``, ``"values:stopped"``)
        and the best-so-far step line (gid ``"best"``).
    """
    exp = load_experiment(source)
    metric = exp.resolve_metric(metric)
    mode = exp.resolve_mode(mode, metric)
    if scope not in ("last", "all"):
        raise PlotError(f"The value of `scope` is {scope!r}, but must be 'last' or 'all'.")
    fig = _figure(9, 4.5)
    ax = fig.add_subplot()
    xs_c, ys_c, xs_s, ys_s = [], [], [], []
    best_x, best_y = [], []
    best: float | None = None
    best_trial = None
    for n, t in enumerate(exp.trials):
        v = exp.final_value(t, metric, mode, scope)
        if v is None:
            continue
        if t.stopped_early:
            xs_s.append(n)
            ys_s.append(v)
        else:
            xs_c.append(n)
            ys_c.append(v)
        if best is None or (v < best if mode == "min" else v > best):
            best, best_trial = v, (n, t)
        best_x.append(n)
        best_y.append(best)
    if best is None:
        raise PlotError(f"{exp.path}: no trial has a final {metric!r} to rank.")
    ax.scatter(xs_c, ys_c, s=14, c="#1f77b4", label=f"trial ({len(xs_c)})", gid="values:complete", zorder=3)
    if xs_s:
        ax.scatter(xs_s, ys_s, s=10, c="#bbbbbb", label=f"stopped early ({len(xs_s)})", gid="values:stopped", zorder=2)
    ax.step(best_x, best_y, where="post", color="#d62728", lw=1.6, label="best so far", gid="best")
    assert best_trial is not None
    ax.scatter([best_trial[0]], [best], marker="*", s=140, c="#d62728", zorder=4, gid="best_trial")
    ax.annotate(f"{best_trial[1].trial_id}: {best:.4g}", (best_trial[0], best), textcoords="offset points",
                xytext=(6, 6), fontsize=8)
    ax.set_xlabel("trial (creation order)")
    ax.set_ylabel(f"{metric} ({'last' if scope == 'last' else 'best'} value)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _title(ax, exp, f"optimization history ({mode} {metric})")
    return fig


# ---------------------------------------------------------------------- parameter importances


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


# ---------------------------------------------------------------------- parallel coordinates


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
    keys, rows = exp.param_table()
    if params is not None:
        known = {k for r in rows for k in r}
        bad = [p for p in params if p not in known]
        if bad:
            raise PlotError(f"params={params!r}: {bad} not in the configs; the config keys are "
                            f"{', '.join(sorted(known))}.")
        keys = list(params)
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


# ---------------------------------------------------------------------- PBT lineage


def plot_pbt_lineage(source: Any, metric: str | None = None, *, x: str = "training_iteration") -> Figure:
    """PBT's family tree: which trial cloned which, when, into what config; and the metric beside it.

    Left: one row per trial, a bar over the iterations it ran with each
    config; an arrow from the donor (at the iteration of the checkpoint it
    gave) to the recipient (where it continued from that checkpoint),
    labelled with the recipient's new values of the parameters that changed
    (up to 40 arrows); a bar's color stands for its config (a clone that kept
    its donor's config has the donor's color). Right: the metric over the same
    axis, broken where each clone happened.

    Args:
        x: ``"training_iteration"`` (default) or ``"time"`` (seconds since the experiment started,
            from the results' ``timestamp`` and the journal's exploit times).

    Returns:
        A Figure; the arrows are one LineCollection (gid ``"edges"``, one segment per exploit).

    Raises:
        PlotError: the experiment has no exploit (it did not run PopulationBasedTraining).
    """
    from matplotlib.collections import LineCollection

    exp = load_experiment(source)
    metric = exp.resolve_metric(metric)
    exploits = [(t, e) for t in exp.trials for e in t.exploits]
    if not exploits:
        raise PlotError(f"{exp.path}: no PBT exploit in this experiment (scheduler: {exp.scheduler or 'unknown'}); "
                        "the lineage plot needs PopulationBasedTraining (or PB2) that cloned at least one trial.")
    if x not in ("training_iteration", "iteration", "time"):
        raise PlotError(f"x={x!r}: the lineage is drawn over 'training_iteration' or 'time'.")
    use_time = x == "time"
    t0 = exp.start_time or 0.0
    rows = {t.trial_id: n for n, t in enumerate(exp.trials)}
    by_id = {t.trial_id: t for t in exp.trials}

    def xpos(t: TrialRecord, i: int) -> float:
        r = t.results[i]
        if use_time:
            ts = _number(r.get("timestamp"))
            return (ts - t0) if ts is not None and ts > 1e8 else float(r.get("time_total_s", 0.0) or 0.0)
        return float(r.get("training_iteration", i + 1) or i + 1)

    def donor_x(donor: TrialRecord, from_iteration: Any) -> float | None:
        for i in range(len(donor.results) - 1, -1, -1):
            if donor.results[i].get("training_iteration") == from_iteration:
                return xpos(donor, i)
        return float(from_iteration) if isinstance(from_iteration, (int, float)) and not use_time else None

    fig = _figure(13, max(4.0, min(14.0, 1.2 + 0.32 * len(exp.trials))))
    ax_tree, ax_val = fig.subplots(1, 2, width_ratios=[1.2, 1])
    bars, bar_colors = [], []
    palette: dict[str, str] = {}  # one color per distinct config: a clone shares its donor's color until perturbed

    def config_color(cfg: Any) -> str:
        key = json.dumps(cfg, sort_keys=True, default=repr)
        return palette.setdefault(key, f"C{len(palette) % 10}")

    for t in exp.trials:
        y = rows[t.trial_id]
        by_index = {e.get("index"): e for e in t.exploits}
        for a, b in t.segments():
            e = by_index.get(a)
            start = xpos(t, a)
            if e is not None and not use_time and isinstance(e.get("from_iteration"), (int, float)):
                start = float(e["from_iteration"])
            elif e is not None and use_time and e.get("time"):
                start = e["time"] - t0
            bars.append([(start, y), (xpos(t, b - 1), y)])
            bar_colors.append(config_color(e["new_config"] if e is not None else (t.first_config or t.config)))
    lw = max(0.8, min(5.0, 160.0 / max(len(exp.trials), 1)))
    ax_tree.add_collection(LineCollection(bars, colors=bar_colors, linewidths=lw, alpha=0.55, gid="segments"))
    edges, labels = [], []
    for t, e in exploits:
        donor = by_id.get(str(e.get("from_trial")))
        if donor is None:
            continue
        x0 = donor_x(donor, e.get("from_iteration"))
        idx = e.get("index", len(t.results))
        if use_time:
            x1 = ((e["time"] - t0) if e.get("time") else (xpos(t, idx) if idx < len(t.results) else None))
        else:
            x1 = float(e.get("from_iteration") or e.get("iteration") or 0)
        if x0 is None or x1 is None:
            continue
        edges.append([(x0, rows[donor.trial_id]), (x1, rows[t.trial_id])])
        old, new = e.get("old_config") or {}, e.get("new_config") or {}
        changed = [k for k in new if new.get(k) != old.get(k)]
        labels.append(((x1, rows[t.trial_id]), ", ".join(_short(k, new[k]) for k in changed[:2])))
    ax_tree.add_collection(LineCollection(edges, colors="#555555", linewidths=1.0, linestyles="--", gid="edges"))
    for (x0, y0), (x1, y1) in edges if len(edges) <= 60 else []:  # arrow heads: one artist each
        ax_tree.annotate("", xy=(x1, y1), xytext=(x0, y0),
                         arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 1.0, "shrinkA": 0, "shrinkB": 2})
    if len(labels) <= 40:
        for (px, py), text in labels:
            ax_tree.text(px, py + 0.18, text, fontsize=7, color="#333333")
    ax_tree.autoscale_view()
    if len(exp.trials) <= 40:
        ax_tree.set_yticks(range(len(exp.trials)), [t.trial_id for t in exp.trials], fontsize=7)
    else:
        ax_tree.set_ylabel("trial (creation order)")
    ax_tree.set_ylim(-0.6, len(exp.trials) - 0.3)
    ax_tree.invert_yaxis()
    ax_tree.set_xlabel("seconds since start" if use_time else "training_iteration")
    _title(ax_tree, exp, f"PBT lineage ({len(edges)} clones)", "arrow: donor's checkpoint → recipient")
    curves, cc = [], []
    for t in exp.trials:
        for a, b in t.segments():
            pts = [(xpos(t, i), v) for i in range(a, b) if (v := _number(t.results[i].get(metric))) is not None]
            if pts:
                curves.append(pts)
                cc.append(f"C{rows[t.trial_id] % 10}")
    ax_val.add_collection(LineCollection(curves, colors=cc, linewidths=1.2, gid="curves"))
    ax_val.autoscale_view()
    ax_val.set_xlabel(ax_tree.get_xlabel())
    ax_val.set_ylabel(metric)
    ax_val.grid(alpha=0.3)
    ax_val.set_title(f"{metric} (broken at each clone)", fontsize=11)
    return fig


def _short(k: str, v: Any) -> str:
    return f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"


# ---------------------------------------------------------------------- scheduler decisions timeline


def plot_timeline(source: Any) -> Figure:
    """When each trial ran (wall clock) and what the scheduler decided about it.

    One row per trial (creation order, first on top): a bar for each attempt,
    colored by how it ended (finished, paused, failed, errored, interrupted);
    marks where the scheduler stopped, paused or cloned it. Time is the tuner's
    wall clock, in seconds since the experiment started.

    Returns:
        A Figure; the bars are one LineCollection (gid ``"spans"``), marks ``"marks:<kind>"``.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    exp = load_experiment(source)
    exp.require_results()
    starts = [s for t in exp.trials for s, _e, _h in t.spans]
    t0 = exp.start_time if exp.start_time is not None else (min(starts) if starts else 0.0)
    colors = {"terminated": "#1f77b4", "paused": "#ff7f0e", "failed": "#8c564b", "error": "#000000",
              "interrupted": "#999999", "running": "#2ca02c"}
    segs, cs, used = [], [], set()
    n = len(exp.trials)
    known = [e for t in exp.trials for _s, e, _h in t.spans if e is not None] + starts
    now = max(known + [m.time for t in exp.trials for m in t.marks if m.time is not None]) if known else t0
    lw = max(0.6, min(8.0, 300.0 / max(n, 1)))
    for row, t in enumerate(exp.trials):
        for s, e, how in t.spans:
            end = e if e is not None else now  # still running: up to the last thing the journal recorded
            segs.append([(s - t0, row), (max(end, s) - t0, row)])
            cs.append(colors.get(how, "#1f77b4"))
            used.add(how)
    fig = _figure(10, max(3.5, min(12.0, 1.5 + 0.22 * n)))
    ax = fig.add_subplot()
    ax.add_collection(LineCollection(segs, colors=cs, linewidths=lw, gid="spans"))
    counts = {}
    for kind in (STOPPED, PAUSED, CLONED, ERRORED):
        xs, ys = [], []
        for row, t in enumerate(exp.trials):
            for m in t.marks:
                if m.kind == kind and m.time is not None:
                    xs.append(m.time - t0)
                    ys.append(row)
        if xs:
            marker, color, size, label = MARK_STYLE[kind]
            ax.scatter(xs, ys, marker=marker, c=color, s=size * (0.6 if n > 100 else 1.0), zorder=3,
                       gid=f"marks:{kind}")
        counts[kind] = len(xs)
    ax.autoscale_view()
    ax.set_ylim(n - 0.5, -0.5)
    if n <= 40:
        ax.set_yticks(range(n), [t.trial_id for t in exp.trials], fontsize=7)
    else:
        ax.set_ylabel("trial (creation order)")
    ax.set_xlabel("seconds since the experiment started (tuner's clock)")
    handles = [Line2D([], [], color=colors[h], lw=4, label=f"attempt ended: {h}") for h in colors if h in used]
    _mark_legend(ax, counts, handles, outside=True)
    ax.grid(axis="x", alpha=0.3)
    _title(ax, exp, f"timeline of {n} trials and the scheduler's decisions")
    return fig


# ---------------------------------------------------------------------- Pareto front


def plot_pareto_front(source: Any, metrics: Sequence[str] | None = None, modes: Sequence[str] | None = None) -> Figure:
    """Every trial's last values of two objectives, the non-dominated ones highlighted and joined.

    Args:
        metrics, modes: two (or more: the first two are drawn) objectives and their modes
            (default: the experiment's ``TuneConfig(metric=[...], mode=[...])``).

    Returns:
        A Figure: the trials that ran to their end (gid ``"trials"``), those a scheduler stopped early
        (MO-ASHA; hollow, gid ``"stopped"``: their values are at a lower fidelity), the front (gid ``"front"``).
    """
    from ..search._pareto import pareto_front

    exp = load_experiment(source)
    ms, ds = exp.objectives(metrics, modes)
    rows: list[list[float] | None] = []
    for t in exp.trials:
        vals = [exp.final_value(t, m, d) for m, d in zip(ms, ds)]
        rows.append(None if any(v is None for v in vals) else [float(v) for v in vals if v is not None])
    front = pareto_front(rows, ds)
    pts = [(r[0], r[1]) for r in rows if r is not None]
    if not pts:
        raise PlotError(f"{exp.path}: no trial reported all of {ms}.")
    fig = _figure(7, 5.5)
    ax = fig.add_subplot()
    # trials a scheduler stopped early (MO-ASHA, HyperBand) show their values at a lower fidelity: hollow
    early = [bool(getattr(t, "stopped_early", False)) for t, r in zip(exp.trials, rows) if r is not None]
    full = [p for p, e in zip(pts, early) if not e]
    cut = [p for p, e in zip(pts, early) if e]
    ax.scatter([p[0] for p in full], [p[1] for p in full], s=14, c="#9e9e9e", label=f"trials ({len(full)})",
               gid="trials")
    if cut:
        ax.scatter([p[0] for p in cut], [p[1] for p in cut], s=16, facecolors="none", edgecolors="#9e9e9e",
                   label=f"stopped early by the scheduler ({len(cut)})", gid="stopped")
    fp = sorted((rows[i][0], rows[i][1]) for i in front if rows[i] is not None)  # type: ignore[index]
    ax.scatter([p[0] for p in fp], [p[1] for p in fp], s=30, c="#d62728", zorder=3, label=f"Pareto front ({len(fp)})",
               gid="front")
    ax.plot([p[0] for p in fp], [p[1] for p in fp], color="#d62728", lw=1.0, alpha=0.6)
    ax.set_xlabel(f"{ms[0]} ({ds[0]})")
    ax.set_ylabel(f"{ms[1]} ({ds[1]})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    extra = f"objectives {', '.join(ms[2:])} not drawn" if len(ms) > 2 else ""
    _title(ax, exp, "Pareto front", extra)
    return fig
