"""What callbacks see of the running tuner: a typed, read-only view of the loop (never the loop itself)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, overload

from ._trial import ReadOnlyTrial, Trial

if TYPE_CHECKING:
    from .._config import RunConfig, TuneConfig
    from ._loop_state import _LoopState

__all__ = ["SeenTrial", "TunerView", "copy_result"]


_ATOMS = (int, float, str, bool, type(None))


def _deep(value: Any) -> Any:
    """A deep copy of plain data (dicts and lists of numbers and strings) without ``copy.deepcopy``'s bookkeeping
    (10x faster on a result's nested config); anything else inside goes through ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _ATOMS else _deep(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMS else _deep(v) for v in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def copy_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a result for a hook, nested values too (what the hook edits stays its own).

    Top-level values that are not containers (numbers, strings, arrays) are the result's own, as before.
    """
    try:
        return {k: _deep(v) if isinstance(v, (dict, list, set)) else v for k, v in result.items()}
    except RecursionError:  # (a value that holds itself: copy.deepcopy keeps track of what it copied)
        return {k: copy.deepcopy(v) if isinstance(v, (dict, list, set)) else v for k, v in result.items()}


class _SeenResults(Sequence[dict[str, Any]]):
    """A trial's results as a hook sees them: each item a copy when it is read (a hook's edit stays its own)."""

    __slots__ = ("_results",)

    def __init__(self, results: list[dict[str, Any]]) -> None:
        self._results = results

    def __len__(self) -> int:
        return len(self._results)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [copy_result(r) for r in self._results[index]]
        return copy_result(self._results[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (copy_result(r) for r in self._results)

    def __repr__(self) -> str:
        return repr(self._results)


#: the trial's fields a :class:`SeenTrial` reads from its trial (``config`` and ``results`` are its own properties)
_FORWARDED = frozenset(f.name for f in dataclasses.fields(Trial)) - {"config", "results"}


class SeenTrial(Trial):
    """A trial as callbacks see it: every attribute of the experiment's trial, none of its state to change.

    The same object for a trial in every hook and in ``ctrl.trials`` (callbacks may key dicts by it, as in
    Ray). Assigning an attribute raises :class:`~tuneplat.core._trial.ReadOnlyTrial`; ``config`` is the
    hook's own deep copy (taken again when the trial's config changes: an OOM retry), ``results`` and
    ``last_result`` give copies, and the trial's other lists are tuples, so an edit in place changes
    neither the scheduler's, the searcher's nor the journal's trial, nor the best result.
    """

    _trial: Trial
    _config_of: Any
    _config: Any

    def __init__(self, trial: Trial) -> None:  # (not the dataclass's: the fields are the trial's)
        object.__setattr__(self, "_trial", trial)
        object.__setattr__(self, "_config_of", None)
        object.__setattr__(self, "_config", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise ReadOnlyTrial(f"trial {self.trial_id} is read-only to callbacks ({name} = {value!r})")

    def __delattr__(self, name: str) -> None:
        raise ReadOnlyTrial(f"trial {self.trial_id} is read-only to callbacks (del {name})")

    def __reduce__(self) -> Any:  # (a pickle or copy of it is a plain copy of the trial)
        return copy.copy, (self._trial,)

    @property
    def config(self) -> dict[str, Any]:  # type: ignore[override]
        own = self._trial.config
        if self._config_of is not own:
            object.__setattr__(self, "_config", copy.deepcopy(own))
            object.__setattr__(self, "_config_of", own)
        return self._config

    @property
    def results(self) -> Sequence[dict[str, Any]]:  # type: ignore[override]
        return _SeenResults(self._trial.results)

    @property
    def last_result(self) -> dict[str, Any]:
        results = self._trial.results
        return copy_result(results[-1]) if results else {}

    @property
    def iteration(self) -> int:
        return self._trial.iteration

    @property
    def evaluated_params(self) -> dict[str, Any]:
        return copy.deepcopy(self._trial.evaluated_params)

    def seal(self) -> None:
        return None

    def supersede_after(self, iteration: int) -> int:
        raise ReadOnlyTrial(f"trial {self.trial_id} is read-only to callbacks (supersede_after)")


def _forward(name: str) -> property:
    """A read-only property of :class:`SeenTrial` giving its trial's field ``name`` (a list as a tuple)."""

    def get(self: SeenTrial) -> Any:
        value = getattr(self._trial, name)
        return tuple(value) if type(value) is list else value

    return property(get, doc=f"The trial's ``{name}`` (read-only).")


