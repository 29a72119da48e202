"""Stopping criteria for ``RunConfig(stop=...)``, as ``ray.tune.stopper``.

A stopper is asked after every result whether that trial should stop
(``__call__(trial_id, result)``) and whether the whole experiment should
(``stop_all()``). When ``stop_all()`` is true, running trials stop at their
next report and no trial starts any more (they end TERMINATED).

Example:
    >>> from tuneplat.stopper import CombinedStopper, MaximumIterationStopper, TrialPlateauStopper
    >>> stop = CombinedStopper(MaximumIterationStopper(max_iter=20), TrialPlateauStopper(metric="loss"))
    >>> stop("t1", {"loss": 1.0})
    False
"""

from __future__ import annotations

import collections
import datetime
import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "CombinedStopper",
    "ExperimentPlateauStopper",
    "FunctionStopper",
    "MaximumIterationStopper",
    "NoopStopper",
    "Stopper",
    "TimeoutStopper",
    "TrialPlateauStopper",
]


def _check(cond: bool, argument: str, value: Any, rule: str) -> None:
    if not cond:
        raise ValueError(f"The value of `{argument}` is {value!r}, but must be {rule}.")


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


class Stopper:
    """Base class: override ``__call__`` (one trial) and/or ``stop_all`` (the experiment)."""

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        """Whether trial ``trial_id`` should stop after ``result``."""
        raise NotImplementedError

    def stop_all(self) -> bool:
        """Whether the whole experiment should stop now."""
        raise NotImplementedError


class NoopStopper(Stopper):
    """Never stops anything."""

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return False


class FunctionStopper(Stopper):
    """A function ``(trial_id, result) -> bool`` as a stopper."""

    def __init__(self, function: Callable[[str, Mapping[str, Any]], bool]) -> None:
        if not callable(function):
            raise TypeError(f"FunctionStopper needs a function (trial_id, result) -> bool, got "
                            f"{type(function).__name__}")
        self._fn = function

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return bool(self._fn(trial_id, result))

    def stop_all(self) -> bool:
        return False

    @classmethod
    def is_valid_function(cls, fn: Any) -> bool:
        return callable(fn) and not isinstance(fn, Stopper)


class MaximumIterationStopper(Stopper):
    """Stop a trial after it reported ``max_iter`` results (counted by this stopper)."""

    def __init__(self, max_iter: int) -> None:
        _check(isinstance(max_iter, int) and not isinstance(max_iter, bool) and max_iter >= 1,
               "MaximumIterationStopper.max_iter", max_iter, "an int >= 1")
        self._max_iter = max_iter
        self._iter: collections.Counter[str] = collections.Counter()

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        self._iter[trial_id] += 1
        return self._iter[trial_id] >= self._max_iter

    def stop_all(self) -> bool:
        return False


class TrialPlateauStopper(Stopper):
    """Stop a trial once its metric has plateaued.

    Args:
        metric: the reported metric to watch.
        std: stop when the standard deviation of the last ``num_results``
            values is below this.
        num_results: how many last values to look at.
        grace_period: never stop before this many results.
        metric_threshold: when set, only stop once the metric is at least this
            good (``<=`` for mode "min", ``>=`` for "max").
        mode: "min" or "max"; required with ``metric_threshold``.
    """

    def __init__(self, metric: str, std: float = 0.01, num_results: int = 4, grace_period: int = 4,
                 metric_threshold: float | None = None, mode: str | None = None) -> None:
        _check(isinstance(metric, str) and bool(metric), "TrialPlateauStopper.metric", metric, "a metric name")
        _check(_number(std) is not None and std >= 0, "TrialPlateauStopper.std", std, "a number >= 0")
        _check(isinstance(num_results, int) and num_results >= 1, "TrialPlateauStopper.num_results", num_results,
               "an int >= 1")
        _check(isinstance(grace_period, int) and grace_period >= 0, "TrialPlateauStopper.grace_period",
               grace_period, "an int >= 0")
        _check(mode in (None, "min", "max"), "TrialPlateauStopper.mode", mode, "'min', 'max' or None")
        if metric_threshold is not None:
            _check(mode in ("min", "max"), "TrialPlateauStopper.mode", mode,
                   "'min' or 'max' when metric_threshold is set")
        self._metric = metric
        self._std = float(std)
        self._num_results = num_results
        self._grace_period = grace_period
        self._threshold = metric_threshold
        self._mode = mode
        self._values: dict[str, collections.deque[float]] = collections.defaultdict(
            lambda: collections.deque(maxlen=self._num_results))
        self._iter: collections.Counter[str] = collections.Counter()

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        value = _number(result.get(self._metric))
        if value is None:
            return False
        self._values[trial_id].append(value)
        self._iter[trial_id] += 1
        if self._iter[trial_id] < self._grace_period or len(self._values[trial_id]) < self._num_results:
            return False
        threshold = self._threshold
        if threshold is not None and ((self._mode == "min" and value > threshold)
                                      or (self._mode == "max" and value < threshold)):
            return False
        values = list(self._values[trial_id])
        if not all(math.isfinite(v) for v in values):
            return False
        return statistics.pstdev(values) < self._std

    def stop_all(self) -> bool:
        return False


