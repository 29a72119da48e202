"""Search spaces and searchers (``tuneplat.search``)."""

from __future__ import annotations

from ._domains import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    Normal,
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from ._pareto import pareto_front
from ._searcher import BasicVariantGenerator, ConcurrencyLimiter, Repeater, Searcher
from ._space import SearchSpaceError, flatten_dict, unflatten_dict

# Optuna is imported only when these are first used (``import tuneplat`` stays light).
_LAZY = {"OptunaPrunerScheduler": "optuna", "OptunaSearch": "optuna"}


def __getattr__(name: str) -> object:
    if name == "optuna":  # ``tuneplat.search.optuna.OptunaSearch`` after a plain ``import tuneplat``
        import importlib

        return importlib.import_module(f"{__name__}.optuna")
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "BasicVariantGenerator",
    "Categorical",
    "ConcurrencyLimiter",
    "Domain",
    "Float",
    "Function",
    "Integer",
    "Normal",
    "OptunaPrunerScheduler",
    "OptunaSearch",
    "Repeater",
    "SearchSpaceError",
    "Searcher",
    "choice",
    "flatten_dict",
    "grid_search",
    "lograndint",
    "loguniform",
    "pareto_front",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "unflatten_dict",
    "uniform",
]
