"""What tuneplat ships for testing and studying experiments without a cluster.

:class:`VirtualTimeExecutor` runs a whole :class:`tuneplat.Tuner` — searcher,
scheduler, stop rules, journal, restore — over learning curves in virtual time;
:func:`simulate` replays a recorded experiment under another scheduler
(``tuneplat simulate``); :func:`recommend` ranks a grid of schedulers on it
(``tuneplat simulate --recommend``).
"""

from __future__ import annotations

from ._recommend import Recommendation, recommend
from ._simulate import SimulationReport, simulate
from ._virtual import HANG, VirtualCheckpointStore, VirtualTimeExecutor

__all__ = ["HANG", "Recommendation", "SimulationReport", "VirtualCheckpointStore", "VirtualTimeExecutor", "recommend",
           "simulate"]
