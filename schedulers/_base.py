"""The scheduler contract: decisions from reported results only.

A scheduler sees trial ids, configs and result dicts. It never sees a path,
a future or a process. The tuner calls, for every trial:

* ``on_trial_add(trial_id, config)`` once, before the trial's first result;
* ``on_trial_result(trial_id, result) -> Decision`` for every result;
* ``on_trial_complete(trial_id, result)`` when the trial ended normally
  (including after a STOP decision), or ``on_trial_error(trial_id)``;

and, once for the experiment, ``on_search_finished()`` when no new trial
will be added. Schedulers that pause or clone trials queue *actions*
(:class:`Resume`, :class:`Launch`, :class:`Stop`) which the tuner drains with
``pop_actions()`` and carries out.

Results are dicts as the tuner streams them: they hold the user's metrics and
the auto-filled keys (``training_iteration``, ``time_total_s``, ...). A
scheduler reads its ``time_attr`` and its ``metric`` from them; a missing or
non-finite metric counts as the worst possible value (see :func:`score`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "Decision",
    "Launch",
    "Resume",
    "Stop",
    "TrialScheduler",
    "UnknownTrialError",
    "require_argument",
    "score",
    "validate_mode",
]


class Decision(Enum):
    """What a trial does after a result."""

    CONTINUE = "CONTINUE"
    STOP = "STOP"
    PAUSE = "PAUSE"

    def ends_run(self) -> bool:
        """True when the trial's worker group must end at this result."""
        return self is not Decision.CONTINUE


