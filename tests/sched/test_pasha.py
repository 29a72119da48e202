"""PASHA: the maximum resource grows only while the ranking at the top rungs is unstable."""

from __future__ import annotations

import pytest

from schedulers import ASHAScheduler, Decision, PASHAScheduler, Resume, Stop
from schedulers.testing import simulate


def _pasha(**kwargs):
    kwargs.setdefault("metric", "loss")
    kwargs.setdefault("mode", "min")
    s = PASHAScheduler(**kwargs)
    s.set_objective(None, None)
    return s


def _report(s, trial_id, t, loss):
    return s.on_trial_result(trial_id, {"loss": loss, "training_iteration": t})


def test_starts_at_the_second_rung_and_grows_when_the_ranking_flips():
    s = _pasha(max_t=27, grace_period=1, reduction_factor=3)
    assert s.rung_milestones() == [1, 3, 9] and s.current_max_t == 3
    for t in "abcd":
        s.on_trial_add(t, {})
    for t, loss in zip("abcd", (0.5, 0.4, 0.3, 0.6)):
        _report(s, t, 1, loss)
    assert _report(s, "a", 3, 0.3) is Decision.PAUSE  # first at the current maximum: waits
    # c is better than a at rung 0 but worse at rung 1 (and stopped by ASHA's rule there): the ranking is
    # unstable -> the maximum grows to 9 and a goes on
    assert _report(s, "c", 3, 0.35) is Decision.STOP
    assert s.current_max_t == 9 and s.growth == [(3.0, 9)]
    assert s.pop_actions() == [Resume("a")]
    # b beats both at rung 1 and reaches 3 below the new maximum: it just continues
    assert _report(s, "b", 3, 0.2) is Decision.CONTINUE
    assert s.describe()["current_max_t"] == 9


def test_a_stable_ranking_keeps_the_maximum_and_stops_paused_trials_at_the_end():
    s = _pasha(max_t=27, grace_period=1, reduction_factor=3)
    for t in "ab":
        s.on_trial_add(t, {})
    _report(s, "a", 1, 0.5)
    _report(s, "b", 1, 0.4)
    assert _report(s, "b", 3, 0.3) is Decision.PAUSE
    s.on_search_finished()
    assert s.pop_actions() == []  # a still runs
    assert _report(s, "a", 3, 0.45) is Decision.STOP  # worse at both rungs: the ranking is stable
    assert s.pop_actions() == []
    s.on_trial_complete("a", None)  # nothing runs any more: b ends at the maximum PASHA settled on
    assert s.pop_actions() == [Stop("b", s.stop_reason("b"))]
    assert "stopped by PASHA at max_t=3" in s.stop_reason("b")


def _curves(n, crossing):
    def curve(i):
        final = 0.1 + 0.05 * i
        if crossing:  # slow starters end best: the ranking at step 1 is the reverse of the one at step 3
            return lambda step: final + (1.0 - 0.1 * (i % 10)) / step
        return lambda step: final + 1.0 / step  # the ranking never changes
    return {f"t{i:02d}": curve(i) for i in range(n)}


@pytest.mark.parametrize("crossing", [False, True])
def test_pasha_spends_less_than_asha_when_the_ranking_is_stable(crossing):
    curves = _curves(27, crossing)
    asha = simulate(ASHAScheduler(max_t=81, grace_period=1, reduction_factor=3), curves, max_concurrent=4,
                    max_t=81, metric="loss", mode="min")
    pasha_s = PASHAScheduler(max_t=81, grace_period=1, reduction_factor=3)
    pasha = simulate(pasha_s, curves, max_concurrent=4, max_t=81, metric="loss", mode="min")
    if not crossing:
        assert pasha.total_iterations < asha.total_iterations / 2
        assert pasha_s.current_max_t == 3  # it never needed more
        assert pasha.best_trial == asha.best_trial == "t00"
    else:
        assert pasha_s.growth  # the crossing curves made it grow


def test_pasha_validation_is_optuna_style():
    with pytest.raises(ValueError, match=r"The value of `epsilon` is -1, but must be `epsilon >= 0 or epsilon == 'auto'`"):
        PASHAScheduler(epsilon=-1)
    with pytest.raises(ValueError, match=r"The value of `reduction_factor` is 1, but must be `reduction_factor >= 2`"):
        PASHAScheduler(reduction_factor=1)
    with pytest.raises(ValueError, match="PASHAScheduler decides on one metric"):
        PASHAScheduler(metric=["a", "b"], mode=["min", "min"])
    with pytest.raises(ValueError, match="epsilon_percentile"):
        PASHAScheduler(epsilon_percentile=101)
