"""ASHA: rungs, the top-1/η rule, brackets, stop reasons, validation."""

from __future__ import annotations

import math

import pytest

from schedulers import ASHAScheduler, AsyncHyperBandScheduler, Decision
from schedulers.testing import simulate


def _asha(**kwargs):
    kwargs.setdefault("metric", "loss")
    kwargs.setdefault("mode", "min")
    scheduler = ASHAScheduler(**kwargs)
    scheduler.set_objective(None, None)
    return scheduler


def _report(scheduler, trial_id, t, loss):
    return scheduler.on_trial_result(trial_id, {"loss": loss, "training_iteration": t})


def test_alias_and_ray_defaults():
    assert AsyncHyperBandScheduler is ASHAScheduler
    s = ASHAScheduler()
    assert (s.time_attr, s.max_t, s.grace_period, s.reduction_factor, s.brackets,
            s.stop_last_trials) == ("training_iteration", 100, 1, 4, 1, True)
    assert s.rung_milestones() == [1, 4, 16, 64]


def test_rungs_per_bracket_are_offset_by_eta_power():
    s = ASHAScheduler(max_t=81, grace_period=1, reduction_factor=3, brackets=3)
    assert [s.rung_milestones(b) for b in range(3)] == [[1, 3, 9, 27], [3, 9, 27], [9, 27]]
    assert ASHAScheduler(max_t=10, grace_period=2, reduction_factor=2).rung_milestones() == [2, 4, 8]


def test_top_one_over_eta_rule_by_hand():
    s = _asha(max_t=27, grace_period=1, reduction_factor=3)
    for t in ("a", "b", "c", "d"):
        s.on_trial_add(t, {})
    # rung 0 (t=1): a is first -> continue; b=2 vs quantile([1], 1/3)=1 -> stop;
    # c=0.5 vs quantile([1, 2], 1/3)=1.333 -> continue;
    # d=1.2 vs quantile([0.5, 1, 2], 1/3)=0.5+2/3*0.5=0.8333 -> stop.
    assert _report(s, "a", 1, 1.0) is Decision.CONTINUE
    assert _report(s, "b", 1, 2.0) is Decision.STOP
    assert _report(s, "c", 1, 0.5) is Decision.CONTINUE
    assert _report(s, "d", 1, 1.2) is Decision.STOP
    assert s.recorded(0) == {"a": 1.0, "b": 2.0, "c": 0.5, "d": 1.2}
    # Between rungs nothing is judged, even a terrible value.
    assert _report(s, "a", 2, 99.0) is Decision.CONTINUE
    # rung 1 (t=3): a first -> continue; c compared with [0.9].
    assert _report(s, "a", 3, 0.9) is Decision.CONTINUE
    assert _report(s, "c", 3, 0.95) is Decision.STOP
    assert s.stop_reason("c") == (
        "stopped by ASHA at rung 1 (t=3): 0.95 not in top 1/3 (cut-off 0.9)")
    assert s.stop_reason("a") is None
    # max_t stops with stop_last_trials.
    assert _report(s, "a", 27, 0.1) is Decision.STOP
    assert "reached max_t=27" in s.stop_reason("a")


def test_mode_max_and_jumping_time_is_judged_at_highest_rung():
    s = ASHAScheduler(metric="acc", mode="max", max_t=100, grace_period=1, reduction_factor=4)
    s.set_objective(None, None)
    for t in ("a", "b"):
        s.on_trial_add(t, {})
    assert s.on_trial_result("a", {"acc": 0.9, "training_iteration": 20}) is Decision.CONTINUE
    assert s.recorded(2) == {"a": -0.9} and s.recorded(0) == {}
    assert s.on_trial_result("b", {"acc": 0.5, "training_iteration": 16}) is Decision.STOP
    assert "0.5 not in top 1/4 (cut-off 0.9)" in s.stop_reason("b")


