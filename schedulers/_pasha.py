"""PASHA: ASHA that grows its maximum resource only while the ranking at the top is unstable.

Bohdal, Balles, Wistuba, Ermis, Archambeau, Zappella: "PASHA: Efficient HPO and
NAS with Progressive Resource Allocation" (ICLR 2023).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._asha import ASHAScheduler
from ._base import Decision, Resume, Stop, require_argument
from ._common import is_number, lower_quantile, result_time

__all__ = ["PASHAScheduler"]


class PASHAScheduler(ASHAScheduler):
    """Progressive ASHA: ASHA's rungs, with a maximum resource that starts small and grows on demand.

    The rungs are ASHA's (``grace_period * η**k < max_t``, or your
    ``rung_levels``), followed by ``max_t``. PASHA starts with the second rung
    as the *current maximum*: a trial reaching it (and passing ASHA's top-1/η
    rule there) is paused instead of going on. Each time a trial is recorded
    at the current maximum rung, the trials recorded at both it and the rung
    below are compared: if two of them are ordered differently at the two
    rungs by more than ``epsilon`` (a "soft ranking": closer scores count as
    tied), the ranking has not settled, so the maximum grows by one rung and
    the paused trials resume (``Resume`` actions) towards the new maximum.
    Once the maximum reaches ``max_t``, PASHA is ASHA.

    When no trial runs any more and the search has finished, trials still
    paused at the current maximum are stopped (``Stop`` actions): the ranking
    settled there, and that is the resource PASHA judged enough.

    ``epsilon="auto"`` estimates the noise level from the learning curves:
    over every pair of trials recorded at two consecutive rungs *below* the
    current maximum whose order swapped between them, the ``epsilon_percentile``
    percentile of their score difference at the upper rung (0 while there is
    no such pair, i.e. a strict ranking at first). Single objective only.

    Args:
        time_attr: Result key measuring progress.
        metric: Metric to optimise (or via ``set_objective``).
        mode: "min" or "max".
        max_t: The largest resource PASHA may grow to.
        grace_period: First rung.
        reduction_factor: η (``>= 2``).
        stop_last_trials: Stop trials reaching ``max_t``.
        seed: Unused (PASHA has one bracket); kept for symmetry with ASHA.
        rung_levels: Your own rung milestones (see :class:`ASHAScheduler`).
        epsilon: Scores closer than this count as tied (``>= 0``), or ``"auto"``.
        epsilon_percentile: The percentile for ``epsilon="auto"`` (0-100).

    Example:
        >>> s = PASHAScheduler(metric="loss", mode="min", max_t=81, grace_period=1, reduction_factor=3)
        >>> s.rung_milestones(), s.current_max_t
        ([1, 3, 9, 27], 3)
    """

    name = "pasha"

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        stop_last_trials: bool = True,
        seed: int | None = None,
        rung_levels: Sequence[float] | None = None,
        epsilon: float | str = "auto",
        epsilon_percentile: float = 90,
    ) -> None:
        if isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple)):
            raise ValueError("PASHAScheduler decides on one metric: pass one metric and one mode "
                             "(for several objectives use ASHAScheduler(metric=[...], mode=[...])).")
        super().__init__(time_attr=time_attr, metric=metric, mode=mode, max_t=max_t, grace_period=grace_period,
                         reduction_factor=reduction_factor, brackets=1, stop_last_trials=stop_last_trials,
                         seed=seed, rung_levels=rung_levels)
        require_argument(epsilon == "auto" or (is_number(epsilon) and not isinstance(epsilon, str)
                                               and epsilon >= 0), "epsilon", epsilon,
                         "epsilon >= 0 or epsilon == 'auto'")
        require_argument(is_number(epsilon_percentile) and 0 <= epsilon_percentile <= 100,
                         "epsilon_percentile", epsilon_percentile, "0 <= epsilon_percentile <= 100")
        self.epsilon = epsilon
        self.epsilon_percentile = epsilon_percentile
        self._levels = self._brackets[0].milestones + [max_t]
        self._top = min(1, len(self._levels) - 1)  # index into _levels of the current maximum
        self._paused: list[str] = []
        self._running: set[str] = set()
        self._done: set[str] = set()
        self._search_finished = False
        #: ``(time_attr value, new maximum)`` each time the maximum grew
        self.growth: list[tuple[float, float]] = []

    def supports_multi_objective(self) -> bool:
        return False

    @property
    def current_max_t(self) -> float:
        """The resource trials may reach now (grows up to ``max_t``)."""
        return self._levels[self._top]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "epsilon": self.epsilon, "epsilon_percentile": self.epsilon_percentile,
                "current_max_t": self.current_max_t}

    # -- events -------------------------------------------------------
    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, config)
        if trial_id not in self._done:
            self._running.add(trial_id)

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._require_known(trial_id)
        if trial_id in self._paused:
            return Decision.PAUSE  # a late result after the PAUSE
        recorded = self._brackets[0].recorded
        top = self._top
        judged_before = top < len(recorded) and trial_id in recorded[top]
        decision = super().on_trial_result(trial_id, result)
        if top >= len(self._levels) - 1:
            return decision  # the maximum is max_t: plain ASHA
        time = result_time(result, self.time_attr)
        if not judged_before and trial_id in recorded[top] and self._ranking_unstable():
            # recorded at the current maximum (passed or not): the ranking of the top rungs has not settled
            self._grow(time if time is not None else self.current_max_t)
        if decision is not Decision.CONTINUE or time is None or time < self.current_max_t:
            return decision
        # it reached the current maximum and passed the rung there: it waits until the maximum grows
        self._paused.append(trial_id)
        self._running.discard(trial_id)
        self._maybe_finish()
        if trial_id in self._stopped:  # it was the last one running: it ends here rather than pausing
            self._drop_actions(trial_id)
            return Decision.STOP
        return Decision.PAUSE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        self._forget(trial_id)

    def on_trial_error(self, trial_id: str) -> None:
        self._forget(trial_id)

    def on_search_finished(self) -> None:
        self._search_finished = True
        self._maybe_finish()

    # -- internals ----------------------------------------------------
    def _forget(self, trial_id: str) -> None:
        self._done.add(trial_id)
        self._running.discard(trial_id)
        if trial_id in self._paused:
            self._paused.remove(trial_id)
        self._drop_actions(trial_id)
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        """Nothing runs and nothing more comes: trials paused at the maximum end there."""
        if not self._search_finished or self._running or not self._paused:
            return
        for trial_id in self._paused:
            reason = (f"stopped by PASHA at max_t={self.current_max_t:g}: the ranking of the top rungs "
                      "settled there (the maximum resource did not need to grow)")
            self._stopped.add(trial_id)
            self._record_stop(trial_id, reason)
            self._actions.append(Stop(trial_id, reason))
        self._paused = []

    def _epsilon(self) -> float:
        if self.epsilon != "auto":
            return float(self.epsilon)
        recorded = self._brackets[0].recorded
        gaps: list[float] = []
        for upper in range(1, self._top):  # rung pairs below the current maximum: the noise seen so far
            low, high = recorded[upper - 1], recorded[upper]
            both = [t for t in high if t in low and math.isfinite(high[t]) and math.isfinite(low[t])]
            for i, a in enumerate(both):
                for b in both[i + 1:]:
                    if (low[a] - low[b]) * (high[a] - high[b]) < 0:
                        gaps.append(abs(high[a] - high[b]))
        if not gaps:
            return 0.0
        value = lower_quantile(gaps, self.epsilon_percentile / 100.0)
        return 0.0 if value is None else value

    def _ranking_unstable(self) -> bool:
        """Two trials recorded at the maximum rung and the one below are ordered differently beyond epsilon."""
        recorded = self._brackets[0].recorded
        top = self._top
        if top < 1 or top >= len(recorded):
            return False
        low, high = recorded[top - 1], recorded[top]
        both = [t for t in high if t in low]
        eps = self._epsilon()
        for i, a in enumerate(both):
            for b in both[i + 1:]:
                before, after = low[a] - low[b], high[a] - high[b]
                if not (math.isfinite(before) and math.isfinite(after)):
                    continue
                if (before > eps and after < -eps) or (before < -eps and after > eps):
                    return True
        return False

    def _grow(self, time: float) -> None:
        """One rung more; the trials paused at the old maximum go on."""
        self._top += 1
        self.growth.append((time, self.current_max_t))
        paused, self._paused = self._paused, []
        for trial_id in paused:
            self._running.add(trial_id)
            self._actions.append(Resume(trial_id))
