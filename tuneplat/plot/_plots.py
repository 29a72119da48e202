"""What every plot shares: the Figure class, marks, colors and axes.

The plots are in :mod:`._curves`, :mod:`._history`, :mod:`._params` and
:mod:`._lineage`; each takes an experiment (folder, ResultGrid or
:class:`Experiment`) and returns a Figure.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot,
no global state, no display needed): save one with ``fig.savefig(path)``, or
let a notebook show it. Many trials are drawn as one collection of lines, so a
1,000-trial experiment draws in a fraction of a second.

Every artist that carries data has a ``gid`` naming what it shows
(``"curves"``, ``"marks:stopped"``, ``"best"``, ``"edges"``, ...), so the
figure's content can be checked programmatically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._data import (
    BUDGET,
    CLONED,
    ERRORED,
    PAUSED,
    STOPPED,
    Experiment,
    TrialRecord,
    _number,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["MARK_STYLE"]

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


def __getattr__(name: str) -> Any:
    if name == "PlotFigure":  # a pickled figure names its class here; it is made on first use (matplotlib loads late)
        return _figure_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
