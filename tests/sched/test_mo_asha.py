"""MO-ASHA (ASHA with several objectives), non-dominated sorting, cost-aware promotion and chosen rungs."""

from __future__ import annotations

import math

import pytest

from schedulers import (
    ASHAScheduler,
    Decision,
    HyperBandScheduler,
    MedianStoppingRule,
    crowding_distance,
    eps_net_order,
    mo_rank,
    nondominated_fronts,
)
from schedulers.testing import simulate


def _mo(**kwargs):
    kwargs.setdefault("metric", ["loss", "ms"])
    kwargs.setdefault("mode", ["min", "min"])
    scheduler = ASHAScheduler(**kwargs)
    scheduler.set_objective(None, None)
    return scheduler


def _report(scheduler, trial_id, t, loss, ms, **extra):
    return scheduler.on_trial_result(trial_id, {"loss": loss, "ms": ms, "training_iteration": t, **extra})


def test_fronts_crowding_and_epsnet_by_hand():
    points = [(3, 3), (1, 5), (2, 2), (5, 1), (4, 4), (math.inf, 0.5)]
    assert nondominated_fronts(points) == [[1, 2, 3, 5], [0], [4]]
    distance = crowding_distance(points, [1, 2, 3, 5])
    assert distance[5] == 0.0  # a non-finite objective is never preferred for its spread
    assert math.isinf(distance[1]) and math.isinf(distance[3]) and distance[2] == pytest.approx(2.0)
    assert eps_net_order(points, [1, 2, 3]) == [1, 3, 2]  # best first objective, then the farthest
    assert mo_rank(points) == [1, 3, 2, 5, 0, 4]
    assert mo_rank(points, "epsnet") == [1, 3, 2, 5, 0, 4]
    with pytest.raises(ValueError, match="The value of `tiebreak` is 'nope'"):
        mo_rank(points, "nope")


def test_mo_asha_promotes_by_non_dominated_rank():
    s = _mo(max_t=27, grace_period=1, reduction_factor=3)
    for t in "abcefg":
        s.on_trial_add(t, {})
    assert _report(s, "a", 1, 1.0, 10.0) is Decision.CONTINUE  # first at the rung
    assert _report(s, "b", 1, 2.0, 20.0) is Decision.STOP  # dominated by a; keep max(1, 2 // 3) = 1
    # c is on the front with a (both extremes: equal crowding, the earlier arrival first); keep 1 of 3
    assert _report(s, "c", 1, 0.5, 30.0) is Decision.STOP
    assert s.recorded(0)["c"] == (0.5, 30.0)
    assert s.stop_reason("c") == "stopped by MO-ASHA at rung 0 (t=1): (0.5, 30) ranked 2 of 3, keeping 1"
    # e dominates everything: first of 4
    assert _report(s, "e", 1, 0.1, 1.0) is Decision.CONTINUE
    # f is on the front with e, but 5 recorded keep 1 and e arrived first
    assert _report(s, "f", 1, 0.05, 50.0) is Decision.STOP
    assert s.stop_reason("f").endswith("ranked 2 of 5, keeping 1")
    # 6 recorded, keep 2: front {e, f, g}; e and g are the extremes (infinite crowding), f is between
    assert _report(s, "g", 1, 0.01, 60.0) is Decision.CONTINUE
    assert s.describe()["mo_tiebreak"] == "crowding"


def test_mo_asha_with_max_modes_and_non_finite_values():
    s = _mo(mode=["max", "min"], max_t=9, reduction_factor=3)
    for t in "abc":
        s.on_trial_add(t, {})
    assert _report(s, "a", 1, 0.9, 5.0) is Decision.CONTINUE
    assert s.recorded(0)["a"] == (-0.9, 5.0)
    assert _report(s, "b", 1, math.nan, 1.0) is Decision.STOP  # NaN accuracy is the worst accuracy
    assert _report(s, "c", 1, 0.95, 4.0) is Decision.CONTINUE  # dominates a


def test_mo_objective_validation_messages():
    with pytest.raises(ValueError, match=r"The value of `mode` is \['min'\], but must be a list"):
        ASHAScheduler(metric=["a", "b"], mode=["min"])
    with pytest.raises(ValueError, match=r"The value of `mode\[1\]` is 'up'"):
        ASHAScheduler(metric=["a", "b"], mode=["min", "up"])
    with pytest.raises(ValueError, match="name each metric once"):
        ASHAScheduler(metric=["a", "a"], mode=["min", "min"])
    with pytest.raises(ValueError, match="MedianStoppingRule decides on one metric"):
        MedianStoppingRule(metric=["a", "b"], mode=["min", "min"])
    with pytest.raises(ValueError, match="The value of `mo_tiebreak` is 'random'"):
        ASHAScheduler(mo_tiebreak="random")
    s = ASHAScheduler()
    s.set_objective(["a", "b"], ["min", "max"])  # from TuneConfig(metric=[...], mode=[...])
    assert s.multi_objective and s.metric == ["a", "b"]
    with pytest.raises(ValueError, match=r"The value of `mode` is .min., but must be a list"):
        ASHAScheduler(metric=["a", "b"]).set_objective(None, "min")


