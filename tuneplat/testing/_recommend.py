"""``tuneplat simulate EXP --recommend``: which scheduler would have found a good result for the least compute.

The recorded learning curves are replayed (see :mod:`tuneplat.testing._simulate`)
under a small grid of schedulers and settings — ASHA (η and grace period),
HyperBand, PASHA, the median stopping rule — and two baselines: "train every
trial one iteration, then keep the top k" (replayed as the scheduler that does
it, ``ASHAScheduler(rung_levels=[1], reduction_factor=n // k)``) and "train
everything" (FIFO). Each candidate is scored by the trial-seconds it would have
spent until some trial reported a value within the tolerance of the best value
recorded; candidates that never get there rank last.

A recorded curve ends where the recorded run's scheduler stopped it. When a
candidate would have trained such a trial further *before* its figure was
reached, the replay cannot know what that would have cost: the figure is a
lower bound (shown ``>=``), an interval with no known upper end. Ranking goes by
what is known: an exact figure ranks above every bound (a bound may or may not
beat it), bounds rank among themselves by their lower end, and the winner line
says when its figure is a bound (only when no candidate has an exact figure).
The winner is printed as a ready-to-paste constructor and a sweep-file line.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..core._replay import load_trials
from ._simulate import SimulationReport, _curve_of, simulate

__all__ = ["Candidate", "Recommendation", "parse_tolerance", "recommend"]

logger = logging.getLogger("tuneplat")

#: sweep-file type of each scheduler class the grid uses
_SWEEP_TYPE = {"ASHAScheduler": "asha", "HyperBandScheduler": "hyperband", "PASHAScheduler": "pasha",
               "MedianStoppingRule": "median_stopping_rule", "FIFOScheduler": "fifo"}


@dataclass
class Candidate:
    """One scheduler (or baseline) replayed on the recorded curves."""

    label: str
    scheduler: str  # class name (or "baseline")
    settings: dict[str, Any]
    compute_to_target: float | None  # trial-seconds until a result within the tolerance; None: never
    compute_total: float
    iterations: int
    best_value: float | None
    truncated: int = 0  # curves that ended (recorded) before this candidate would have stopped them
    note: str = ""
    #: ``compute_to_target`` (or "never") is only a lower bound: a curve the recorded run cut short ran out
    #: before it was reached, and this candidate would have trained that trial further meanwhile
    bound: bool = False

    @property
    def reached(self) -> bool:
        return self.compute_to_target is not None

    def figure(self) -> str:
        """``compute_to_target`` as the table shows it: ``12.3``, ``>=12.3`` (a lower bound), ``never``."""
        if self.compute_to_target is None:
            return "never (within the recorded curves)" if self.bound else "never"
        return f"{'>=' if self.bound else ''}{self.compute_to_target:.1f}"


@dataclass
class Recommendation:
    """The candidates ranked (best first), the target and the winner as code."""

    experiment: str
    metric: str
    mode: str
    best_recorded: float
    target: float
    tolerance: float
    slots: int
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def winner(self) -> Candidate:
        return self.candidates[0]

    def constructor(self) -> str:
        """The winner as Python (``tuneplat.schedulers``), ready to paste."""
        w = self.winner
        args = {"metric": self.metric, "mode": self.mode, **w.settings}
        text = ", ".join(f"{k}={v!r}" for k, v in args.items())
        return f"{w.scheduler}({text})"

    def sweep_snippet(self) -> str:
        """The winner as a sweep-file line (``scheduler: {type: ..., ...}``)."""
        w = self.winner
        items = [f"type: {_SWEEP_TYPE.get(w.scheduler, w.scheduler)}"]
        items += [f"{k}: {_yaml(v)}" for k, v in w.settings.items()]
        return "scheduler: {" + ", ".join(items) + "}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment, "metric": self.metric, "mode": self.mode,
            "best_recorded": self.best_recorded, "target": self.target, "tolerance": self.tolerance,
            "slots": self.slots, "winner": self.winner.label, "constructor": self.constructor(),
            "sweep": self.sweep_snippet(),
            "candidates": [{**c.__dict__, "reached": c.reached} for c in self.candidates],
        }

    def table(self) -> str:
        rows = [("candidate", "trial-s to target", "trial-s total", "iterations", f"best {self.metric}", "")]
        for c in self.candidates:
            rows.append((
                c.label,
                c.figure(),
                f"{c.compute_total:.1f}", str(c.iterations),
                "-" if c.best_value is None else f"{c.best_value:.6g}",
                (f"{c.truncated} curve(s) cut short; " if c.truncated else "") + c.note,
            ))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"{self.experiment}: best {self.metric} recorded {self.best_recorded:.6g}; target "
                 f"{'<=' if self.mode == 'min' else '>='} {self.target:.6g} (tolerance {self.tolerance:.4g}), "
                 f"{self.slots} slot(s)"]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        w = self.winner
        if not w.reached:
            lines.append("No candidate reached the target: the tolerance is too tight for these curves.")
        head = f"winner: {w.label}"
        if w.bound and w.reached:
            head += (f" (its {w.compute_to_target:.1f} trial-s is a lower bound: {w.truncated} curve(s) the recorded "
                     "run cut short would have trained on before it; no candidate has an exact figure)")
        lines += ["", head, f"  {self.constructor()}", f"  {self.sweep_snippet()}"]
        if w.note:
            lines.append(f"  ({w.note})")
        return "\n".join(lines)


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value) if isinstance(value, (int, float)) else repr(value)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def parse_tolerance(text: str | float) -> tuple[float, bool]:
    """``"1%"`` → (0.01, relative); ``"0.005"`` or 0.005 → (0.005, absolute).

    Raises:
        ValueError: not a number >= 0 (or a percentage).
    """
    raw = str(text).strip()
    relative = raw.endswith("%")
    try:
        value = float(raw[:-1]) / 100.0 if relative else float(raw)
    except ValueError:
        raise ValueError(f"The value of `tolerance` is {text!r}, but must be a number >= 0 (absolute, in the "
                         "metric's units) or a percentage like '1%' (of the best value).") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"The value of `tolerance` is {text!r}, but must be `tolerance >= 0`.")
    return value, relative


def _compute_to(timeline: list[tuple[float, float, Any]], good: Any) -> tuple[float | None, float | None]:
    """Trial-seconds spent until a result is ``good``, and the virtual time of that result (None, None: never)."""
    spent = 0.0
    for at, cost, value in timeline:
        spent += cost
        v = _finite(value)
        if v is not None and good(v):
            return spent, at
    return None, None


def _grid(max_t: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, scheduler name for simulate, settings)."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for eta in (2, 3, 4):
        for grace in (1, 2, 4):
            if grace < max_t:
                out.append((f"asha eta={eta} grace={grace}", "asha",
                            {"max_t": max_t, "grace_period": grace, "reduction_factor": eta}))
    for eta in (2, 3):
        if eta <= max_t:
            out.append((f"hyperband eta={eta}", "hyperband", {"max_t": max_t, "reduction_factor": eta}))
    for eta in (2, 3, 4):
        if eta < max_t:
            out.append((f"pasha eta={eta}", "pasha", {"max_t": max_t, "grace_period": 1, "reduction_factor": eta}))
    for grace in (1, 2, 4):
        if grace < max_t:
            out.append((f"median grace={grace}", "median", {"time_attr": "training_iteration", "grace_period": grace,
                                                             "min_samples_required": 3}))
    return out


def recommend(experiment_path: str, *, tolerance: str | float = "1%", slots: int | None = None,
              metric: str | None = None, mode: str | None = None, top_k: tuple[int, ...] = (1, 3)) -> Recommendation:
    """Replay the experiment under a grid of schedulers and rank them by compute to a near-best result.

    Args:
        experiment_path: the experiment folder (it holds ``journal.jsonl``).
        tolerance: how close to the best recorded value counts as found: absolute
            (``0.005``) or relative to the best value (``"1%"``, the default).
        slots: trials at once (default: the most the recorded run had).
        metric, mode: default: the experiment's (one metric).
        top_k: the ``k`` of the "one iteration each, keep the top k" baselines.

    Returns:
        The candidates ranked: those that reach the target by compute spent until
        they did (then total compute), the others after them.

    Example:
        >>> rec = recommend("tuneplat_results/digits-asha", tolerance="0.5%")  # doctest: +SKIP
        >>> print(rec.table())  # doctest: +SKIP
    """
    path = os.path.abspath(os.fspath(experiment_path))
    tol, relative = parse_tolerance(tolerance)
    probe: SimulationReport = simulate(path, "fifo", {}, slots=slots, metric=metric, mode=mode)
    metric, mode, slots = probe.metric, probe.mode, probe.slots
    if isinstance(metric, list):
        raise ValueError(f"{path}: the experiment has several objectives {metric}; --recommend ranks schedulers by "
                         "the compute to a near-best value of one: use tuneplat.testing.recommend(path, metric=..., "
                         "mode=...), or compare MO-ASHA settings with tuneplat simulate --scheduler asha")
    trials, _ = load_trials(path)
    curves = {t.trial_id: _curve_of(t) for t in trials if t.results}
    values = [v for c in curves.values() for v in (_finite(r.get(metric)) for r in c) if v is not None]
    if not values:
        raise ValueError(f"{path}: no finite {metric!r} was recorded: nothing to compare schedulers on")
    sign = 1.0 if mode == "min" else -1.0
    best = min(values) if mode == "min" else max(values)
    margin = tol * abs(best) if relative else tol
    target = best + sign * margin

    def good(v: float) -> bool:
        return sign * v <= sign * target + 1e-12

    max_t = max(len(c) for c in curves.values())
    candidates: list[Candidate] = []

    def add(label: str, name: str, settings: dict[str, Any], report: SimulationReport, note: str = "") -> None:
        seen = [v for v in (_finite(x[2]) for x in report.timeline) if v is not None]
        best_seen = (min(seen) if mode == "min" else max(seen)) if seen else None
        spent, at = _compute_to(report.timeline, good)
        # a lower bound when a cut-short curve ran out before the figure was reached (then this scheduler would
        # have spent more on it meanwhile); at or after it, the extra training comes too late to count
        bound = any(end < at for end in report.truncated_at) if at is not None else report.truncated > 0
        candidates.append(Candidate(label, name, settings, spent, report.simulated.trial_seconds,
                                    report.simulated.iterations, best_seen, report.truncated, note, bound))

    add("fifo (train everything)", "FIFOScheduler", {}, probe)
    grid = _grid(max_t)
    n = len(curves)
    for k in sorted({min(k, n) for k in top_k if k >= 1}):
        eta = max(2, n // k)
        grid.append((f"1 iteration each, keep top {k}", "asha",
                     {"max_t": max_t, "rung_levels": [1], "reduction_factor": eta}))
    for label, name, settings in grid:
        try:
            report = simulate(path, name, settings, slots=slots, metric=metric, mode=mode)
        except ValueError as exc:  # a setting this experiment cannot take: leave it out, say so in the log
            logger.info("tuneplat: recommend: %s skipped: %s", label, exc)
            continue
        note = ""
        if "rung_levels" in settings:
            note = (f"asynchronous: a trial goes on past iteration 1 when it is in the top 1/"
                    f"{settings['reduction_factor']} of those seen there so far")
        add(label, {"asha": "ASHAScheduler", "hyperband": "HyperBandScheduler", "pasha": "PASHAScheduler",
                    "median": "MedianStoppingRule"}[name], settings, report, note)
    candidates.sort(key=_rank)
    return Recommendation(path, metric, mode, best, target, margin, slots, candidates)


def _rank(c: Candidate) -> tuple[Any, ...]:
    """Reached with an exact figure, by figure; then reached with a lower bound, by its lower end (an exact figure
    is never ranked below a bound that may not beat it); then never reached ("never within the recorded curves",
    which a longer run might change, before a certain "never"). Ties: less total compute first."""
    if c.reached:
        return (0, c.bound, c.compute_to_target, c.compute_total)
    return (1, not c.bound, 0.0, c.compute_total)
