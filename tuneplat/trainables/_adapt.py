"""The one place that knows the kinds of trainable: each becomes the function the tuner runs.

A plain function (its returned or yielded results reported, as in Ray), a
:class:`tuneplat.Trainable` subclass, either inside ``with_parameters``/``with_resources``,
or a trainer object (:class:`ConvertibleTrainer`, e.g. ``TorchTrainer``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ._base import ConvertibleTrainer, TrainerParts
from ._function import ReportsReturn
from ._trainable import Trainable, TrainableFunction
from ._wrappers import ParameterizedTrainable

__all__ = ["ConvertibleTrainer", "TrainerParts", "for_run", "function_of", "report_returns"]


def function_of(trainable: Any) -> Any:
    """The function the tuner runs for ``trainable`` (not a trainer object: those convert themselves).

    Raises:
        TypeError: ``trainable`` is a class that does not subclass :class:`tuneplat.Trainable`, or not callable.
    """
    if isinstance(trainable, type) and issubclass(trainable, Trainable):
        return TrainableFunction(trainable)
    if isinstance(trainable, type):
        raise TypeError(f"The trainable is the class {trainable.__name__}, which does not subclass tune.Trainable; "
                        "tuneplat runs function trainables fn(config) that call tune.report(...) and "
                        "tune.Trainable subclasses (setup/step/save_checkpoint/load_checkpoint): derive it from "
                        "tune.Trainable (see docs/porting-from-ray.md).")
    if callable(trainable):
        return report_returns(trainable)  # a returned/yielded dict or number is a result, as in Ray
    raise TypeError(f"trainable must be a function fn(config) or a TorchTrainer, got {type(trainable).__name__}")


def report_returns(fn: Any) -> Any:
    """``fn`` (a function, or one inside ``with_parameters``/``with_resources``) wrapped in :class:`ReportsReturn`.

    Trainable classes (already run by a wrapper that reports ``step()``'s
    results) and trainables wrapped before are returned unchanged.
    """
    if isinstance(fn, ParameterizedTrainable):
        return fn if isinstance(fn._fn, (ReportsReturn, TrainableFunction)) else fn._copy(_fn=ReportsReturn(fn._fn))
    if isinstance(fn, (ReportsReturn, TrainableFunction)):
        return fn
    return ReportsReturn(fn)


def _may_pause(scheduler: Any) -> bool:
    """Whether ``scheduler`` can answer PAUSE (or have PBT clone a trial's current state)."""
    from ..schedulers import ASHAScheduler, AsyncHyperBandScheduler, FIFOScheduler, MedianStoppingRule

    if scheduler is None or isinstance(scheduler, (FIFOScheduler, ASHAScheduler, AsyncHyperBandScheduler)):
        return False
    if isinstance(scheduler, MedianStoppingRule):
        return not scheduler.hard_stop
    optuna_module = sys.modules.get("tuneplat.search.optuna")
    pruner = getattr(optuna_module, "OptunaPrunerScheduler", None)
    return not (pruner is not None and isinstance(scheduler, pruner))


def for_run(fn: Any, tune_config: Any, run_config: Any) -> Any:
    """For a :class:`TrainableFunction` (bare or inside ``with_parameters``): the experiment's checkpoint policy.

    Returns the trainable with its checkpoint policy; any other trainable unchanged.
    """
    inner = fn._fn if isinstance(fn, ParameterizedTrainable) else fn
    if not isinstance(inner, TrainableFunction):
        return fn
    user_stop = run_config.stop
    cc = run_config.checkpoint_config
    stop_at: dict[str, float] = {}
    if isinstance(user_stop, Mapping):
        stop_at.update(user_stop)
    scheduler = tune_config.scheduler
    max_t, time_attr = getattr(scheduler, "max_t", None), getattr(scheduler, "time_attr", None)
    if isinstance(time_attr, str) and isinstance(max_t, (int, float)) and not isinstance(max_t, bool):
        stop_at[time_attr] = min(stop_at.get(time_attr, max_t), max_t)
    configured = TrainableFunction(
        inner.cls, checkpoint_frequency=int(cc.checkpoint_frequency or 0),
        checkpoint_at_end=bool(cc.checkpoint_at_end), checkpoint_every_step=_may_pause(scheduler), stop_at=stop_at,
    )
    return fn._copy(_fn=configured) if isinstance(fn, ParameterizedTrainable) else configured