def test_mo_asha_keeps_the_pareto_front_of_a_two_objective_simulation():
    """Trade-off curves: the front (low loss, high ms ... high loss, low ms) survives; dominated trials stop."""
    def point(loss, ms):
        return lambda step: {"loss": loss + 1.0 / step, "ms": ms}

    curves = {}
    for i in range(10):  # each dominated trial arrives just after the front trial that dominates it
        if i < 5:
            curves[f"front{i}"] = point(0.1 * i, 10.0 - i)
        curves[f"bad{i}"] = point(0.1 * (i % 5) + 0.3, 10.0 - i % 5 + 1.0)
    run = simulate(_mo(max_t=27, reduction_factor=3), curves, max_concurrent=3, max_t=27,
                   metric=["loss", "ms"], mode=["min", "min"])
    finished = {t for t, step in run.steps.items() if step == 27}
    assert finished and all(t.startswith("front") for t in finished), run.steps
    assert max(run.steps[f"bad{i}"] for i in range(10)) < 9  # no dominated trial reached the third rung


def test_cost_aware_promotion_prefers_cheap_good_trials():
    s = ASHAScheduler(metric="loss", mode="min", max_t=27, reduction_factor=2, cost_attr="time_total_s")
    s.set_objective(None, None)
    for t in "abcd":
        s.on_trial_add(t, {})

    def report(t, loss, cost):
        return s.on_trial_result(t, {"loss": loss, "training_iteration": 1, "time_total_s": cost})

    assert report("a", 0.5, 100.0) is Decision.CONTINUE  # first
    assert report("b", 0.4, 10.0) is Decision.CONTINUE  # best: always
    # c is second best; cost of a better-or-equal prefix: 10 + 5 = 15 <= 115 / 2
    assert report("c", 0.45, 5.0) is Decision.CONTINUE
    # d ranks third: 10 + 5 + 100 (a is better) = ... d=0.6 is last: 215 > 215 / 2
    assert report("d", 0.6, 100.0) is Decision.STOP
    assert "cumulative cost" in s.stop_reason("d")
    assert s.describe()["cost_attr"] == "time_total_s"


def test_chosen_rungs_and_their_validation():
    s = ASHAScheduler(metric="loss", mode="min", max_t=100, rung_levels=[3, 10, 30])
    assert s.rung_milestones() == [3, 10, 30] and s.grace_period == 3
    assert s.describe()["rung_levels"] == [3, 10, 30]
    with pytest.raises(ValueError, match=r"The value of `rung_levels` is \[3, 2\], but must be `rung_levels is "
                                         r"strictly increasing and > 0`"):
        ASHAScheduler(rung_levels=[3, 2])
    with pytest.raises(ValueError, match=r"rung_levels\[-1\] < max_t"):
        ASHAScheduler(max_t=10, rung_levels=[3, 10])
    with pytest.raises(ValueError, match="brackets == 1 when rung_levels"):
        ASHAScheduler(rung_levels=[3, 9], brackets=2)
    with pytest.raises(ValueError, match=r"The value of `reduction_factor` is 1, but must be `reduction_factor >= 2`"):
        ASHAScheduler(reduction_factor=1)


def test_multi_objective_hyperband_ranks_a_round_by_fronts():
    s = HyperBandScheduler(metric=["loss", "ms"], mode=["min", "min"], max_t=9, reduction_factor=3)
    s.set_objective(None, None)
    ids = [f"t{i}" for i in range(9)]
    for t in ids:
        s.on_trial_add(t, {})
    values = [(1, 9), (2, 8), (3, 7), (4, 9), (5, 9), (6, 9), (7, 9), (8, 9), (9, 9)]
    decisions = [s.on_trial_result(t, {"loss": lo, "ms": ms, "training_iteration": 1}) for t, (lo, ms) in
                 zip(ids, values)]
    assert decisions[:-1] == [Decision.PAUSE] * 8
    resumed = {a.trial_id for a in s.pop_actions() if type(a).__name__ == "Resume"}
    kept = resumed | ({ids[-1]} if decisions[-1] is Decision.CONTINUE else set())
    # 9 trials, keep 3: the front {t0, t1, t2}
    assert kept == {"t0", "t1", "t2"}
