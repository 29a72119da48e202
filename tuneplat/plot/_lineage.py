"""What the scheduler did over time: PBT's lineage of clones, and the timeline of trials and decisions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._data import CLONED, ERRORED, PAUSED, STOPPED, PlotError, TrialRecord, _number, load_experiment
from ._plots import MARK_STYLE, _figure, _mark_legend, _title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_pbt_lineage", "plot_timeline"]


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