@dataclass(frozen=True)
class Resume:
    """Resume the paused trial ``trial_id`` from its own latest checkpoint.

    ``resources``: new resources for it (``{"bundles": [{"CPU": 2}], "strategy": "PACK", "reason": ...}``,
    what a resource-changing scheduler decided); None: the ones it had.
    """

    trial_id: str
    resources: Mapping[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class Launch:
    """Restart paused trial ``trial_id`` with ``config``, from ``from_trial``'s latest checkpoint.

    This is how PBT's exploit step is spelled: the tuner copies the
    checkpoint of ``from_trial`` and starts ``trial_id`` again with the new
    config. ``info`` is free-form lineage data the tuner records.
    """

    trial_id: str
    config: Mapping[str, Any]
    from_trial: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stop:
    """End the paused trial ``trial_id`` for good (e.g. not promoted by HyperBand)."""

    trial_id: str
    reason: str = ""


class UnknownTrialError(KeyError):
    """A result arrived for a trial the scheduler never saw in ``on_trial_add``.

    It is a :class:`KeyError` (the trial id is not a key of the scheduler's
    table); its message says what to do.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown trial"


def require_argument(ok: bool, argument: str, value: Any, rule: str) -> None:
    """Raise ``ValueError`` in Optuna's wording unless ``ok``.

    Example:
        >>> require_argument(False, "reduction_factor", 1, "reduction_factor >= 2")
        Traceback (most recent call last):
        ...
        ValueError: The value of `reduction_factor` is 1, but must be `reduction_factor >= 2`.
    """
    if not ok:
        raise ValueError(f"The value of `{argument}` is {value!r}, but must be `{rule}`.")


def validate_mode(mode: str | None, argument: str = "mode") -> None:
    """Raise ValueError unless ``mode`` is None, "min" or "max"."""
    if mode not in (None, "min", "max"):
        raise ValueError(f"The value of `{argument}` is {mode!r}, but must be 'min' or 'max'.")


def score(result: Mapping[str, Any], metric: str, mode: str) -> float:
    """The result's metric normalised so that lower is better.

    Missing, non-numeric and non-finite values are the worst value (``+inf``),
    so they never win a comparison and never move a cut-off below a finite
    result.
    """
    value = result.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # type: ignore[arg-type]  # numpy scalars, 0-d tensors
        except (TypeError, ValueError):
            return math.inf
    value = float(value)
    if not math.isfinite(value):
        return math.inf
    return value if mode == "min" else -value


class TrialScheduler:
    """Base class: every hook has a do-nothing default except the decision.

    Subclasses override :meth:`on_trial_result` (the one required method)
    and whichever hooks they need. ``metric``/``mode`` may be given at
    construction or later through :meth:`set_objective` (the tuner passes
    ``TuneConfig.metric``/``mode``).
    """

    #: Name used in logs, journals and MLflow tags.
    name: str = "scheduler"

    def __init__(self, metric: str | list[str] | None = None, mode: str | list[str] | None = None) -> None:
        self._validate_objective(metric, mode)
        self.metric: Any = list(metric) if isinstance(metric, (list, tuple)) else metric
        self.mode: Any = list(mode) if isinstance(mode, (list, tuple)) else mode
        self._actions: list[Resume | Launch | Stop] = []
        self._known_trials: set[str] = set()
        self._stop_reasons: dict[str, str] = {}

    # -- configuration -------------------------------------------------
    def supports_multi_objective(self) -> bool:
        """Whether ``metric``/``mode`` may be lists (several objectives); False unless a scheduler says so."""
        return False

    @property
    def multi_objective(self) -> bool:
        """True when the scheduler decides on several objectives (``metric`` is a list)."""
        return isinstance(self.metric, list)

    def _validate_objective(self, metric: Any, mode: Any) -> None:
        if isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple)):
            if not self.supports_multi_objective():
                raise ValueError(
                    f"{type(self).__name__} decides on one metric, got metric={metric!r}, mode={mode!r}: pass one "
                    "metric and one mode (ASHAScheduler and HyperBandScheduler take lists).")
            if not (isinstance(metric, (list, tuple)) and metric and all(isinstance(m, str) for m in metric)):
                raise ValueError(f"The value of `metric` is {metric!r}, but must be a non-empty list of metric "
                                 "names when `mode` is a list.")
            if len(set(metric)) != len(metric):
                raise ValueError(f"The value of `metric` is {metric!r}, but must name each metric once.")
            if mode is not None:
                if not isinstance(mode, (list, tuple)) or len(mode) != len(metric):
                    raise ValueError(f"The value of `mode` is {mode!r}, but must be a list of 'min'/'max' as long "
                                     f"as metric={list(metric)!r}.")
                for i, m in enumerate(mode):
                    validate_mode(m, f"mode[{i}]")
            return
        validate_mode(mode)

    def set_objective(self, metric: str | list[str] | None, mode: str | list[str] | None) -> None:
        """Adopt the experiment's metric/mode unless set at construction.

        Raises:
            ValueError: when both are set and disagree, or none is set.
        """
        self._validate_objective(metric, mode)
        metric = list(metric) if isinstance(metric, tuple) else metric
        mode = list(mode) if isinstance(mode, tuple) else mode
        if self.metric is not None and metric is not None and metric != self.metric:
            raise ValueError(
                f"{type(self).__name__} was built with metric={self.metric!r} but the "
                f"TuneConfig says metric={metric!r}; give the metric in one place."
            )
        if self.mode is not None and mode is not None and mode != self.mode:
            raise ValueError(
                f"{type(self).__name__} was built with mode={self.mode!r} but the "
                f"TuneConfig says mode={mode!r}; give the mode in one place."
            )
        self.metric = self.metric or metric
        self.mode = self.mode or mode
        if self.metric is not None and self.mode is not None:
            self._validate_objective(self.metric, self.mode)
            if isinstance(self.metric, list) != isinstance(self.mode, list):
                raise ValueError(f"{type(self).__name__} has metric={self.metric!r} and mode={self.mode!r}: give "
                                 "one mode per metric (both lists, or both single values).")
        if self.requires_objective() and (self.metric is None or self.mode is None):
            raise ValueError(
                f"{type(self).__name__} needs a metric and a mode: pass them to the "
                "scheduler or to TuneConfig(metric=..., mode=...)."
            )

    def requires_objective(self) -> bool:
        """Whether this scheduler needs ``metric`` and ``mode`` to decide."""
        return True

    def describe(self) -> dict[str, Any]:
        """Name and settings, for journals and experiment tracking."""
        return {"scheduler": self.name, "metric": self.metric, "mode": self.mode}

    # -- events -------------------------------------------------------
    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """A new trial will run with ``config``.

        The base implementation records the id (see :meth:`_require_known`);
        subclasses that override it call ``super().on_trial_add(...)``.
        """
        self._known_trials.add(trial_id)

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Decide what the trial does after ``result``. The one required method."""
        raise NotImplementedError

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        """The trial ended (normally or after STOP); ``result`` is its last result."""

    def on_trial_error(self, trial_id: str) -> None:
        """The trial failed for good."""

    def on_search_finished(self) -> None:
        """No more trials will be added (lets synchronous schedulers close brackets)."""

    def stop_reason(self, trial_id: str) -> str | None:
        """Human-readable reason of the last STOP (decision or action) given to the trial.

        ``None`` when the scheduler never stopped it. The tuner records it in
        the trial's tags, e.g. ``"stopped by ASHA at rung 3 (t=27): 0.53 not
        in top 1/3 (cut-off 0.41)"``.
        """
        return self._stop_reasons.get(trial_id)

    # -- helpers for subclasses ---------------------------------------
    def _require_known(self, trial_id: str) -> None:
        """Raise :class:`UnknownTrialError` for a trial never given to ``on_trial_add``."""
        if trial_id not in self._known_trials:
            raise UnknownTrialError(
                f"{type(self).__name__} got a result for trial {trial_id!r}, which was never "
                "added: call on_trial_add(trial_id, config) before on_trial_result."
            )

    def _record_stop(self, trial_id: str, reason: str) -> Decision:
        """Remember ``reason`` for :meth:`stop_reason` and return ``Decision.STOP``."""
        self._stop_reasons[trial_id] = reason
        return Decision.STOP

    def _drop_actions(self, trial_id: str) -> None:
        """Forget queued actions for a trial that ended before they were drained."""
        self._actions = [a for a in self._actions if a.trial_id != trial_id]

    # -- actions ------------------------------------------------------
    def pop_actions(self) -> list[Resume | Launch | Stop]:
        """Return and clear the queued launch/resume/stop requests."""
        actions, self._actions = self._actions, []
        return actions

    def _score(self, result: Mapping[str, Any]) -> float:
        assert self.metric is not None and self.mode is not None  # set_objective ran
        return score(result, self.metric, self.mode)

    def _scores(self, result: Mapping[str, Any]) -> tuple[float, ...]:
        """The result's objectives, each normalised so that lower is better (one for a single metric)."""
        assert self.metric is not None and self.mode is not None  # set_objective ran
        if isinstance(self.metric, list):
            return tuple(score(result, m, d) for m, d in zip(self.metric, self.mode))
        return (score(result, self.metric, self.mode),)
