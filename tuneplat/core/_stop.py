"""Stop rules: what ends a trial (or every trial) apart from the scheduler.

``RunConfig(stop=...)`` as a dict of thresholds, a callable ``(trial_id, result)
-> bool`` or a :class:`tuneplat.Stopper` (whose ``stop_all()`` ends the
experiment); a result that says ``done=True``; and the checks every result must
pass (the metric is there and is a number, every stop key is reported).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["AUTO_KEYS", "MetricCheck", "StopRules"]

#: keys every result carries without the user reporting them
AUTO_KEYS = frozenset({"training_iteration", "time_this_iter_s", "time_total_s", "timestamp",
                       "iterations_since_restore", "trial_id", "pid", "hostname", "done", "date", "node_ip",
                       "time_since_restore", "checkpoint_dir_name", "experiment_tag"})


def _did_you_mean(name: str, keys: list[str]) -> str:
    close = difflib.get_close_matches(name, keys, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class MetricCheck:
    """What a result must hold: the objective metric(s) as numbers, and every stop-dict key."""

    def __init__(self, metric: str | list[str] | None, stop_keys: list[str]) -> None:
        self.metrics = metric if isinstance(metric, list) else ([metric] if metric else [])
        self.metric = metric
        self.stop_keys = stop_keys

    def problem(self, trial_id: str, result: Mapping[str, Any]) -> tuple[str | None, bool]:
        """``(message, is_misspelt_name)`` for a result that breaks a rule, else ``(None, False)``.

        A missing name is a mistake in the experiment's set-up (every trial will
        make it), not a failure of one trial: the loop ends the experiment on it.
        """
        user_keys = sorted(k for k in result if k not in AUTO_KEYS)
        missing = [k for k in self.stop_keys if k not in result]
        if missing:  # Ray raises too: a misspelt stop key would otherwise never stop anything
            hint = "".join(_did_you_mean(k, user_keys) for k in missing)
            return (f"RunConfig(stop=...) names {missing}, which trial {trial_id} did not report{hint} (it "
                    f"reported {user_keys} and the automatic keys such as 'training_iteration'); fix the "
                    "spelling, or report that key in every report() call."), True
        for m in self.metrics:
            if m not in result:
                return (f"trial {trial_id} reported {user_keys} without the metric {m!r}{_did_you_mean(m, user_keys)} "
                        f"that TuneConfig(metric={self.metric!r}) expects; fix TuneConfig.metric, or include {m!r} "
                        "in every report() call."), True
            v = result[m]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return (f"trial {trial_id} reported metric {m!r} = {v!r} ({type(v).__name__}); "
                        "it must be a number (int or float)."), False
        return None, False

    def non_finite(self, result: Mapping[str, Any]) -> list[tuple[str, float]]:
        return [(m, result[m]) for m in self.metrics
                if isinstance(result.get(m), float) and not math.isfinite(result[m])]


class StopRules:
    """``RunConfig(stop=...)`` and ``done=True``, asked for every result."""

    def __init__(self, stop: Any) -> None:
        self.stop = stop
        self._fn = self._make(stop)
        self.stop_keys = [k for k in stop if k != "done"] if isinstance(stop, Mapping) else []
        stop_all = getattr(stop, "stop_all", None) if stop is not None and not isinstance(stop, Mapping) else None
        self._stop_all: Callable[[], bool] | None = stop_all if callable(stop_all) else None

    @property
    def has_stop_all(self) -> bool:
        return self._stop_all is not None

    @staticmethod
    def _make(stop: Any) -> Callable[[str, Mapping[str, Any]], bool] | None:
        if stop is None:
            return None
        if callable(stop):
            return lambda tid, result: bool(stop(tid, result))
        criteria = dict(stop)

        def check(tid: str, result: Mapping[str, Any]) -> bool:
            for key, threshold in criteria.items():
                v = result.get(key)
                if isinstance(v, (int, float)) and v >= threshold:  # bools too: stop={"done": True}
                    return True
            return False

        return check

    def reason_to_stop(self, trial_id: str, result: Mapping[str, Any]) -> str | None:
        """Why this result ends its trial (``done=True``, a stop criterion), or None."""
        done = result.get("done")
        if isinstance(done, (bool, int)) and done:  # Ray: a result that says done ends the trial (classes too)
            return "the trial reported done=True"
        if self._fn is not None and self._fn(trial_id, result):
            return "stop criteria met"
        return None

    def stop_all(self) -> bool:
        """The stopper's ``stop_all()`` (as in Ray): end every trial."""
        return self._stop_all is not None and bool(self._stop_all())

    def name(self) -> str:
        return type(self.stop).__name__
