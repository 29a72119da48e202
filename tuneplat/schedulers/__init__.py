"""Trial schedulers, as ``ray.tune.schedulers``.

Re-exports the pure :mod:`schedulers` package, so a Ray Tune script's
``from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining``
becomes ``from tuneplat.schedulers import ASHAScheduler, PopulationBasedTraining``.
``OptunaPrunerScheduler`` (any Optuna pruner as a scheduler) is also here; it
imports Optuna on first access only, so ``import tuneplat`` stays light; so are
``ResourceChangingScheduler`` and its allocation functions ``DistributeResources``,
``DistributeResourcesToTopJob`` (:mod:`tuneplat.schedulers.resource_changing_scheduler`).

Example:
    >>> from tuneplat.schedulers import ASHAScheduler
    >>> ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3).name
    'asha'
"""

from __future__ import annotations

from schedulers import *
from schedulers import __all__ as _all

_RCS = "tuneplat.schedulers.resource_changing_scheduler"
_LAZY = {"OptunaPrunerScheduler": "tuneplat.search.optuna", "ResourceChangingScheduler": _RCS,
         "DistributeResources": _RCS, "DistributeResourcesToTopJob": _RCS}

__all__ = [  # noqa: PLE0604 - the package's names + the lazy ones
    *_all, "DistributeResources", "DistributeResourcesToTopJob", "OptunaPrunerScheduler", "ResourceChangingScheduler"]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
