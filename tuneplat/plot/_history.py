"""Trials compared by their outcome: the optimization history and, for several objectives, the Pareto front."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._data import PlotError, load_experiment
from ._plots import _figure, _title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_optimization_history", "plot_pareto_front"]


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
