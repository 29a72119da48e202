"""What tuneplat ships for testing and studying experiments without a cluster.

:class:`VirtualTimeExecutor` runs a whole :class:`tuneplat.Tuner` — searcher,
scheduler, stop rules, journal, checkpoints, restore — in virtual time, in the
tuner's own process: over any trainable the Dask executor runs (one rank), or
over learning curves; :func:`sleep` and :func:`now` are its clock inside a
trial, and :func:`use_gpu_memory` a trial's use of a virtual GPU's memory. :class:`ExecutorContract` is the conformance suite every executor
passes alike; :func:`simulate` replays a recorded experiment under another
scheduler (``tuneplat simulate``); :func:`recommend` ranks a grid of
schedulers on it (``tuneplat simulate --recommend``).
"""

from __future__ import annotations

from ._contract import ExecutorContract, experiment_record
from ._recommend import Recommendation, recommend
from ._simulate import SimulationReport, simulate
from ._virtual import (
    HANG,
    LOSE_HOST,
    LOSE_WORKER,
    PREEMPT,
    OutOfMemoryError,
    VirtualCheckpointStore,
    VirtualTimeExecutor,
    now,
    sleep,
    use_gpu_memory,
)

__all__ = ["ExecutorContract", "HANG", "LOSE_HOST", "LOSE_WORKER", "OutOfMemoryError", "PREEMPT", "Recommendation",
           "SimulationReport", "VirtualCheckpointStore", "VirtualTimeExecutor", "experiment_record", "now",
           "recommend", "simulate", "sleep", "use_gpu_memory"]
