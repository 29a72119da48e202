"""HyperBand: the paper's bracket table, synchronous promotion, search-finished closing."""

from __future__ import annotations

import pytest

from schedulers import Decision, HyperBandScheduler, Resume, Stop
from schedulers.testing import simulate


def test_bracket_table_matches_li_et_al_2017():
    table = HyperBandScheduler(max_t=81, reduction_factor=3).bracket_table()
    assert [(row["s"], row["n"], row["r"]) for row in table] == [
        (4, 81, 1.0), (3, 34, 3.0), (2, 15, 9.0), (1, 8, 27.0), (0, 5, 81.0)]
    assert table[0]["rounds"] == [(81, 1.0), (27, 3.0), (9, 9.0), (3, 27.0), (1, 81.0)]
    assert table[1]["rounds"] == [(34, 3.0), (11, 9.0), (3, 27.0), (1, 81.0)]
    assert table[2]["rounds"] == [(15, 9.0), (5, 27.0), (1, 81.0)]
    assert table[3]["rounds"] == [(8, 27.0), (2, 81.0)]
    assert table[4]["rounds"] == [(5, 81.0)]


def test_ray_defaults():
    s = HyperBandScheduler()
    assert (s.time_attr, s.max_t, s.reduction_factor, s.stop_last_trials) == (
        "training_iteration", 81, 3, True)
    assert s.s_max == 4


def _hb(**kwargs):
    s = HyperBandScheduler(metric="loss", mode="min", **kwargs)
    s.set_objective(None, None)
    return s


def _report(s, trial_id, t, loss):
    return s.on_trial_result(trial_id, {"loss": loss, "training_iteration": t})


def test_synchronous_promotion_by_hand():
    s = _hb(max_t=9)  # brackets: s=2 (n=9, r=1), s=1 (n=5, r=3), s=0 (n=3, r=9)
    ids = [f"t{i}" for i in range(9)]
    for t in ids:
        s.on_trial_add(t, {})
    assert {s.bracket_of(t) for t in ids} == {(0, 2)}
    for i, t in enumerate(ids[:-1]):
        assert _report(s, t, 1, float(i)) is Decision.PAUSE
        assert s.pop_actions() == []
    # The last trial completes round 0 and gets its verdict directly.
    assert _report(s, "t8", 1, 8.0) is Decision.STOP
    actions = s.pop_actions()
    assert [a for a in actions if isinstance(a, Resume)] == [Resume("t0"), Resume("t1"),
                                                              Resume("t2")]
    assert [a.trial_id for a in actions if isinstance(a, Stop)] == [f"t{i}" for i in range(3, 8)]
    assert s.stop_reason("t5") == (
        "stopped by HyperBand (bracket 0, s=2) at rung 0 (t=1): 5 not in top 3 of 9")
    # Round 1 at r=3; between milestones results continue.
    assert _report(s, "t0", 2, 0.5) is Decision.CONTINUE
    assert _report(s, "t0", 3, 0.5) is Decision.PAUSE
    assert _report(s, "t2", 3, 0.1) is Decision.PAUSE
    # t1 completes (its own stop criteria): the round closes without it.
    s.on_trial_complete("t1", {"loss": 1.0, "training_iteration": 3})
    assert s.pop_actions()[0] == Resume("t2")
    assert s.stop_reason("t0").startswith("stopped by HyperBand (bracket 0, s=2) at rung 1 (t=3)")
    assert _report(s, "t2", 9, 0.05) is Decision.STOP  # max_t
    assert _report(s, "t3", 2, 0.0) is Decision.STOP  # stopped is final


def test_next_bracket_and_search_finished_closes_incomplete_brackets():
    s = _hb(max_t=9)
    for i in range(11):
        s.on_trial_add(f"t{i}", {})
    assert s.bracket_of("t9") == (1, 1) and s.bracket_of("t10") == (1, 1)
    # Bracket 1 (s=1: n=5, r=3) holds only 2 trials: it waits until the search finished.
    assert _report(s, "t9", 3, 1.0) is Decision.PAUSE
    assert _report(s, "t10", 3, 2.0) is Decision.PAUSE
    assert s.pop_actions() == []
    s.on_search_finished()
    actions = s.pop_actions()
    assert Resume("t9") in actions and any(isinstance(a, Stop) and a.trial_id == "t10"
                                           for a in actions)


def test_simulated_bracket_iterations():
    curves = {f"t{i}": (lambda k: lambda step: float(k) + 1.0 / step)(i) for i in range(9)}
    run = simulate(HyperBandScheduler(max_t=9), curves, max_concurrent=2, max_t=9)
    assert run.iterations == {"t0": 9, "t1": 3, "t2": 3, **{f"t{i}": 1 for i in range(3, 9)}}
    # Incomplete bracket (4 of 9): closed by on_search_finished, keeps max(1, 4 // 3) = 1.
    run = simulate(HyperBandScheduler(max_t=9), dict(list(curves.items())[:4]),
                   max_concurrent=2, max_t=9)
    assert run.iterations == {"t0": 9, "t1": 1, "t2": 1, "t3": 1}


def test_stop_last_trials_false():
    s = _hb(max_t=3, stop_last_trials=False)  # s_max=1: (n=3, r=1) then (n=2, r=3)
    assert [(row["n"], row["r"]) for row in s.bracket_table()] == [(3, 1.0), (2, 3.0)]
    for t in "abc":
        s.on_trial_add(t, {})
    assert _report(s, "a", 1, 1.0) is Decision.PAUSE
    assert _report(s, "b", 1, 0.5) is Decision.PAUSE
    assert _report(s, "c", 1, 2.0) is Decision.STOP
    assert s.pop_actions() == [Resume("b"), Stop("a", s.stop_reason("a"))]
    assert _report(s, "b", 3, 0.5) is Decision.CONTINUE
    assert _report(s, "b", 30, 0.5) is Decision.CONTINUE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reduction_factor": 1},
         "The value of `reduction_factor` is 1, but must be `reduction_factor >= 2`."),
        ({"max_t": -1}, "The value of `max_t` is -1, but must be `max_t > 0`."),
        ({"time_attr": ""}, "The value of `time_attr` is '', but must be "
                            "`time_attr is a non-empty str`."),
    ],
)
def test_validation_messages(kwargs, message):
    with pytest.raises(ValueError) as info:
        HyperBandScheduler(**kwargs)
    assert str(info.value) == message
