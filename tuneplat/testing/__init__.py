"""What tuneplat ships for testing and studying experiments without a cluster.

:class:`VirtualTimeExecutor` runs a whole :class:`tuneplat.Tuner` — searcher,
scheduler, stop rules, journal, restore — over learning curves in virtual time;
:func:`simulate` replays a recorded experiment under another scheduler
(``tuneplat simulate``).
"""

from __future__ import annotations

from ._simulate import SimulationReport, simulate
from ._virtual import HANG, VirtualCheckpointStore, VirtualTimeExecutor

__all__ = ["HANG", "SimulationReport", "VirtualCheckpointStore", "VirtualTimeExecutor", "simulate"]