def test_stop_last_trials_false_keeps_running():
    s = _asha(max_t=9, reduction_factor=3, stop_last_trials=False)
    s.on_trial_add("a", {})
    assert _report(s, "a", 9, 1.0) is Decision.CONTINUE
    assert _report(s, "a", 50, 1.0) is Decision.CONTINUE


def test_non_finite_never_poisons_the_cutoff():
    s = _asha(max_t=27, reduction_factor=2)
    for t in "abcde":
        s.on_trial_add(t, {})
    assert _report(s, "a", 1, math.nan) is Decision.CONTINUE  # first at the rung
    assert s.recorded(0) == {"a": math.inf}
    # b vs quantile([inf]) = inf: better than a diverged trial, continues.
    assert _report(s, "b", 1, 1.0) is Decision.CONTINUE
    # quantile([1.0, inf], 1/2) would interpolate to inf: the finite neighbour 1.0 is used.
    assert _report(s, "c", 1, 5.0) is Decision.STOP
    # quantile([1, 5, inf], 1/2) = 5.
    assert _report(s, "d", 1, 0.5) is Decision.CONTINUE
    assert _report(s, "e", 1, -math.inf) is Decision.STOP  # -inf loss is not a great loss


def test_missing_time_attr_is_ignored_and_missing_metric_is_worst():
    s = _asha(max_t=27, reduction_factor=3)
    for t in "ab":
        s.on_trial_add(t, {})
    assert s.on_trial_result("a", {"loss": 1.0}) is Decision.CONTINUE
    assert _report(s, "a", 1, 1.0) is Decision.CONTINUE
    assert s.on_trial_result("b", {"training_iteration": 1}) is Decision.STOP


def test_bracket_assignment_is_seeded_and_follows_ray_weights():
    def assignment(seed):
        s = ASHAScheduler(max_t=81, reduction_factor=3, brackets=3, seed=seed)
        for i in range(300):
            s.on_trial_add(f"t{i}", {})
        return [s.bracket_of(f"t{i}") for i in range(300)]

    first = assignment(1)
    assert first == assignment(1)
    assert first != assignment(2)
    # weights e^(4-4), e^(3-4), e^(2-4): about 66%, 24%, 9%.
    share = first.count(0) / 300
    assert 0.55 < share < 0.77
    assert first.count(1) > first.count(2) > 0


def test_asha_saves_iterations_in_simulation():
    # t0 is best at every step and runs first: every other trial is below the
    # cut-off at rung 0 (t=1) and stops after one iteration.
    curves = {f"t{i}": (lambda k: lambda step: 0.1 * k + 1.0 / step)(i) for i in range(9)}
    run = simulate(ASHAScheduler(max_t=27, reduction_factor=3), curves, max_concurrent=1,
                   max_t=27)
    assert run.iterations == {"t0": 27, **{f"t{i}": 1 for i in range(1, 9)}}
    assert run.best_trial == "t0" and math.isclose(run.best_value, 1 / 27)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reduction_factor": 1},
         "The value of `reduction_factor` is 1, but must be `reduction_factor >= 2`."),
        ({"max_t": 0}, "The value of `max_t` is 0, but must be `max_t > 0`."),
        ({"grace_period": 0}, "The value of `grace_period` is 0, but must be `grace_period > 0`."),
        ({"grace_period": 200}, "The value of `grace_period` is 200, but must be "
                                "`grace_period <= max_t (= 100)`."),
        ({"brackets": 0}, "The value of `brackets` is 0, but must be `brackets >= 1`."),
        ({"mode": "best"}, "The value of `mode` is 'best', but must be 'min' or 'max'."),
    ],
)
def test_validation_messages(kwargs, message):
    with pytest.raises(ValueError) as info:
        ASHAScheduler(**kwargs)
    assert str(info.value) == message


def test_describe_and_objective_conflicts():
    s = ASHAScheduler(metric="loss", mode="min", seed=3)
    assert s.describe()["scheduler"] == "asha"
    assert s.describe()["reduction_factor"] == 4
    with pytest.raises(ValueError, match="metric"):
        s.set_objective("acc", "max")
