"""PBT: exploit only from the top quantile, documented explore, lineage, validation, toy problem."""

from __future__ import annotations

import importlib.util
import os
import random

import pytest

from schedulers import Decision, Launch, PopulationBasedTraining
from schedulers._pbt import explore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Domain:
    """Stands in for a tuneplat search domain: anything with .sample(rng)."""

    def __init__(self, value):
        self.value = value

    def sample(self, rng):
        assert isinstance(rng, random.Random)
        return self.value


def _pbt(**kwargs):
    kwargs.setdefault("hyperparam_mutations", {"lr": [0.1, 0.01, 0.001]})
    kwargs.setdefault("perturbation_interval", 2)
    s = PopulationBasedTraining(time_attr="training_iteration", metric="loss", mode="min", **kwargs)
    s.set_objective(None, None)
    return s


def _report(s, trial_id, t, loss):
    return s.on_trial_result(trial_id, {"loss": loss, "training_iteration": t})


def test_ray_defaults():
    s = PopulationBasedTraining(hyperparam_mutations={"lr": [1, 2]})
    assert (s.time_attr, s.perturbation_interval, s.burn_in_period, s.quantile_fraction,
            s.resample_probability, s.perturbation_factors, s.synch) == (
        "time_total_s", 60.0, 0.0, 0.25, 0.25, (1.2, 0.8), False)  # Ray's: 60 s of training time


@pytest.mark.parametrize("seed", range(20))
def test_exploits_only_from_top_quantile(seed):
    s = _pbt(seed=seed)
    ids = [f"t{i}" for i in range(8)]
    for i, t in enumerate(ids):
        s.on_trial_add(t, {"lr": [0.1, 0.01, 0.001][i % 3], "id": i})
    # Step 1: no check (interval 2). Step 2: losses 0..7 -> top {t0, t1}, bottom {t6, t7}.
    for i, t in enumerate(ids):
        assert _report(s, t, 1, float(i)) is Decision.CONTINUE
    assert s.quantiles() == (["t6", "t7"], ["t0", "t1"])
    decisions = {t: _report(s, t, 2, float(i)) for i, t in enumerate(ids)}
    assert {t for t, d in decisions.items() if d is Decision.PAUSE} == {"t6", "t7"}
    actions = s.pop_actions()
    assert [a.trial_id for a in actions] == ["t6", "t7"]
    for action in actions:
        assert isinstance(action, Launch)
        assert action.from_trial in {"t0", "t1"}
        source_id = int(action.from_trial[1:])
        assert action.config["id"] == source_id  # a copy of the source's config...
        assert action.config["lr"] in (0.1, 0.01, 0.001)  # ...explored within the list
        assert action.info["from_trial"] == action.from_trial and action.info["step"] == 2
        assert action.info["old_config"]["id"] == int(action.trial_id[1:])
        assert s.lineage(action.trial_id) == [dict(action.info)]
        assert s.config(action.trial_id) == dict(action.config)


def test_interval_and_burn_in():
    s = _pbt(perturbation_interval=3, burn_in_period=5, seed=0)
    for t in "ab":
        s.on_trial_add(t, {"lr": 0.1})
    for step in range(1, 5):  # burn-in: never exploit
        _report(s, "a", step, 0.0)
        assert _report(s, "b", step, 9.0) is Decision.CONTINUE
    _report(s, "a", 5, 0.0)
    assert _report(s, "b", 5, 9.0) is Decision.PAUSE
    assert len(s.pop_actions()) == 1
    # b took over a's clock (step 5): next check a full interval later.
    assert _report(s, "b", 6, 9.0) is Decision.CONTINUE
    assert _report(s, "b", 7, 9.0) is Decision.CONTINUE


def test_explore_lists_move_to_a_neighbour_or_resample():
    values = [1, 2, 3, 4]
    rng = random.Random(0)
    seen = {explore({"x": 3}, {"x": values}, rng, 0.0, (1.2, 0.8))["x"] for _ in range(50)}
    assert seen == {2, 4}
    assert {explore({"x": 4}, {"x": values}, rng, 0.0, (1.2, 0.8))["x"] for _ in range(50)} == {3, 4}
    assert explore({"x": 9}, {"x": values}, rng, 0.0, (1.2, 0.8))["x"] in values  # not in list
    assert {explore({"x": 1}, {"x": values}, rng, 1.0, (1.2, 0.8))["x"]
            for _ in range(100)} == set(values)


