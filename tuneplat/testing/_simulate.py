"""``tuneplat simulate``: what another scheduler would have spent and found on an experiment you already ran.

The recorded learning curves (the journal's results, superseded ones left
out) are replayed through the real tuner in virtual time
(:class:`~tuneplat.testing.VirtualTimeExecutor`), with the same configs in
the same order, under the scheduler you name. Each iteration takes the time
it took when it was recorded; trials start as slots free up (as many slots as
the recorded run had trials running at once, unless told otherwise).

A recorded curve ends where its trial ended: a trial that the recorded
scheduler stopped early cannot be continued further by a more patient one. Such
trials are counted as ``truncated`` in the report, so read a more patient
scheduler's figures as a lower bound.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import schedulers as _schedulers
from .._config import RunConfig, TuneConfig
from .._tuner import Tuner
from ..core._replay import ExperimentState, load_state
from ..core._trial import Trial
from ..execution._executor import TrialSpec
from ..search._searcher import Searcher
from ._virtual import VirtualTimeExecutor

__all__ = ["SCHEDULER_NAMES", "SimulationReport", "simulate"]

#: the names ``tuneplat simulate --scheduler`` takes (as in sweep files)
SCHEDULER_NAMES = {
    "fifo": "FIFOScheduler",
    "asha": "ASHAScheduler",
    "async_hyperband": "AsyncHyperBandScheduler",
    "hyperband": "HyperBandScheduler",
    "pasha": "PASHAScheduler",
    "median": "MedianStoppingRule",
    "median_stopping": "MedianStoppingRule",
    "pbt": "PopulationBasedTraining",
}


@dataclass
class RunFigures:
    """What a run spent and found."""

    trials: int
    iterations: int
    trial_seconds: float
    best_value: float | None
    best_trial: str | None
    best_config: dict[str, Any] | None
    #: several objectives: trials on the Pareto front of the last values, and (two objectives) its hypervolume
    #: against a reference point shared by the recorded and the simulated run (the worst last values, +10%)
    pareto_size: int | None = None
    hypervolume: float | None = None


@dataclass
class SimulationReport:
    """The recorded run beside the simulated one; ``stops`` maps trial id → iteration it was stopped at."""

    experiment: str
    metric: Any  # a name, or a list of names (several objectives)
    mode: Any
    scheduler: str
    settings: dict[str, Any]
    slots: int
    recorded: RunFigures
    simulated: RunFigures
    truncated: int
    stops: dict[str, int] = field(default_factory=dict)
    recorded_stops: dict[str, int] = field(default_factory=dict)
    #: every simulated result in virtual-time order: ``(virtual time, trial-seconds of that iteration, metric value)``
    timeline: list[tuple[float, float, Any]] = field(default_factory=list, repr=False)
    #: the virtual time at which each ``truncated`` curve ran out: from then on the simulated scheduler would
    #: have trained that trial further, so any figure taken after it is a lower bound
    truncated_at: list[float] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("timeline", None)
        out.pop("truncated_at", None)
        return out

    def table(self) -> str:
        r, s = self.recorded, self.simulated

        def ratio(a: float, b: float) -> str:
            return f"{b / a:.2f}x" if a else "-"

        def best(f: RunFigures) -> str:
            return "-" if f.best_value is None else f"{f.best_value:.6g} ({f.best_trial})"

        rows = [
            ("", "recorded", f"simulated: {self.scheduler}", "simulated/recorded"),
            ("trials", str(r.trials), str(s.trials), ""),
            ("iterations", str(r.iterations), str(s.iterations), ratio(r.iterations, s.iterations)),
            ("trial-time (s)", f"{r.trial_seconds:.1f}", f"{s.trial_seconds:.1f}", ratio(r.trial_seconds, s.trial_seconds)),
            (f"best {self.metric} ({self.mode})", best(r), best(s), ""),
        ]
        if r.pareto_size is not None:  # several objectives
            rows[-1] = ("Pareto front (trials)", str(r.pareto_size), str(s.pareto_size), "")
            if r.hypervolume is not None and s.hypervolume is not None:
                rows.append(("hypervolume", f"{r.hypervolume:.6g}", f"{s.hypervolume:.6g}",
                             ratio(r.hypervolume, s.hypervolume)))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        settings = ", ".join(f"{k}={v!r}" for k, v in self.settings.items()) or "defaults"
        lines.insert(0, f"{self.experiment}: replayed under {self.scheduler} ({settings}), {self.slots} slot(s)")
        if self.truncated:
            lines.append(f"{self.truncated} recorded curve(s) were cut short by the recorded run's scheduler before "
                         "the simulated one would have stopped them: its figures are lower bounds.")
        return "\n".join(lines)


class _ReplaySearcher(Searcher):
    """Suggests the recorded configs in their recorded order, and remembers which trial got which."""

    def __init__(self, recorded: list[Trial]) -> None:
        super().__init__()
        self._recorded = recorded
        self._next = 0
        self.assigned: dict[str, Trial] = {}

    def set_search_properties(self, metric: Any, mode: Any, config: Mapping[str, Any] | None, **spec: Any) -> bool:
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._next >= len(self._recorded):
            return Searcher.FINISHED
        trial = self._recorded[self._next]
        self._next += 1
        self.assigned[trial_id] = trial
        return dict(trial.config)


def _curve_of(trial: Trial) -> list[dict[str, Any]]:
    """A recorded trial's learning curve: its results, one per training_iteration (the latest record of each)."""
    by_iteration: dict[int, dict[str, Any]] = {}
    for r in trial.results:
        it = r.get("training_iteration")
        if isinstance(it, int):
            by_iteration[it] = r
    return [by_iteration[i] for i in sorted(by_iteration)]


