"""Asynchronous successive halving (ASHA), as Ray Tune's ``ASHAScheduler``.

Li, Jamieson, Rostamizadeh, Gonina, Hardt, Recht, Talwalkar: "A System for
Massively Parallel Hyperparameter Tuning" (MLSys 2020).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._base import Decision, TrialScheduler, require_argument
from ._common import display, finite_number, is_number, lower_quantile, result_time
from ._pareto import TIEBREAKS, dominates, mo_rank

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]


class _Bracket:
    """One ASHA bracket: rung milestones and what was recorded at each (scores, costs, arrival order)."""

    def __init__(self, milestones: list[float], reduction_factor: float) -> None:
        self.milestones = milestones
        self.recorded: list[dict[str, Any]] = [{} for _ in milestones]
        self.costs: list[dict[str, float]] = [{} for _ in milestones]
        self.reduction_factor = reduction_factor

    def level_for(self, trial_id: str, time: float) -> int:
        """The highest rung ``time`` reached that the trial is not recorded at yet; -1 when none."""
        for level in reversed(range(len(self.milestones))):
            if time >= self.milestones[level] and trial_id not in self.recorded[level]:
                return level
        return -1

    def judge(self, level: int, trial_id: str, value: Any, cost: float | None,
              rank: Callable[[list[Any]], list[int]] | None,
              by_cost: bool, dominators: Callable[[Any, Any], bool] | None = None) -> tuple[Decision, float | None, str]:
        """Record the trial at rung ``level`` and decide.

        Single objective, no cost: continue when not worse than the
        ``1/reduction_factor`` quantile of the *others* recorded there (Ray's
        rule). Otherwise (several objectives, or ``cost_attr``): the trial and
        the others are ranked (``rank``: best first) and it continues when it
        is among the best ``max(1, floor(n / η))`` (or, by cost, when the
        cumulative cost of the trials ranked up to and including it is at most
        ``1/η`` of the rung's total cost; the best always continues). The first
        trial at a rung always continues.

        Returns:
            ``(decision, cut-off, detail)``: the quantile cut-off (Ray's rule), or
            a detail explaining a STOP by rank or cost.
        """
        recorded = self.recorded[level]
        others = dict(recorded)
        recorded[trial_id] = value
        self.costs[level][trial_id] = cost if cost is not None else self.milestones[level]
        if not others:
            return Decision.CONTINUE, None, ""
        eta = self.reduction_factor
        if rank is None and not by_cost:
            cutoff = lower_quantile(list(others.values()), 1.0 / eta)
            assert cutoff is not None
            if math.isfinite(value) and value <= cutoff:
                return Decision.CONTINUE, cutoff, ""
            return Decision.STOP, cutoff, ""
        ids = list(recorded)  # arrival order: ties go to the earlier trial
        values = [recorded[t] for t in ids]
        if rank is not None and dominators is not None:
            # a trial dominated by others ranks after all of them (they sit in earlier fronts): when they alone
            # fill what is kept, it stops without sorting the rung (O(n) instead of O(n^2) per decision)
            beaten_by = [t for t in ids if t != trial_id and dominators(recorded[t], value)]
            if by_cost:
                spent = sum(self.costs[level][t] for t in beaten_by) + self.costs[level][trial_id]
                total = sum(self.costs[level][t] for t in ids)
                if beaten_by and spent > total / eta + 1e-12:
                    return Decision.STOP, None, (f"dominated by {len(beaten_by)} of {len(ids)}; their cumulative "
                                                 f"cost {spent:.4g} exceeds 1/{eta:g} of the rung's {total:.4g}")
            elif len(beaten_by) >= max(1, int(len(ids) / eta)):
                return Decision.STOP, None, (f"dominated by {len(beaten_by)} of {len(ids)}, keeping "
                                             f"{max(1, int(len(ids) / eta))}")
        if rank is None:
            order = sorted(range(len(ids)), key=lambda i: (values[i], i))
        else:
            order = rank(values)
        position = order.index(ids.index(trial_id))
        if by_cost:
            costs = self.costs[level]
            total = sum(costs[t] for t in ids)
            spent = sum(costs[ids[i]] for i in order[: position + 1])
            if position == 0 or spent <= total / eta + 1e-12:
                return Decision.CONTINUE, None, ""
            return Decision.STOP, None, (f"ranked {position + 1} of {len(ids)}; the better-ranked trials' cumulative "
                                   f"cost {spent:.4g} exceeds 1/{eta:g} of the rung's {total:.4g}")
        keep = max(1, int(len(ids) / eta))
        if position < keep:
            return Decision.CONTINUE, None, ""
        return Decision.STOP, None, f"ranked {position + 1} of {len(ids)}, keeping {keep}"


class ASHAScheduler(TrialScheduler):
    """Asynchronous successive halving with Ray Tune's arguments and defaults; MO-ASHA and cost-aware promotion.

    Bracket ``s`` (``0 <= s < brackets``) has rungs at
    ``grace_period * reduction_factor**(k + s) < max_t`` (k = 0, 1, ...), or
    at the ``rung_levels`` you give. When a trial's ``time_attr`` first
    reaches a rung milestone, its score is compared with the scores recorded
    at that rung so far (by *other* trials, as Ray does): it continues only
    if it is within the top ``1/reduction_factor`` of them, i.e. not worse
    than their ``1/reduction_factor`` quantile (linear interpolation, as
    numpy); the first trial at a rung always continues. Then its score is
    recorded there. A trial whose ``time_attr`` jumps past several milestones
    is judged at the highest one only. With ``stop_last_trials`` a trial
    reaching ``max_t`` is stopped.

    **Several objectives (MO-ASHA, Schmucker et al. 2021).** With
    ``metric=["loss", "latency"]`` and ``mode=["min", "min"]`` (or the lists
    in ``TuneConfig``) the trials recorded at a rung, the new one included,
    are ranked by non-dominated sorting (the Pareto front first, then the
    front of what remains, ...); within a front ``mo_tiebreak`` orders them:
    ``"crowding"`` (NSGA-II's crowding distance: the more isolated first, the
    extremes of each objective before all) or ``"epsnet"`` (the epsilon-net of
    Schmucker et al.: the best in the first objective, then repeatedly the
    one farthest from those already chosen, objectives scaled to [0, 1]);
    remaining ties go to the earlier arrival. The trial continues when it is
    among the best ``max(1, floor(n / reduction_factor))`` of the ``n``.

    **Cost-aware promotion.** With ``cost_attr`` (e.g. ``"time_total_s"``)
    the rung's trials are ranked by score and a trial continues when the
    cumulative cost of the trials ranked up to and including it (their
    ``cost_attr`` when they reached the rung) is at most ``1/reduction_factor``
    of the rung's total: cheap good trials go on, expensive ones need to be
    better (equal costs: the top ``1/η`` by count). The best always continues.

    Bracket assignment (``brackets > 1``) follows Ray: bracket ``i`` is drawn
    with probability proportional to ``exp(n_rungs_i - max_j n_rungs_j)``,
    using the scheduler's own ``random.Random(seed)``.

    Non-finite or missing metrics count as the worst value: they are recorded
    as ``+inf`` (never moving a cut-off to infinity while a finite value sits
    at the quantile) and such a trial only passes a rung it reaches first.
    A result without ``time_attr`` is ignored (CONTINUE).

    Args:
        time_attr: Result key measuring progress (monotonically increasing).
        metric: Metric to optimise, or a list of metrics (MO-ASHA); or from
            ``TuneConfig`` via ``set_objective``.
        mode: "min" or "max", or one per metric.
        max_t: Trials are stopped at this ``time_attr`` (with ``stop_last_trials``).
        grace_period: First rung: no trial is stopped before this.
        reduction_factor: η; keeps the top ``1/η`` at each rung (``>= 2``).
        brackets: Number of brackets (``>= 1``).
        stop_last_trials: Stop trials reaching ``max_t``; if False they run
            until the tuner's own stop criteria.
        seed: Seed of the bracket-assignment RNG.
        rung_levels: Your own rung milestones (strictly increasing, ``> 0``
            and ``< max_t``) instead of ``grace_period * η**k``; one bracket.
        mo_tiebreak: ``"crowding"`` or ``"epsnet"`` (several objectives only).
        cost_attr: Result key of the cumulative cost (e.g. ``"time_total_s"``)
            for cost-aware promotion; None: promotion by count.

    Example:
        >>> s = ASHAScheduler(metric="loss", mode="min", max_t=9, grace_period=1,
        ...                   reduction_factor=3)
        >>> s.rung_milestones()
        [1, 3]
        >>> ASHAScheduler(metric=["loss", "ms"], mode=["min", "min"], max_t=20,
        ...               rung_levels=[2, 5, 10]).rung_milestones()
        [2, 5, 10]
    """

    name = "asha"

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
        seed: int | None = None,
        rung_levels: Sequence[float] | None = None,
        mo_tiebreak: str = "crowding",
        cost_attr: str | None = None,
    ) -> None:
        super().__init__(metric, mode)
        require_argument(isinstance(time_attr, str) and bool(time_attr), "time_attr", time_attr,
                         "time_attr is a non-empty str")
        require_argument(is_number(max_t) and max_t > 0, "max_t", max_t, "max_t > 0")
        require_argument(is_number(grace_period) and grace_period > 0, "grace_period",
                         grace_period, "grace_period > 0")
        require_argument(grace_period <= max_t, "grace_period", grace_period,
                         f"grace_period <= max_t (= {max_t!r})")
        require_argument(is_number(reduction_factor) and reduction_factor >= 2,
                         "reduction_factor", reduction_factor, "reduction_factor >= 2")
        require_argument(isinstance(brackets, int) and not isinstance(brackets, bool)
                         and brackets >= 1, "brackets", brackets, "brackets >= 1")
        require_argument(mo_tiebreak in TIEBREAKS, "mo_tiebreak", mo_tiebreak,
                         f"mo_tiebreak in {list(TIEBREAKS)}")
        require_argument(cost_attr is None or (isinstance(cost_attr, str) and bool(cost_attr)), "cost_attr",
                         cost_attr, "cost_attr is None or a non-empty str")
        if rung_levels is not None:
            levels = list(rung_levels) if isinstance(rung_levels, (list, tuple)) else None
            require_argument(levels is not None and bool(levels) and all(is_number(v) for v in levels),
                             "rung_levels", rung_levels, "rung_levels is a non-empty list of numbers")
            assert levels is not None
            require_argument(all(b > a for a, b in zip(levels, levels[1:])) and levels[0] > 0,
                             "rung_levels", rung_levels, "rung_levels is strictly increasing and > 0")
            require_argument(levels[-1] < max_t, "rung_levels", rung_levels,
                             f"rung_levels[-1] < max_t (= {max_t!r})")
            require_argument(brackets == 1, "brackets", brackets, "brackets == 1 when rung_levels is given")
        self.time_attr = time_attr
        self.max_t = max_t
        self.grace_period = grace_period if rung_levels is None else list(rung_levels)[0]
        self.reduction_factor = reduction_factor
        self.brackets = brackets
        self.stop_last_trials = bool(stop_last_trials)
        self.seed = seed
        self.rung_levels = None if rung_levels is None else list(rung_levels)
        self.mo_tiebreak = mo_tiebreak
        self.cost_attr = cost_attr
        self._rng = random.Random(seed)
        if self.rung_levels is not None:
            self._brackets = [_Bracket(list(self.rung_levels), reduction_factor)]
        else:
            self._brackets = [_Bracket(self._milestones(s), reduction_factor) for s in range(brackets)]
        self._bracket_of: dict[str, int] = {}
        self._stopped: set[str] = set()

    def supports_multi_objective(self) -> bool:
        return True

    def _milestones(self, s: int) -> list[float]:
        milestones: list[float] = []
        milestone = self.grace_period * self.reduction_factor**s
        while milestone < self.max_t:
            milestones.append(milestone)
            milestone *= self.reduction_factor
        return milestones

    def rung_milestones(self, bracket: int = 0) -> list[float]:
        """The ``time_attr`` values of bracket ``bracket``'s rungs, lowest first."""
        return list(self._brackets[bracket].milestones)

    def bracket_of(self, trial_id: str) -> int:
        """The bracket index the trial was assigned to."""
        return self._bracket_of[trial_id]

    def recorded(self, rung: int, bracket: int = 0) -> dict[str, Any]:
        """Scores (lower is better; a tuple per trial with several objectives) recorded at a rung, by trial id."""
        return dict(self._brackets[bracket].recorded[rung])

    def describe(self) -> dict[str, Any]:
        info = {
            **super().describe(),
            "time_attr": self.time_attr,
            "max_t": self.max_t,
            "grace_period": self.grace_period,
            "reduction_factor": self.reduction_factor,
            "brackets": self.brackets,
            "stop_last_trials": self.stop_last_trials,
            "seed": self.seed,
        }
        if self.rung_levels is not None:
            info["rung_levels"] = list(self.rung_levels)
        if self.multi_objective:
            info["mo_tiebreak"] = self.mo_tiebreak
        if self.cost_attr is not None:
            info["cost_attr"] = self.cost_attr
        return info

    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, config)
        if trial_id in self._bracket_of:
            return
        if len(self._brackets) == 1:
            self._bracket_of[trial_id] = 0
            return
        sizes = [len(b.milestones) for b in self._brackets]
        weights = [math.exp(size - max(sizes)) for size in sizes]
        self._bracket_of[trial_id] = self._rng.choices(range(len(sizes)), weights=weights)[0]

    # -- deciding -----------------------------------------------------
    def _value(self, result: Mapping[str, Any]) -> Any:
        """The score recorded at a rung: a float, or a tuple with several objectives."""
        return self._scores(result) if self.multi_objective else self._score(result)

    def _rank(self) -> Callable[[list[Any]], list[int]] | None:
        if not self.multi_objective:
            return None
        tiebreak = self.mo_tiebreak
        return lambda values: mo_rank(values, tiebreak)

    def _judge(self, trial_id: str, result: Mapping[str, Any], time: float,
               level: int) -> tuple[Decision, str]:
        """Record the trial at rung ``level`` and decide; returns the decision and a stop reason."""
        bracket = self._brackets[self._bracket_of[trial_id]]
        value = self._value(result)
        cost = finite_number(result.get(self.cost_attr)) if self.cost_attr is not None else None
        decision, cutoff, detail = bracket.judge(level, trial_id, value, cost, self._rank(),
                                                 self.cost_attr is not None,
                                                 dominates if self.multi_objective else None)
        if decision is not Decision.STOP:
            return decision, ""
        milestone = bracket.milestones[level]
        label = "MO-ASHA" if self.multi_objective else "ASHA"
        if detail:
            return decision, (f"stopped by {label} at rung {level} (t={milestone:g}): "
                              f"{display(value, self.mode)} {detail}")
        return decision, (
            f"stopped by {label} at rung {level} (t={milestone:g}): {display(value, self.mode)} "
            f"not in top 1/{self.reduction_factor:g} (cut-off "
            f"{display(math.inf if cutoff is None else cutoff, self.mode)})")

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._require_known(trial_id)
        if trial_id in self._stopped:
            return Decision.STOP
        time = result_time(result, self.time_attr)
        if time is None:
            return Decision.CONTINUE
        if self.stop_last_trials and time >= self.max_t:
            self._stopped.add(trial_id)
            return self._record_stop(
                trial_id, f"stopped by ASHA: reached max_t={self.max_t:g} ({self.time_attr}={time:g})"
            )
        level = self._brackets[self._bracket_of[trial_id]].level_for(trial_id, time)
        if level < 0:
            return Decision.CONTINUE
        decision, reason = self._judge(trial_id, result, time, level)
        if decision is Decision.STOP:
            self._stopped.add(trial_id)
            return self._record_stop(trial_id, reason)
        return decision


#: Ray Tune's other name for :class:`ASHAScheduler`.
AsyncHyperBandScheduler = ASHAScheduler
