"""Synchronous HyperBand (Li, Jamieson, DeSalvo, Rostamizadeh, Talwalkar, JMLR 2017)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ._base import Decision, Resume, Stop, TrialScheduler, require_argument
from ._common import display, is_number, result_time
from ._pareto import TIEBREAKS, mo_rank

__all__ = ["HyperBandScheduler"]


@dataclass
class _Bracket:
    """One successive-halving run: ``capacity`` trials, rung budgets ``r * η**i``."""

    index: int
    s: int
    capacity: int
    budgets: list[float]
    members: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)
    waiting: dict[str, Any] = field(default_factory=dict)
    round: int = 0
    closed: bool = False

    def ready(self) -> bool:
        """Whether the current round is complete: bracket full/closed, all live trials at the rung."""
        full = self.closed or len(self.members) >= self.capacity
        return full and bool(self.live) and all(t in self.waiting for t in self.live)

    @property
    def milestone(self) -> float:
        return self.budgets[min(self.round, len(self.budgets) - 1)]

    @property
    def last_round(self) -> bool:
        return self.round >= len(self.budgets) - 1


class HyperBandScheduler(TrialScheduler):
    """Synchronous HyperBand with Ray Tune's arguments and defaults.

    With ``s_max = floor(log_η(max_t))``, bracket ``s`` (``s_max`` down to 0,
    then again from ``s_max``: one HyperBand iteration after another) takes
    ``n = ceil((s_max + 1) / (s + 1) * η**s)`` trials, in the order they are
    added, and runs successive halving on them with rung budgets
    ``r_i = max_t * η**(i - s)`` for ``i = 0..s`` (the last is ``max_t``).

    A trial reaching its bracket's current rung budget gets ``PAUSE`` (its
    score is recorded). When the bracket is full (or closed by
    :meth:`on_search_finished`) and every live trial of it has reached the
    rung, the top ``max(1, floor(m / η))`` of the ``m`` trials are promoted
    (``Resume`` actions) and the others stopped (``Stop`` actions). The trial
    whose result completes a round gets the verdict directly as its decision
    (CONTINUE or STOP) instead of a PAUSE followed by an action. Ties are
    broken by the order of addition; non-finite/missing metrics rank last.
    Trials reaching ``max_t`` are stopped (``stop_last_trials``) or left to
    run to the tuner's own stop criteria.

    A trial that completes or fails while its bracket waits is removed from
    the bracket (which may complete the round). The tuner must call
    :meth:`on_search_finished` when no more trials come, otherwise a bracket
    that never fills keeps its trials paused.

    Args:
        time_attr: Result key measuring progress.
        metric: Metric to optimise (or via ``set_objective``).
        mode: "min" or "max".
        max_t: Largest budget per trial, also the last rung of every bracket.
        reduction_factor: η (``>= 2``).
        stop_last_trials: Stop trials at ``max_t``.
        mo_tiebreak: With several objectives (``metric=[...]``, ``mode=[...]``)
            a round ranks its trials by non-dominated sorting, then within a
            front by ``"crowding"`` distance or ``"epsnet"`` order (see
            :class:`~schedulers.ASHAScheduler`); ties by order of addition.

    Example:
        >>> [(b["s"], b["n"], b["r"]) for b in HyperBandScheduler(max_t=9).bracket_table()]
        [(2, 9, 1.0), (1, 5, 3.0), (0, 3, 9.0)]
    """

    name = "hyperband"

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        max_t: float = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
        mo_tiebreak: str = "crowding",
    ) -> None:
        super().__init__(metric, mode)
        require_argument(mo_tiebreak in TIEBREAKS, "mo_tiebreak", mo_tiebreak,
                         f"mo_tiebreak in {list(TIEBREAKS)}")
        self.mo_tiebreak = mo_tiebreak
        require_argument(isinstance(time_attr, str) and bool(time_attr), "time_attr", time_attr,
                         "time_attr is a non-empty str")
        require_argument(is_number(max_t) and max_t > 0, "max_t", max_t, "max_t > 0")
        require_argument(is_number(reduction_factor) and reduction_factor >= 2,
                         "reduction_factor", reduction_factor, "reduction_factor >= 2")
        self.time_attr = time_attr
        self.max_t = max_t
        self.reduction_factor = reduction_factor
        self.stop_last_trials = bool(stop_last_trials)
        eta = Fraction(reduction_factor)
        s_max = 0
        while eta ** (s_max + 1) <= Fraction(max_t):
            s_max += 1
        self.s_max = s_max
        self._table: list[dict[str, Any]] = []
        for s in range(s_max, -1, -1):
            n = math.ceil(Fraction(s_max + 1, s + 1) * eta**s)
            r = Fraction(max_t) / eta**s
            rounds = [(int(Fraction(n) / eta**i), float(r * eta**i)) for i in range(s + 1)]
            self._table.append({"s": s, "n": n, "r": float(r), "rounds": rounds})
        self._brackets: list[_Bracket] = []
        self._bracket_of: dict[str, _Bracket] = {}
        self._stopped: set[str] = set()
        self._done: set[str] = set()
        self._search_finished = False

    def supports_multi_objective(self) -> bool:
        return True

    def bracket_table(self) -> list[dict[str, Any]]:
        """The paper's table: per bracket ``s`` (largest first) ``n``, ``r`` and
        ``rounds`` = ``[(n_i, r_i), ...]`` with ``n_i = floor(n η^-i)``, ``r_i = r η^i``."""
        return [dict(row, rounds=list(row["rounds"])) for row in self._table]

    def bracket_of(self, trial_id: str) -> tuple[int, int]:
        """``(bracket index, s)`` of the trial."""
        bracket = self._bracket_of[trial_id]
        return bracket.index, bracket.s

    def describe(self) -> dict[str, Any]:
        info = {
            **super().describe(),
            "time_attr": self.time_attr,
            "max_t": self.max_t,
            "reduction_factor": self.reduction_factor,
            "stop_last_trials": self.stop_last_trials,
        }
        if self.multi_objective:
            info["mo_tiebreak"] = self.mo_tiebreak
        return info

    # -- events -------------------------------------------------------
    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, config)
        if trial_id in self._bracket_of:
            return
        current = self._brackets[-1] if self._brackets else None
        if current is None or current.closed or len(current.members) >= current.capacity:
            row = self._table[len(self._brackets) % len(self._table)]
            budgets = [r for _, r in row["rounds"]]
            current = _Bracket(len(self._brackets), row["s"], row["n"], budgets,
                               closed=self._search_finished)
            self._brackets.append(current)
        current.members.append(trial_id)
        current.live.add(trial_id)
        self._bracket_of[trial_id] = current

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._require_known(trial_id)
        if trial_id in self._stopped:
            return Decision.STOP
        bracket = self._bracket_of[trial_id]
        if trial_id not in bracket.live:
            return Decision.CONTINUE  # past max_t without stop_last_trials, or completed
        if trial_id in bracket.waiting:
            return Decision.PAUSE  # a late result after the PAUSE: keep the first score
        time = result_time(result, self.time_attr)
        if time is None or time < bracket.milestone:
            return Decision.CONTINUE
        if bracket.last_round:
            bracket.live.discard(trial_id)
            self._done.add(trial_id)
            if self.stop_last_trials:
                self._stopped.add(trial_id)
                return self._record_stop(
                    trial_id,
                    f"stopped by HyperBand: reached max_t={self.max_t:g} ({self.time_attr}={time:g})",
                )
            return Decision.CONTINUE
        bracket.waiting[trial_id] = self._scores(result) if self.multi_objective else self._score(result)
        verdict = self._advance(bracket, current=trial_id)
        return Decision.PAUSE if verdict is None else verdict

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        self._forget(trial_id)

    def on_trial_error(self, trial_id: str) -> None:
        self._forget(trial_id)

    def on_search_finished(self) -> None:
        self._search_finished = True
        for bracket in self._brackets:
            bracket.closed = True
            self._advance(bracket)

    # -- internals ----------------------------------------------------
    def _forget(self, trial_id: str) -> None:
        bracket = self._bracket_of.get(trial_id)
        self._done.add(trial_id)
        self._drop_actions(trial_id)
        if bracket is None or trial_id not in bracket.live:
            return
        bracket.live.discard(trial_id)
        bracket.waiting.pop(trial_id, None)
        self._advance(bracket)

    def _advance(self, bracket: _Bracket, current: str | None = None) -> Decision | None:
        """Close the bracket's round if complete; return the current trial's verdict."""
        if not bracket.ready():
            return None
        order = {t: i for i, t in enumerate(bracket.members)}
        if self.multi_objective:
            items = sorted(bracket.waiting.items(), key=lambda item: order[item[0]])
            ranked = [items[i] for i in mo_rank([v for _, v in items], self.mo_tiebreak)]
        else:
            ranked = sorted(bracket.waiting.items(), key=lambda item: (item[1], order[item[0]]))
        keep = max(1, int(len(ranked) / self.reduction_factor))
        milestone = bracket.milestone
        level = bracket.round
        bracket.round += 1
        bracket.waiting = {}
        verdict: Decision | None = None
        for position, (trial_id, value) in enumerate(ranked):
            if position < keep:
                if trial_id == current:
                    verdict = Decision.CONTINUE
                else:
                    self._actions.append(Resume(trial_id))
                continue
            bracket.live.discard(trial_id)
            self._stopped.add(trial_id)
            reason = (
                f"stopped by HyperBand (bracket {bracket.index}, s={bracket.s}) at rung {level} "
                f"(t={milestone:g}): {display(value, self.mode)} not in top {keep} of {len(ranked)}"
            )
            if trial_id == current:
                verdict = self._record_stop(trial_id, reason)
            else:
                self._record_stop(trial_id, reason)
                self._actions.append(Stop(trial_id, reason))
        return verdict
