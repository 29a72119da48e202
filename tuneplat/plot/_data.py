"""What the plots draw, read once from an experiment's journal (or from a :class:`ResultGrid`).

The journal is the experiment's source of truth: besides every result it holds
what the ResultGrid does not, namely each scheduler decision (``STOP``,
``PAUSE``) with the iteration where it was taken, each PBT exploit (who cloned
whom, at which iteration, into which config) and the wall-clock time of every
trial start, pause and end. Nothing is unpickled: configs are the journal's
JSON copies.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..core._journal import JournalError, read_journal
from ..core._replay import TrialHistory, replay
from ..search._space import flatten_dict

if TYPE_CHECKING:
    from ..results._result import ResultGrid

__all__ = ["Experiment", "Mark", "PlotError", "TrialRecord", "load_experiment"]


@runtime_checkable
class _Grid(Protocol):
    """What the plots read of a :class:`tuneplat.ResultGrid` (the results package is above this one)."""

    experiment_path: str | None

    def get_best_result(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                        filter_nan_and_inf: bool = True) -> Any: ...

    def __iter__(self) -> Any: ...

#: what a mark on a learning curve means
STOPPED, BUDGET, PAUSED, CLONED, ERRORED = "stopped", "budget", "paused", "cloned", "error"
#: stop reasons that mean "ran to its budget", not "pruned"
_BUDGET_REASONS = ("reached max_t", "stop criteria met")


class PlotError(ValueError):
    """The experiment cannot be drawn as asked (no results, a metric never reported, a bad argument)."""


@dataclass(frozen=True)
class Mark:
    """A point on a trial's curve where something happened to it.

    Attributes:
        kind: ``"stopped"`` (stopped early by the scheduler or a stopper),
            ``"budget"`` (stopped because it reached its budget: ``max_t`` or the
            ``stop`` criteria), ``"paused"``, ``"cloned"`` (PBT exploit: the trial
            took another trial's checkpoint here) or ``"error"``.
        iteration: the trial's ``training_iteration`` at that moment.
        index: position in :attr:`TrialRecord.results` of the result it belongs to
            (the last one reported before the event), or -1 before any result.
        time: wall-clock time of the event (seconds since the epoch), if known.
        reason: the scheduler's reason, the error, or the exploit's source trial.
    """

    kind: str
    iteration: int
    index: int
    time: float | None = None
    reason: str = ""


@dataclass
class TrialRecord:
    """One trial as the plots see it."""

    trial_id: str
    name: str
    config: dict[str, Any]
    status: str = "PENDING"
    results: list[dict[str, Any]] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    #: PBT exploits in order: dicts with ``from_trial``, ``iteration``, ``from_iteration``, ``old_config``,
    #: ``new_config``, ``time`` and ``index`` (results before it belong to the previous segment)
    exploits: list[dict[str, Any]] = field(default_factory=list)
    #: wall-clock spans when an attempt of the trial ran: ``(start, end, how it ended)``; end None: still running
    spans: list[tuple[float, float | None, str]] = field(default_factory=list)
    stop_reason: str | None = None
    first_config: dict[str, Any] = field(default_factory=dict)

    @property
    def stopped_early(self) -> bool:
        return any(m.kind == STOPPED for m in self.marks)

    def values(self, metric: str) -> list[tuple[int, float]]:
        """``(index in results, value)`` of every finite numeric ``metric`` reported."""
        out = []
        for i, r in enumerate(self.results):
            v = _number(r.get(metric))
            if v is not None:
                out.append((i, v))
        return out

    def segments(self) -> list[tuple[int, int]]:
        """``[start, end)`` result index ranges between PBT exploits (one range without exploits)."""
        cuts = sorted({min(max(e["index"], 0), len(self.results)) for e in self.exploits})
        bounds = [0, *[c for c in cuts if 0 < c < len(self.results)], len(self.results)]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


@dataclass
class Experiment:
    """An experiment read for plotting: its trials in creation order, and its settings."""

    path: str
    name: str
    metric: str | list[str] | None
    mode: str | list[str] | None
    trials: list[TrialRecord]
    scheduler: str | None = None
    start_time: float | None = None
    end_time: float | None = None

    # ------------------------------------------------------------------ checks shared by the plots
    def numeric_metrics(self) -> list[str]:
        """Every metric some trial reported as a finite number, sorted."""
        names: set[str] = set()
        for t in self.trials:
            for r in t.results:
                for k, v in r.items():
                    if k not in names and _number(v) is not None:
                        names.add(k)
        return sorted(names)

    def require_results(self) -> None:
        if not any(t.results for t in self.trials):
            raise PlotError(
                f"{self.path}: nothing to plot yet: {len(self.trials)} trial(s), none has reported a result "
                "(plot again once trials have called tune.report()).")

    def resolve_metric(self, metric: str | None, *, where: str = "metric") -> str:
        """The metric to draw: ``metric``, else the experiment's (the first one of a multi-objective sweep).

        Raises:
            PlotError: no results, no metric known, or one that no trial reported (with a did-you-mean).
        """
        self.require_results()
        if metric is None:
            metric = self.metric[0] if isinstance(self.metric, list) and self.metric else self.metric  # type: ignore[assignment]
        if not isinstance(metric, str) or not metric:
            raise PlotError(f"{self.path}: the experiment has no metric (TuneConfig(metric=...) was not set): "
                            f"pass {where}=, one of {', '.join(self.numeric_metrics()) or '(none reported)'}.")
        known = self.numeric_metrics()
        if metric not in known:
            close = difflib.get_close_matches(metric, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise PlotError(f"{self.path}: no trial reported a numeric {metric!r} ({where}={metric!r}); {hint}"
                            f"the metrics reported are: {', '.join(known) or '(none)'}.")
        return metric

    def resolve_mode(self, mode: str | None, metric: str) -> str:
        if mode is None:
            if isinstance(self.metric, list) and isinstance(self.mode, list) and metric in self.metric:
                mode = self.mode[self.metric.index(metric)]
            elif isinstance(self.mode, str) and (self.metric == metric or self.metric is None):
                mode = self.mode
            elif isinstance(self.mode, str) and not isinstance(self.metric, list):
                mode = None  # another metric than the experiment's: its mode is unknown
        if mode not in ("min", "max"):
            raise PlotError(f"{self.path}: is a lower or a higher {metric!r} better? pass mode='min' or mode='max' "
                            f"(got mode={mode!r}).")
        return mode

    def objectives(self, metrics: Sequence[str] | None, modes: Sequence[str] | None) -> tuple[list[str], list[str]]:
        """Metrics and modes of a multi-objective plot (default: the experiment's)."""
        ms = list(metrics) if metrics is not None else (list(self.metric) if isinstance(self.metric, list) else [])
        ds = list(modes) if modes is not None else (list(self.mode) if isinstance(self.mode, list) else [])
        if len(ms) < 2 or len(ms) != len(ds):
            raise PlotError(f"{self.path}: a Pareto front needs two or more metrics with one mode each "
                            f"(got metrics={ms!r}, modes={ds!r}): pass metrics=[...] and modes=[...], or run the "
                            "sweep with TuneConfig(metric=[...], mode=[...]).")
        ms = [self.resolve_metric(m, where="metrics") for m in ms]
        for d in ds:
            if d not in ("min", "max"):
                raise PlotError(f"modes={ds!r}: each mode must be 'min' or 'max'.")
        return ms, ds

    def final_value(self, trial: TrialRecord, metric: str, mode: str, scope: str | int = "last") -> float | None:
        """The trial's value as ``ResultGrid.get_best_result(scope=...)`` sees it ("last" or "all"), or its
        value at ``training_iteration == scope`` when ``scope`` is an int."""
        vals = trial.values(metric)
        if not vals:
            return None
        if isinstance(scope, int):
            for r in reversed(trial.results):
                if r.get("training_iteration") == scope:
                    return _number(r.get(metric))
            return None
        if scope == "all":
            return min(v for _, v in vals) if mode == "min" else max(v for _, v in vals)
        last = _number(trial.results[-1].get(metric)) if trial.results else None
        return last

    def common_iteration(self, metric: str, share: float = 0.9) -> int | None:
        """The highest ``training_iteration`` at which at least ``share`` of the trials that reported
        ``metric`` reported it (None when they reported no iteration)."""
        reached = []
        for t in self.trials:
            its = {int(r.get("training_iteration", 0) or 0) for r in t.results if _number(r.get(metric)) is not None}
            if its:
                reached.append(its)
        if not reached:
            return None
        need = max(1, math.ceil(share * len(reached)))
        counts: dict[int, int] = {}
        for its in reached:
            for it in its:
                counts[it] = counts.get(it, 0) + 1
        ok = [it for it, c in counts.items() if c >= need and it > 0]
        return max(ok) if ok else None

    def param_table(self, params: Sequence[str] | None = None) -> tuple[list[str], list[dict[str, Any]]]:
        """Flattened config keys that vary between trials (or ``params``, the ones a plot was asked for), and each
        trial's flattened config.

        Raises:
            PlotError: a key of ``params`` is in no trial's config.
        """
        rows = [flatten_dict(t.config) for t in self.trials]
        if params is not None:
            known = {k for r in rows for k in r}
            bad = [p for p in params if p not in known]
            if bad:
                raise PlotError(f"params={params!r}: {bad} not in the configs; the config keys are "
                                f"{', '.join(sorted(known))}.")
            return list(params), rows
        keys: list[str] = []
        for row in rows:
            for k in row:
                if k not in keys:
                    keys.append(k)
        varying = []
        for k in keys:
            seen = {_hashable(r.get(k)) for r in rows}
            if len(seen) > 1:
                varying.append(k)
        return varying, rows


def looks_log(values: Sequence[float]) -> bool:
    """Whether positive values spread over >= 2 decades and crowd the low end (drawn from a log-uniform)."""
    if not values:
        return False
    lo, hi = min(values), max(values)
    if lo <= 0 or hi / lo < 100:
        return False
    ordered = sorted(values)
    median = ordered[len(ordered) // 2]
    return median < lo + 0.2 * (hi - lo)


def _hashable(v: Any) -> Any:
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return v


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if v is None or isinstance(v, (bool, str, dict, list)):
            return None
        try:  # numpy scalars
            v = float(v)
        except (TypeError, ValueError):
            return None
    f = float(v)
    return f if math.isfinite(f) else None


# ---------------------------------------------------------------------- loading


def load_experiment(source: Any) -> Experiment:
    """Read an experiment for plotting.

    Args:
        source: an experiment folder (``<storage_path>/<name>``, local or an fsspec
            URL), a :class:`~tuneplat.ResultGrid`, or an :class:`Experiment` (returned as is).

    Raises:
        PlotError: the folder is not an experiment (with the experiments it holds, if it is a storage path),
            or its journal is damaged.

    Example:
        >>> exp = load_experiment("./tuneplat_results/digits-asha")  # doctest: +SKIP
        >>> len(exp.trials)  # doctest: +SKIP
    """
    if isinstance(source, Experiment):
        return source
    if isinstance(source, _Grid):
        path = source.experiment_path
        if path:
            fs = next((r.fsspec_filesystem for r in source if r.fsspec_filesystem is not None), None)
            local = _local_folder(path, missing_ok=True, fs=fs)
            if local is not None:
                return _from_journal(local, display=path)
        return _from_grid(source)  # type: ignore[arg-type]
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        local = _local_folder(path, missing_ok=False)
        assert local is not None
        return _from_journal(local, display=path)
    raise PlotError(f"cannot plot a {type(source).__name__}: pass an experiment folder, a ResultGrid "
                    "(tuner.fit()'s result) or an Experiment from tuneplat.plot.load_experiment().")


def _local_folder(path: str, *, missing_ok: bool, fs: Any = None) -> str | None:
    """A local folder holding the experiment's journal (a remote experiment is fetched into its cache, with
    ``fs`` or else the filesystem fsspec builds from the URL and its configuration)."""
    from ..storage._storage import fetch_experiment, fs_for_url, is_remote, local_cache_for

    if is_remote(path):
        try:
            if fs is None:
                fs, root = fs_for_url(path)
            else:
                root = fs._strip_protocol(path)
            url = fs.unstrip_protocol(root.rstrip("/"))
            if not fs.exists(f"{url}/journal.jsonl"):
                if missing_ok:
                    return None
                raise PlotError(f"{path}: not a tuneplat experiment folder (no journal.jsonl); "
                                "expected <storage_path>/<name>")
            local = local_cache_for(url)
            fetch_experiment(fs, url, local)
        except PlotError:
            raise
        except Exception as exc:  # noqa: BLE001 - any filesystem's error (credentials, network) is named
            if missing_ok:
                return None
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise PlotError(f"{path}: cannot read the experiment: {type(exc).__name__}: {first}") from None
        return local
    if path.startswith("file://"):
        path = path[len("file://"):]
    if os.path.isfile(os.path.join(path, "journal.jsonl")):
        return path
    if missing_ok:
        return None
    if not os.path.exists(path):
        raise PlotError(f"{path}: no such folder; pass an experiment folder (<storage_path>/<name>).")
    inside = sorted(d for d in os.listdir(path) if os.path.isfile(os.path.join(path, d, "journal.jsonl")))
    if inside:
        shown = ", ".join(inside[:10]) + (f" and {len(inside) - 10} more" if len(inside) > 10 else "")
        raise PlotError(f"{path} is a storage path holding {len(inside)} experiment(s): {shown}; pass one of "
                        f"them, e.g. {os.path.join(path, inside[-1])}")
    raise PlotError(f"{path}: not a tuneplat experiment folder (no journal.jsonl); expected <storage_path>/<name>")


def _from_journal(folder: str, display: str) -> Experiment:
    journal = os.path.join(folder, "journal.jsonl")
    try:
        events = read_journal(journal)
    except JournalError as exc:
        raise PlotError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlotError(f"{journal}: cannot be read ({exc})") from None
    return experiment_from_events(events, display)


def experiment_from_events(events: Iterable[Mapping[str, Any]], path: str = "") -> Experiment:
    """Build an :class:`Experiment` from journal events (as :func:`tuneplat.read_journal` returns them).

    The events' meaning is read once, by the core's ``replay`` (as for a restore or ``tuneplat status``);
    this turns its trials and their history into what the plots draw.
    """
    state = replay([dict(e) for e in events], path, check_files=False)
    exp = Experiment(path=path, name=str(state.meta.get("name") or os.path.basename(path.rstrip("/"))),
                     metric=state.meta.get("metric"), mode=state.meta.get("mode"), trials=[],
                     scheduler=state.scheduler, start_time=state.start_time, end_time=state.end_time)
    for trial in state.trials:
        history = state.history[trial.trial_id]
        exp.trials.append(TrialRecord(
            trial_id=trial.trial_id, name=trial.name, config=_plotted_config(history), status=trial.status.value,
            results=list(trial.results), marks=_marks(history), spans=[(s.start, s.end, s.how) for s in history.spans],
            exploits=[{"from_trial": e.from_trial, "iteration": e.iteration, "from_iteration": e.from_iteration,
                       "old_config": e.old_config, "new_config": e.new_config, "time": e.time, "index": e.results}
                      for e in history.exploits],
            stop_reason=next((e.stop_reason for e in reversed(history.ends) if e.stop_reason), None),
            first_config=dict(history.first_config)))
    return exp


def _plotted_config(history: TrialHistory) -> dict[str, Any]:
    """The config the trial ran last with (its first, or PBT's newest exploit's)."""
    config = dict(history.first_config)
    for e in history.exploits:
        config = dict(e.new_config or config)
    return config


def _marks(history: TrialHistory) -> list[Mark]:
    """The points to mark on a trial's curve, in journal order; those on results later superseded are left out."""
    found: list[tuple[int, Mark]] = []
    for d in history.decisions:
        if d.decision == "STOP":
            kind = BUDGET if any(s in d.reason for s in _BUDGET_REASONS) else STOPPED
            found.append((d.seq, Mark(kind, d.iteration, d.results - 1, d.time, d.reason)))
        elif d.decision == "PAUSE":
            found.append((d.seq, Mark(PAUSED, d.iteration, d.results - 1, d.time, d.reason)))
    for f in history.failures:
        if not f.retry:
            message = f.message.splitlines()[0] if f.message else "error"
            found.append((f.seq, Mark(ERRORED, f.iteration, f.results - 1, f.time, message)))
    for e in history.exploits:
        found.append((e.seq, Mark(CLONED, e.iteration, e.results - 1, e.time, str(e.from_trial))))
    reason: str | None = None
    for end in history.ends:
        reason = end.stop_reason or reason
        if end.paused_iteration is not None and end.status == "TERMINATED" and reason:
            # ended while paused (HyperBand drops a paused trial): a stop at the iteration where it waited
            kind = BUDGET if any(s in reason for s in _BUDGET_REASONS) else STOPPED
            found.append((end.seq, Mark(kind, end.paused_iteration, end.results - 1, end.time, reason)))
    # a retry from an earlier checkpoint superseded results: what was marked on them goes with them
    return [m for seq, m in sorted(found, key=lambda item: item[0])
            if not any(s.seq > seq and m.index >= s.results for s in history.superseded)]


def _iteration(t: TrialRecord) -> int:
    return int(t.results[-1].get("training_iteration", 0) or 0) if t.results else 0


def _from_grid(grid: ResultGrid) -> Experiment:
    """A grid without a readable journal (built by hand, or its folder is gone): results, lineage, stop reasons."""
    trials = []
    for r in grid:
        t = TrialRecord(trial_id=r.trial_id, name=r.trial_id, config=dict(r.config), status=r.status,
                        results=list(r._history), stop_reason=r.stop_reason)
        if r.stop_reason and not any(s in r.stop_reason for s in _BUDGET_REASONS):
            t.marks.append(Mark(STOPPED, _iteration(t), len(t.results) - 1, None, r.stop_reason))
        if r.error is not None:
            t.marks.append(Mark(ERRORED, _iteration(t), len(t.results) - 1, None, str(r.error).splitlines()[0]))
        for ev in r.lineage:
            t.exploits.append({**ev, "time": None, "index": len(t.results)})
        trials.append(t)
    return Experiment(path=grid.experiment_path or "<ResultGrid>", name=os.path.basename(grid.experiment_path or ""),
                      metric=grid._metric, mode=grid._mode, trials=trials)
