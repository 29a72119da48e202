"""The tuner's core: the loop, stop rules and the experiment-folder lock (nothing here imports Dask)."""

from __future__ import annotations

from ._lock import ExperimentLock, ExperimentLockedError
from ._loop import TuneError, TuneLoop
from ._stop import MetricCheck, StopRules

__all__ = ["ExperimentLock", "ExperimentLockedError", "MetricCheck", "StopRules", "TuneError", "TuneLoop"]
