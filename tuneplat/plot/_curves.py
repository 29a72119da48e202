"""Curves over iterations: every trial's learning curve with the scheduler's marks, and Optuna's
intermediate-values view."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._data import Experiment, PlotError, TrialRecord, load_experiment
from ._plots import _MAX_LEGEND_TRIALS, _draw_marks, _figure, _mark_legend, _points, _resolve_x, _title, _value_colors

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_intermediate_values", "plot_learning_curves"]


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