class ExperimentPlateauStopper(Stopper):
    """Stop the whole experiment once the best ``top`` results have plateaued.

    Args:
        metric: the reported metric to watch.
        std: plateaued when the standard deviation of the ``top`` best values is at most this.
        top: how many best values (over all trials' results) to look at.
        mode: "min" or "max".
        patience: how many results in a row must find it plateaued (0 or 1: the first one).
    """

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0) -> None:
        _check(isinstance(metric, str) and bool(metric), "ExperimentPlateauStopper.metric", metric, "a metric name")
        _check(mode in ("min", "max"), "ExperimentPlateauStopper.mode", mode, "'min' or 'max'")
        _check(isinstance(patience, int) and patience >= 0, "ExperimentPlateauStopper.patience", patience,
               "an int >= 0")
        _check(isinstance(top, int) and top >= 1, "ExperimentPlateauStopper.top", top, "an int >= 1")
        _check(_number(std) is not None and std > 0, "ExperimentPlateauStopper.std", std, "a number > 0")
        self._metric = metric
        self._mode = mode
        self._patience = patience
        self._top = top
        self._std = float(std)
        self._values: list[float] = []
        self._plateaued_for = 0

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        value = _number(result.get(self._metric))
        if value is not None and math.isfinite(value):
            ordered = sorted([*self._values, value])
            self._values = ordered[: self._top] if self._mode == "min" else ordered[-self._top:]
        self._plateaued_for = self._plateaued_for + 1 if self.has_plateaued() else 0
        return self.stop_all()

    def has_plateaued(self) -> bool:
        return len(self._values) == self._top and statistics.pstdev(self._values) <= self._std

    def stop_all(self) -> bool:
        return self.has_plateaued() and self._plateaued_for >= self._patience


class TimeoutStopper(Stopper):
    """Stop the whole experiment ``timeout`` after this stopper was made.

    Args:
        timeout: seconds (a number) or a ``datetime.timedelta``.
    """

    def __init__(self, timeout: float | datetime.timedelta) -> None:
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        _check(_number(timeout) is not None and timeout > 0, "TimeoutStopper.timeout", timeout,
               "a number of seconds > 0 or a datetime.timedelta")
        self._budget = float(timeout)
        self._start = time.time()

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return time.time() - self._start >= self._budget


class CombinedStopper(Stopper):
    """Stops what any of its stoppers stops (every one of them sees every result)."""

    def __init__(self, *stoppers: Stopper) -> None:
        for i, s in enumerate(stoppers):
            if not isinstance(s, Stopper):
                raise TypeError(f"CombinedStopper's argument {i} is {type(s).__name__}, not a Stopper "
                                "(wrap a function in FunctionStopper)")
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        votes = [s(trial_id, result) for s in self._stoppers]  # every stopper sees every result: no short-circuit
        return any(votes)

    def stop_all(self) -> bool:
        votes = [s.stop_all() for s in self._stoppers]
        return any(votes)