for _name in _FORWARDED:  # (properties, not __getattribute__: the view's own attributes stay as fast as a trial's)
    setattr(SeenTrial, _name, _forward(_name))


class TunerView:
    """The experiment as the loop sees it, to read: its trials, settings and folder.

    Every hook of a :class:`~tuneplat.core._callbacks.ControllerCallback` gets one. Values are live
    (``trials`` grows as trials are added); nothing here changes the loop. A callback hands results
    back as its hooks' return values (MLflow runs), which the loop records.
    """

    __slots__ = ("_loop", "_seen", "_seen_list")

    def __init__(self, loop: _LoopState) -> None:
        self._loop = loop
        self._seen: dict[str, SeenTrial] = {}  # trial id -> what hooks get for it (one object per trial)
        self._seen_list: list[Trial] = []

    def seen(self, trial: Trial) -> SeenTrial:
        """What hooks receive for ``trial``: its :class:`SeenTrial` (the same object every time)."""
        if isinstance(trial, SeenTrial):
            return trial
        view = self._seen.get(trial.trial_id)
        if view is None or view._trial is not trial:
            view = self._seen[trial.trial_id] = SeenTrial(trial)
        return view

    @property
    def trials(self) -> list[Trial]:
        """Every trial, in creation order, as hooks see them (:class:`SeenTrial`); the list grows as trials are
        added (as Ray's callbacks get it: do not change it)."""
        return self._refresh()

    def _refresh(self) -> list[Trial]:
        """The views of every trial, brought up to date with the loop's list (it only grows)."""
        live, seen = self._loop.trials, self._seen_list
        n = len(seen)
        if n == len(live) and (not n or seen[-1].trial_id == live[-1].trial_id):
            return seen
        if n < len(live) and (not n or seen[-1].trial_id == live[n - 1].trial_id):
            seen.extend(self.seen(t) for t in live[n:])  # (new trials: the usual case)
        else:
            seen[:] = [self.seen(t) for t in live]
        return seen

    @property
    def by_id(self) -> Mapping[str, Trial]:
        """Trials by id (as hooks see them)."""
        self._refresh()
        return MappingProxyType(self._seen)

    @property
    def experiment_dir(self) -> str:
        return self._loop.experiment_dir

    @property
    def experiment_name(self) -> str:
        return self._loop.experiment_name

    @property
    def previous_run_dir(self) -> str | None:
        """Where an earlier run of this experiment's folder was moved to (a re-run), else None."""
        return self._loop.previous_run_dir

    @property
    def resume(self) -> bool:
        """Whether this run continues a restored experiment."""
        return self._loop.resume

    @property
    def metric(self) -> Any:
        return self._loop.metric

    @property
    def mode(self) -> Any:
        return self._loop.mode

    @property
    def param_space(self) -> Mapping[str, Any]:
        return self._loop.param_space

    @property
    def tc(self) -> TuneConfig:
        """The experiment's :class:`tuneplat.TuneConfig`."""
        return self._loop.tc

    @property
    def rc(self) -> RunConfig:
        """The experiment's :class:`tuneplat.RunConfig`."""
        return self._loop.rc

    @property
    def scaling_config(self) -> Any:
        """The experiment's :class:`tuneplat.ScalingConfig` (per-trial resources may differ: ``with_resources``)."""
        return self._loop.sc

    @property
    def searcher(self) -> Any:
        return self._loop.searcher

    @property
    def scheduler(self) -> Any:
        return self._loop.scheduler

    @property
    def world_size(self) -> int:
        """Ranks per trial (the most, for an elastic trial)."""
        return self._loop.world_size

    @property
    def trainer(self) -> bool:
        """Whether the trials run a Train trainer (their resources are one bundle per rank, as Ray Train's)."""
        return bool(getattr(self._loop, "trainer", False))

    @property
    def min_world_size(self) -> int | None:
        """The fewest ranks of an elastic trial; None when trials are not elastic."""
        return self._loop.min_world_size

    @property
    def request(self) -> Mapping[str, float]:
        """Resources per rank."""
        return self._loop.request

    def cluster_resources(self) -> dict[str, float]:
        """The cluster's resources in total, busy or free (``{"CPU": 8.0, "GPU": 0.0}``; empty when unknown)."""
        return dict(self._loop.executor.capacity())

    def sync_journal(self) -> bool:
        """Make every event written so far durable and readable by other processes; False without a journal."""
        journal = self._loop.journal
        if journal is None:
            return False
        try:
            return journal.sync(force=True)
        except OSError:  # its disk stayed full: the loop ends the experiment
            return False