def _objective_rows(trials: list[Trial], curves: Mapping[str, list[dict[str, Any]]], metrics: list[str],
                    modes: list[str]) -> list[tuple[float, ...]]:
    """Each trial's last values, lower is better; trials missing an objective are left out."""
    rows = []
    for t in trials:
        curve = curves[t.trial_id]
        if not curve:
            continue
        row = []
        for m, d in zip(metrics, modes):
            v = curve[-1].get(m)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                break
            row.append(float(v) if d == "min" else -float(v))
        else:
            rows.append(tuple(row))
    return rows


def _hypervolume_2d(points: list[tuple[float, ...]], ref: tuple[float, ...]) -> float:
    inside = sorted(p for p in points if p[0] < ref[0] and p[1] < ref[1])
    volume, best = 0.0, ref[1]
    for x, y in inside:
        if y < best:
            volume += (ref[0] - x) * (best - y)
            best = y
    return volume


def _mo_figures(figures: RunFigures, trials: list[Trial], curves: Mapping[str, list[dict[str, Any]]],
                metrics: list[str], modes: list[str], ref: tuple[float, ...] | None) -> RunFigures:
    from schedulers import nondominated_fronts

    rows = _objective_rows(trials, curves, metrics, modes)
    fronts = nondominated_fronts(rows) if rows else []
    front = [rows[i] for i in fronts[0]] if fronts else []
    figures.pareto_size = len(front)
    if ref is not None and len(metrics) == 2:
        figures.hypervolume = _hypervolume_2d(front, ref)
    return figures


def _figures(trials: list[Trial], curves: Mapping[str, list[dict[str, Any]]], metric: str, mode: str) -> RunFigures:
    iterations = 0
    seconds = 0.0
    best: tuple[float, str, dict[str, Any]] | None = None
    sign = 1.0 if mode == "min" else -1.0
    for t in trials:
        curve = curves[t.trial_id]
        iterations += len(curve)
        seconds += sum(float(r.get("time_this_iter_s") or 0.0) for r in curve)
        if curve:
            v = curve[-1].get(metric)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                if best is None or sign * v < sign * best[0]:
                    best = (float(v), t.trial_id, t.config)
    return RunFigures(len(trials), iterations, seconds, best[0] if best else None, best[1] if best else None,
                      dict(best[2]) if best else None)


