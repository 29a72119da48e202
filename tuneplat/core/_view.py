"""What callbacks see of the running tuner: a typed, read-only view of the loop (never the loop itself)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._config import RunConfig, TuneConfig
    from ._loop_state import _LoopState
    from ._trial import Trial

__all__ = ["TunerView"]


class TunerView:
    """The experiment as the loop sees it, to read: its trials, settings and folder.

    Every hook of a :class:`~tuneplat.core._callbacks.ControllerCallback` gets one. Values are live
    (``trials`` grows as trials are added); nothing here changes the loop. A callback hands results
    back as its hooks' return values (MLflow runs), which the loop records.
    """

    __slots__ = ("_loop",)

    def __init__(self, loop: _LoopState) -> None:
        self._loop = loop

    @property
    def trials(self) -> list[Trial]:
        """Every trial, in creation order (the live list, as Ray's callbacks get it: do not change it)."""
        return self._loop.trials

    @property
    def by_id(self) -> Mapping[str, Trial]:
        """Trials by id."""
        return MappingProxyType(self._loop.by_id)

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