def test_explore_numbers_domains_and_callables():
    rng = random.Random(1)
    seen = {explore({"lr": 1.0}, {"lr": Domain(7.0)}, rng, 0.0, (1.2, 0.8))["lr"]
            for _ in range(50)}
    assert seen == {1.2, 0.8}
    assert explore({"lr": 1.0}, {"lr": Domain(7.0)}, rng, 1.0, (1.2, 0.8))["lr"] == 7.0
    assert explore({"lr": 1.0}, {"lr": lambda: 5.0}, rng, 1.0, (1.2, 0.8))["lr"] == 5.0
    assert explore({"lr": "adam"}, {"lr": lambda: 5.0}, rng, 0.0, (1.2, 0.8))["lr"] == 5.0
    assert {explore({"n": 10}, {"n": Domain(1)}, rng, 0.0, (1.2, 0.8))["n"]
            for _ in range(50)} == {12, 8}
    nested = explore({"opt": {"lr": 1.0, "keep": 3}}, {"opt": {"lr": [0.5, 1.0, 2.0]}}, rng,
                     0.0, (2,))
    assert nested["opt"]["keep"] == 3 and nested["opt"]["lr"] in (0.5, 2.0)


def test_custom_explore_fn_and_determinism():
    def run(seed):
        s = _pbt(seed=seed, hyperparam_mutations={"lr": Domain(0.5)},
                 custom_explore_fn=lambda c: {**c, "tag": "x"})
        for t in "abcd":
            s.on_trial_add(t, {"lr": 1.0})
        for step in (1, 2, 3, 4):
            for i, t in enumerate("abcd"):
                _report(s, t, step, float(i))
        return s.pop_actions()

    actions = run(3)
    assert actions and all(a.config["tag"] == "x" for a in actions)
    assert actions == run(3)


def test_non_finite_trials_are_exploited_first():
    s = _pbt(seed=0)
    for t in "abcd":
        s.on_trial_add(t, {"lr": 0.1})
    for step in (1, 2):
        _report(s, "a", step, 1.0)
        _report(s, "b", step, 2.0)
        _report(s, "c", step, 3.0)
        if step == 1:
            assert s.quantiles() == (["c"], ["a"])  # d has not reported yet
        decision = s.on_trial_result("d", {"loss": float("nan"), "training_iteration": step})
        if step == 1:
            assert s.quantiles() == (["d"], ["a"])
    assert decision is Decision.PAUSE
    assert [(a.trial_id, a.from_trial) for a in s.pop_actions()] == [("d", "a")]


def test_require_attrs():
    s = _pbt()
    s.on_trial_add("a", {})
    with pytest.raises(ValueError, match="training_iteration"):
        s.on_trial_result("a", {"loss": 1.0})
    s = _pbt(require_attrs=False)
    s.on_trial_add("a", {})
    assert s.on_trial_result("a", {"loss": 1.0}) is Decision.CONTINUE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hyperparam_mutations": None},
         "The value of `hyperparam_mutations` is None, but must be `a non-empty dict when "
         "custom_explore_fn is None`."),
        ({"hyperparam_mutations": {}},
         "The value of `hyperparam_mutations` is {}, but must be `a non-empty dict when "
         "custom_explore_fn is None`."),
        ({"quantile_fraction": 0.6},
         "The value of `quantile_fraction` is 0.6, but must be `0 < quantile_fraction <= 0.5`."),
        ({"quantile_fraction": 0},
         "The value of `quantile_fraction` is 0, but must be `0 < quantile_fraction <= 0.5`."),
        ({"perturbation_interval": 0},
         "The value of `perturbation_interval` is 0, but must be `perturbation_interval > 0`."),
        ({"resample_probability": 1.5},
         "The value of `resample_probability` is 1.5, but must be "
         "`0 <= resample_probability <= 1`."),
        ({"hyperparam_mutations": {"lr": 3}},
         "The value of `hyperparam_mutations['lr']` is 3, but must be "
         "`hyperparam_mutations['lr'] is a list, a callable, an object with .sample(rng) or a "
         "dict of those`."),
        ({"hyperparam_mutations": {"lr": []}},
         "The value of `hyperparam_mutations['lr']` is [], but must be "
         "`hyperparam_mutations['lr'] is a non-empty list`."),
    ],
)
def test_validation_messages(kwargs, message):
    kwargs.setdefault("hyperparam_mutations", {"lr": [1, 2]})
    with pytest.raises(ValueError) as info:
        PopulationBasedTraining(**kwargs)
    assert str(info.value) == message


def test_jaderberg_toy_problem_pbt_beats_grid():
    spec = importlib.util.spec_from_file_location(
        "schedulers_sim_bench", os.path.join(ROOT, "benchmarks", "schedulers_sim.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    grid = bench.run_grid()
    assert grid["best_Q"] < bench.TARGET_Q
    for seed in (0, 1, 2):
        result = bench.run_pbt(seed)
        assert result["best_Q"] >= bench.TARGET_Q, result
        assert result["exploits"] > 0