def _recorded_stops(state: ExperimentState) -> dict[str, int]:
    """Each trial's iteration where a ``STOP`` was answered (the last one, if several)."""
    stops: dict[str, int] = {}
    for tid, history in state.history.items():
        for d in history.decisions:
            if d.decision == "STOP":
                stops[tid] = d.iteration
    return stops


#: stop reasons that end a curve where it was meant to end (not cut short): the recorded curve is whole
_COMPLETE_REASONS = ("stop criteria met",)


def _cut_short(state: ExperimentState) -> set[str]:
    """Trials whose recorded curve a scheduler cut short (not those that met their stop criteria or max_t)."""
    out: set[str] = set()
    for tid, history in state.history.items():
        for d in history.decisions:
            if d.decision != "STOP":
                continue
            pruned = d.pruned
            if pruned is None:  # a journal written before the flag: judge by the reason
                pruned = d.reason not in _COMPLETE_REASONS
            if pruned:
                out.add(tid)
    return out


def make_scheduler(name: str, settings: Mapping[str, Any], metric: Any, mode: Any) -> Any:
    """A scheduler from its sweep-file name and keyword settings (clear errors for both)."""
    key = name.lower().replace("-", "_")
    if key not in SCHEDULER_NAMES:
        close = difflib.get_close_matches(key, list(SCHEDULER_NAMES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown scheduler {name!r}{hint}; expected one of: {', '.join(SCHEDULER_NAMES)}")
    cls = getattr(_schedulers, SCHEDULER_NAMES[key])
    kwargs = dict(settings)
    if key != "fifo":
        kwargs.setdefault("metric", metric)
        kwargs.setdefault("mode", mode)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{cls.__name__} does not take these settings {dict(settings)!r}: {exc}") from None


def simulate(experiment_path: str, scheduler: str | Any = "asha", settings: Mapping[str, Any] | None = None, *,
             slots: int | None = None, metric: Any = None, mode: Any = None) -> SimulationReport:
    """Replay a recorded experiment's learning curves under ``scheduler`` in virtual time.

    Args:
        experiment_path: the experiment folder (it holds ``journal.jsonl``).
        scheduler: a name (``"asha"``, ``"hyperband"``, ``"median"``, ``"fifo"``,
            ``"pbt"``) or a scheduler object.
        settings: the scheduler's keyword arguments, when given by name.
        slots: trials at once (default: the most the recorded run had).
        metric, mode: default: the experiment's.

    Returns:
        The recorded and simulated iterations, trial-time and best result.

    Example:
        >>> report = simulate("tuneplat_results/digits-asha", "asha", {"reduction_factor": 4})  # doctest: +SKIP
        >>> print(report.table())  # doctest: +SKIP
    """
    path = os.path.abspath(os.fspath(experiment_path))
    journal_path = os.path.join(path, "journal.jsonl")
    if not os.path.isfile(journal_path):
        raise FileNotFoundError(f"{path} has no journal.jsonl: not a tuneplat experiment folder "
                                "(pass the folder storage_path/name)")
    recorded_state = load_state(path)
    trials, meta = recorded_state.trials, recorded_state.meta
    metric = metric or meta.get("metric")
    mode = mode or meta.get("mode")
    multi = isinstance(metric, list)
    if multi:  # several objectives (MO-ASHA, multi-objective HyperBand): Pareto front and hypervolume
        if not (isinstance(mode, list) and len(mode) == len(metric) and all(d in ("min", "max") for d in mode)):
            raise ValueError(f"{path}: metric={metric!r} needs one mode per metric, got mode={mode!r}")
    elif not isinstance(metric, str) or mode not in ("min", "max"):
        raise ValueError(f"{path}: the experiment has no single metric/mode to judge by (metric={metric!r}, "
                         f"mode={mode!r}); pass metric= and mode=")
    trials = [t for t in trials if t.results]
    if not trials:
        raise ValueError(f"{path}: no trial reported a result: nothing to replay")
    curves = {t.trial_id: _curve_of(t) for t in trials}
    settings = dict(settings or {})
    sched = make_scheduler(scheduler, settings, metric, mode) if isinstance(scheduler, str) else scheduler
    sched_name = scheduler if isinstance(scheduler, str) else type(scheduler).__name__
    slots = slots or recorded_state.peak_running
    searcher = _ReplaySearcher(trials)

    def curve(spec: TrialSpec) -> Iterator[dict[str, Any]]:
        recorded = curves[searcher.assigned[spec.trial_id].trial_id]
        for r in recorded:
            yield {k: v for k, v in r.items() if k not in _AUTO}

    executor = VirtualTimeExecutor(num_slots=slots, curve=curve)

    with tempfile.TemporaryDirectory(prefix="tuneplat-simulate-") as tmp:
        tuner = Tuner(_never_called, param_space={},
                      tune_config=TuneConfig(metric=metric, mode=mode, scheduler=sched, search_alg=searcher,
                                             num_samples=len(trials)),
                      run_config=RunConfig(name="simulation", storage_path=tmp, verbose=0, mlflow=False),
                      executor=executor)
        grid = tuner.fit()
        sim_state = load_state(os.path.join(tmp, "simulation"), check_files=False)
    by_sim_id = {r.trial_id: r for r in grid}
    sim_trials: list[Trial] = []
    sim_curves: dict[str, list[dict[str, Any]]] = {}
    stops: dict[str, int] = {}
    sim_stops = _recorded_stops(sim_state)
    # from the journal's replay (no DataFrame per trial: --recommend replays many)
    sim_results = {t.trial_id: t.results for t in sim_state.trials}
    truncated = 0
    truncated_at: list[float] = []
    timeline: list[tuple[float, float, Any]] = []
    cut_short = _cut_short(recorded_state)
    for sim_id, rec in searcher.assigned.items():
        res = by_sim_id.get(sim_id)
        if res is None:
            continue
        t = Trial(trial_id=rec.trial_id, config=dict(rec.config), path="", name=rec.name)
        sim_trials.append(t)
        sim_curves[rec.trial_id] = sim_results.get(sim_id, [])
        for row in sim_curves[rec.trial_id]:
            timeline.append((float(row.get("timestamp") or 0.0), float(row.get("time_this_iter_s") or 0.0),
                             row.get(metric[0] if multi else metric)))
        if sim_id in sim_stops:
            stops[rec.trial_id] = sim_stops[sim_id]
        elif len(sim_curves[rec.trial_id]) >= len(curves[rec.trial_id]) and rec.trial_id in cut_short:
            truncated += 1  # the recorded run's scheduler cut it short here; the simulated one would have gone on
            ran = sim_curves[rec.trial_id]
            truncated_at.append(float(ran[-1].get("timestamp") or 0.0) if ran else 0.0)
    first_metric, first_mode = (metric[0], mode[0]) if multi else (metric, mode)
    recorded = _figures(trials, curves, first_metric, first_mode)
    simulated = _figures(sim_trials, sim_curves, first_metric, first_mode)
    if multi:
        rows = _objective_rows(trials, curves, metric, mode)
        ref = tuple(max(r[k] for r in rows) + 0.1 * abs(max(r[k] for r in rows)) + 1e-9
                    for k in range(len(metric))) if rows else None
        recorded = _mo_figures(recorded, trials, curves, metric, mode, ref)
        simulated = _mo_figures(simulated, sim_trials, sim_curves, metric, mode, ref)
    return SimulationReport(
        experiment=path, metric=metric, mode=mode, scheduler=sched_name, settings=settings, slots=slots,
        recorded=recorded, simulated=simulated,
        truncated=truncated, stops=stops, recorded_stops=_recorded_stops(recorded_state),
        timeline=sorted(timeline, key=lambda item: item[0]), truncated_at=sorted(truncated_at),
    )


_AUTO = frozenset({"training_iteration", "time_total_s", "timestamp", "iterations_since_restore", "trial_id",
                   "pid", "hostname", "done", "config", "experiment_tag"})


def _never_called(config: dict[str, Any]) -> None:  # the executor replays recorded curves instead
    raise RuntimeError("a simulation does not run trainables")


def report_json(report: SimulationReport) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str)
