"""Trial schedulers: pure algorithms that decide from reported results only.

This package imports only the standard library. ``tuneplat`` re-exports it as
``tuneplat.schedulers``. See ``docs/schedulers.md``; the simulator and the
conformance checks live in :mod:`schedulers.testing`.
"""

from __future__ import annotations

from ._actions import ActionPlan, TrialPhase, plan_action
from ._asha import ASHAScheduler, AsyncHyperBandScheduler
from ._base import Decision, Launch, Resume, Stop, TrialScheduler, UnknownTrialError, score
from ._fifo import FIFOScheduler
from ._hyperband import HyperBandScheduler
from ._median import MedianStoppingRule
from ._pareto import crowding_distance, eps_net_order, mo_rank, nondominated_fronts
from ._pasha import PASHAScheduler
from ._pbt import PopulationBasedTraining

__all__ = [
    "ASHAScheduler",
    "ActionPlan",
    "AsyncHyperBandScheduler",
    "Decision",
    "FIFOScheduler",
    "HyperBandScheduler",
    "Launch",
    "MedianStoppingRule",
    "PASHAScheduler",
    "PopulationBasedTraining",
    "Resume",
    "Stop",
    "TrialPhase",
    "TrialScheduler",
    "UnknownTrialError",
    "crowding_distance",
    "eps_net_order",
    "mo_rank",
    "nondominated_fronts",
    "plan_action",
    "score",
]
