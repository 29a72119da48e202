"""OptunaSearch, OptunaPrunerScheduler and pareto_front, against the real Optuna."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
import warnings

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from schedulers import Decision, TrialScheduler
from tuneplat.search import (
    OptunaPrunerScheduler,
    OptunaSearch,
    Searcher,
    SearchSpaceError,
    choice,
    grid_search,
    lograndint,
    loguniform,
    pareto_front,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from tuneplat.search.optuna import JOURNAL_FILE, STUDY_NAME, TRIAL_ID_ATTR, convert_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def below(x):
    return math.nextafter(x, -math.inf)


def make(space, metric="loss", mode="min", **kw):
    spec = kw.pop("spec", {})
    s = OptunaSearch(metric=metric, mode=mode, **kw)
    s.set_search_properties(None, None, space, **spec)
    return s


def branin(x1, x2):
    a, b, c, r, s, t = 1, 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return a * (x2 - b * x1**2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


# -- space conversion ---------------------------------------------------------------
@pytest.mark.parametrize(
    "domain, expected",
    [
        (uniform(-1.0, 2.0), FloatDistribution(-1.0, below(2.0))),
        (loguniform(1e-4, 1e-1), FloatDistribution(1e-4, below(1e-1), log=True)),
        (quniform(0.3, 2.05, 0.1), FloatDistribution(0.3, 2.0, step=0.1)),
        (quniform(0, 10, 2.5), FloatDistribution(0.0, 10.0, step=2.5)),
        (qloguniform(1, 100, 5), FloatDistribution(5.0, 100.0, log=True)),
        (randint(1, 5), IntDistribution(1, 4)),
        (lograndint(1, 100), IntDistribution(1, 99, log=True)),
        (qrandint(3, 20, 4), IntDistribution(4, 20, step=4)),
        (qrandint(0, 10), IntDistribution(0, 10)),
        (qlograndint(2, 100, 10), IntDistribution(10, 100, log=True)),
        (choice(["a", 1, 2.5, None, True]), CategoricalDistribution(["a", 1, 2.5, None, True])),
        (choice([[1, 2], {"k": 3}]), CategoricalDistribution([0, 1])),
    ],
)
def test_domain_to_distribution_exact(domain, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna must not adjust our bounds
        assert convert_space({"p": domain}) == {"p": expected}


def test_nested_keys_flattened_and_constants_left_out():
    space = {"opt": {"lr": loguniform(1e-3, 1e-1), "name": "adam"}, "layers": [randint(1, 3), 4], "seed": 7}
    assert convert_space(space) == {
        "opt/lr": FloatDistribution(1e-3, below(1e-1), log=True),
        "layers/0": IntDistribution(1, 2),
    }


def test_optuna_distributions_pass_through():
    d = FloatDistribution(0, 1, step=0.25)
    assert convert_space({"x": d}) == {"x": d}


def test_sampled_configs_respect_bounds_nested_and_constants():
    space = {
        "u": uniform(0, 1), "lu": loguniform(1e-3, 1), "qu": quniform(0.3, 2.0, 0.1), "qlu": qloguniform(1, 100, 5),
        "ri": randint(0, 3), "lri": lograndint(1, 4), "qri": qrandint(3, 20, 4), "qlri": qlograndint(10, 100, 10),
        "ch": choice([[1], [2]]), "nest": {"k": randint(5, 7), "const": {"deep": [1, 2]}}, "top": "c",
    }
    s = make(space, sampler="random", seed=0)
    seen = {"ri": set(), "lri": set(), "qri": set(), "ch": []}
    for i in range(300):
        c = s.suggest(str(i))
        assert 0 <= c["u"] < 1 and 1e-3 <= c["lu"] < 1
        assert 0.3 - 1e-9 <= c["qu"] <= 2.0 + 1e-9 and abs(c["qu"] * 10 - round(c["qu"] * 10)) < 1e-6
        assert 5 <= c["qlu"] <= 100 and c["qlu"] % 5 == 0
        assert c["qlri"] % 10 == 0 and 10 <= c["qlri"] <= 100 and isinstance(c["qlri"], int)
        assert c["nest"]["k"] in (5, 6) and c["nest"]["const"] == {"deep": [1, 2]} and c["top"] == "c"
        for key in ("ri", "lri", "qri"):
            seen[key].add(c[key])
        seen["ch"].append(c["ch"])
        s.on_trial_complete(str(i), {"loss": c["u"]})
    assert seen["ri"] == {0, 1, 2}  # randint upper exclusive
    assert seen["lri"] == {1, 2, 3}
    assert seen["qri"] == {4, 8, 12, 16, 20}  # qrandint upper inclusive
    assert {tuple(v) for v in seen["ch"]} == {(1,), (2,)}  # non-primitive choices mapped back


def test_constants_are_not_shared_between_configs():
    s = make({"x": uniform(0, 1), "opts": {"lst": [1]}}, seed=0)
    a = s.suggest("a")
    a["opts"]["lst"].append(2)
    assert s.suggest("b")["opts"]["lst"] == [1]


# -- errors ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "space, path, advice",
    [
        ({"a": {"b": sample_from(lambda spec: 1)}}, "param_space['a']['b']", "define-by-run"),
        ({"n": randn(0, 1)}, "param_space['n']", "tune.uniform"),
        ({"n": qrandn(0, 1, 0.1)}, "param_space['n']", "tune.uniform"),
        ({"g": grid_search([1, 2])}, "param_space['g']", "tune.choice"),
    ],
)
def test_unsupported_domains_refused_with_key_path(space, path, advice):
    with pytest.raises(ValueError) as info:
        make(space)
    assert path in str(info.value) and advice in str(info.value)


def test_grid_search_allowed_with_grid_sampler():
    sampler = optuna.samplers.GridSampler({"g": [1, 2, 3]}, seed=0)
    s = make({"g": grid_search([1, 2, 3])}, sampler=sampler)
    values = []
    for i in range(3):
        values.append(s.suggest(str(i))["g"])
        s.on_trial_complete(str(i), {"loss": 0.0})
    assert sorted(values) == [1, 2, 3]
    assert s.suggest("3") == Searcher.FINISHED  # grid exhausted


def test_invalid_domain_arguments_raise_search_space_error():
    with pytest.raises(SearchSpaceError, match=r"param_space\['x'\]"):
        make({"x": uniform(1, 0)})


def test_space_twice_is_an_error():
    s = OptunaSearch(space={"x": uniform(0, 1)}, metric="loss", mode="min")
    with pytest.raises(ValueError, match="search space twice"):
        s.set_search_properties(None, None, {"y": uniform(0, 1)})


def test_space_and_constant_param_space_merge():
    s = OptunaSearch(space={"x": uniform(0, 1)}, metric="loss", mode="min", seed=0)
    assert s.set_search_properties(None, None, {"batch": 32, "opt": {"name": "sgd"}})
    c = s.suggest("1")
    assert c["batch"] == 32 and c["opt"] == {"name": "sgd"} and 0 <= c["x"] < 1


def test_metric_and_mode_required_and_checked():
    with pytest.raises(ValueError, match="needs a metric and a mode"):
        OptunaSearch().set_search_properties(None, None, {"x": uniform(0, 1)})
    with pytest.raises(ValueError, match="same length"):
        make({"x": uniform(0, 1)}, metric=["a", "b"], mode=["min"])
    with pytest.raises(ValueError, match="sampler"):
        OptunaSearch(sampler="bogus")


def test_metric_mode_from_tune_config():
    s = OptunaSearch(seed=0)
    s.set_search_properties("acc", "max", {"x": uniform(0, 1)})
    assert s.study.direction == optuna.study.StudyDirection.MAXIMIZE


@pytest.mark.parametrize("name", ["tpe", "random", "qmc", "nsgaii", "gp"])
def test_sampler_names(name):
    pytest.importorskip("scipy")
    if name == "gp":
        pytest.importorskip("torch")
    s = make({"x": uniform(0, 1), "n": randint(0, 4)}, sampler=name, seed=0)
    for i in range(3):
        c = s.suggest(str(i))
        s.on_trial_complete(str(i), {"loss": c["x"]})
    assert len(s.study.trials) == 3


def test_missing_optional_sampler_package_is_a_clear_import_error():
    import importlib.util

    if importlib.util.find_spec("cmaes") is not None:
        s = make({"x": uniform(0, 1)}, sampler="cmaes", seed=0)
        assert isinstance(s.study.sampler, optuna.samplers.CmaEsSampler)
        return
    with pytest.raises(ImportError, match="pip install cmaes"):
        make({"x": uniform(0, 1)}, sampler="cmaes", seed=0)


def test_multi_objective_pruned_and_failed():
    s = make({"x": uniform(0, 1)}, metric=["a", "b"], mode=["min", "min"], seed=0)
    s.suggest("p")
    s.suggest("f")
    s.on_trial_complete("p", {"a": 1.0, "b": 2.0}, pruned=True)
    s.on_trial_complete("f", {"a": 1.0})  # one metric missing
    assert [t.state for t in s.study.trials] == [TrialState.PRUNED, TrialState.FAIL]


# -- define-by-run ------------------------------------------------------------
def conditional_space(trial):
    n_layers = trial.suggest_int("n_layers", 1, 3)
    for i in range(n_layers):
        trial.suggest_int(f"units/{i}", 4, 64, log=True)
    trial.suggest_float("opt/lr", 1e-4, 1e-1, log=True)
    return {"activation": "relu", "depth_label": f"d{n_layers}"}


def test_define_by_run_conditional_space():
    s = OptunaSearch(space=conditional_space, metric="loss", mode="min", sampler="random", seed=0)
    s.set_search_properties(None, None, {"epochs": 3})
    layer_counts = set()
    for i in range(30):
        c = s.suggest(str(i))
        n = c["n_layers"]
        layer_counts.add(n)
        assert sorted(c["units"]) == [str(j) for j in range(n)]
        assert all(4 <= u <= 64 for u in c["units"].values())
        assert 1e-4 <= c["opt"]["lr"] <= 1e-1
        assert c["activation"] == "relu" and c["depth_label"] == f"d{n}" and c["epochs"] == 3
        s.on_trial_complete(str(i), {"loss": float(n)})
    assert layer_counts == {1, 2, 3}
    assert all(t.state == TrialState.COMPLETE for t in s.study.trials)


def test_define_by_run_with_domains_in_param_space_is_error():
    s = OptunaSearch(space=conditional_space, metric="loss", mode="min")
    with pytest.raises(ValueError, match="search space twice"):
        s.set_search_properties(None, None, {"x": uniform(0, 1)})


def test_define_by_run_bad_return_value():
    s = OptunaSearch(space=lambda t: [t.suggest_float("x", 0, 1)], metric="loss", mode="min")
    s.set_search_properties(None, None, None)
    with pytest.raises(TypeError, match="must return a dict"):
        s.suggest("1")
    assert s.study.trials[0].state == TrialState.FAIL


def test_define_by_run_points_to_evaluate():
    s = OptunaSearch(space=conditional_space, metric="loss", mode="min", seed=0,
                     points_to_evaluate=[{"n_layers": 2, "units": {"0": 8, "1": 16}, "opt/lr": 0.01}])
    s.set_search_properties(None, None, None)
    c = s.suggest("1")
    assert c["n_layers"] == 2 and c["units"] == {"0": 8, "1": 16} and c["opt"]["lr"] == 0.01


# -- tell states ------------------------------------------------------------------
def test_tell_states_and_intermediate_reports():
    s = make({"x": uniform(0, 1)}, seed=0)
    for tid in "abcdef":
        s.suggest(tid)
    for step, v in enumerate([3.0, 2.0, 1.5], start=1):
        s.on_trial_result("a", {"loss": v, "training_iteration": step})
    s.on_trial_complete("a", {"loss": 1.5, "training_iteration": 3})
    s.on_trial_result("b", {"loss": 9.0, "training_iteration": 1})
    s.on_trial_complete("b", {"loss": 9.0, "training_iteration": 1}, pruned=True)
    s.on_trial_complete("c", None, error=True)
    s.on_trial_complete("d", {"loss": float("nan")})
    s.on_trial_complete("e", {"other": 1.0})  # metric missing
    s.on_trial_complete("f", {"loss": float("inf")})
    by_tid = {t.user_attrs[TRIAL_ID_ATTR]: t for t in s.study.trials}
    assert by_tid["a"].state == TrialState.COMPLETE and by_tid["a"].value == 1.5
    assert by_tid["a"].intermediate_values == {1: 3.0, 2: 2.0, 3: 1.5}
    assert by_tid["b"].state == TrialState.PRUNED and by_tid["b"].value == 9.0  # Optuna keeps last report
    assert by_tid["c"].state == TrialState.FAIL
    assert by_tid["d"].state == TrialState.FAIL
    assert by_tid["e"].state == TrialState.FAIL
    assert by_tid["f"].state == TrialState.COMPLETE and by_tid["f"].value == math.inf
    s.on_trial_complete("a", {"loss": 0.0})  # unknown/finished ids are ignored
    assert s.study.best_value == 1.5


# -- multi-objective -----------------------------------------------------------
@pytest.mark.parametrize("sampler", ["nsgaii", "tpe"])
def test_multi_objective_pareto_front_matches_optuna(sampler):
    s = make({"x": uniform(0, 1), "y": uniform(0, 1)}, metric=["loss", "latency"], mode=["min", "max"],
             sampler=sampler, seed=0)
    rows = []
    for i in range(40):
        c = s.suggest(str(i))
        s.on_trial_result(str(i), {"loss": 1.0, "latency": 1.0, "training_iteration": 1})  # ignored (multi)
        row = [c["x"] ** 2 + c["y"], c["y"] - c["x"]] if i != 5 else [float("nan"), 0.0]
        rows.append(row)
        s.on_trial_complete(str(i), {"loss": row[0], "latency": row[1]})
    assert s.study.directions == [optuna.study.StudyDirection.MINIMIZE, optuna.study.StudyDirection.MAXIMIZE]
    assert s.study.trials[5].state == TrialState.FAIL
    best = sorted(t.number for t in s.study.best_trials)
    assert best == pareto_front(rows, ["min", "max"])
    assert 5 not in best and len(best) >= 2


def test_pareto_front_rules():
    assert pareto_front([[1, 5], [2, 2], [3, 3], [None, 0]], ["min", "min"]) == [0, 1]
    assert pareto_front([[1, 1], [1, 1], [2, 0]], ["min", "min"]) == [0, 1, 2]  # duplicates both kept
    assert pareto_front([[1, 1], [2, 2]], ["max", "max"]) == [1]
    assert pareto_front([[float("nan"), 0], [5, 5], None, [1], "ab"], ["min", "min"]) == [1]
    assert pareto_front([[math.inf, 0], [0, math.inf]], ["min", "min"]) == [0, 1]
    assert pareto_front([], ["min"]) == []
    with pytest.raises(ValueError):
        pareto_front([[1]], ["minimize"])


# -- points_to_evaluate / evaluated_rewards ------------------------------------
def test_points_to_evaluate_run_first_in_order():
    space = {"x": uniform(0, 1), "opt": {"lr": loguniform(1e-4, 1e-1)}, "c": choice([[1], [2]])}
    points = [{"x": 0.1, "opt": {"lr": 0.01}, "c": [2]}, {"x": 0.2, "opt/lr": 0.001}, {"x": 0.3}]
    s = make(space, points_to_evaluate=points, seed=0)
    configs = [s.suggest(str(i)) for i in range(4)]
    assert configs[0] == {"x": 0.1, "opt": {"lr": 0.01}, "c": [2]}
    assert configs[1]["x"] == 0.2 and configs[1]["opt"]["lr"] == 0.001
    assert configs[2]["x"] == 0.3 and 1e-4 <= configs[2]["opt"]["lr"] < 1e-1
    assert configs[3]["x"] not in (0.1, 0.2, 0.3)


def test_evaluated_rewards_added_as_completed_trials():
    s = make({"x": uniform(0, 1)}, points_to_evaluate=[{"x": 0.5}, {"x": 0.7}], evaluated_rewards=[2.0, 1.0],
             seed=0)
    trials = s.study.trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert [t.params["x"] for t in trials] == [0.5, 0.7] and s.study.best_value == 1.0
    assert s.suggest("1")["x"] not in (0.5, 0.7)
    with pytest.raises(ValueError, match="one reward per point"):
        OptunaSearch(points_to_evaluate=[{"x": 1}], evaluated_rewards=[1, 2])


# -- reproducibility and parity ---------------------------------------------------
BRANIN = {"x1": uniform(-5, 10), "x2": uniform(0, 15)}


def run_sequential(searcher, n):
    out = []
    for i in range(n):
        c = searcher.suggest(str(i))
        out.append(c)
        searcher.on_trial_complete(str(i), {"loss": branin(c["x1"], c["x2"])})
    return out


def test_seeded_runs_are_reproducible():
    a = run_sequential(make(BRANIN, seed=3), 15)
    b = run_sequential(make(BRANIN, spec={"seed": 3}), 15)  # TuneConfig seed
    c = run_sequential(make(BRANIN, seed=4), 15)
    assert a == b and a != c


@pytest.mark.parametrize("seed", [0, 1])
def test_tpe_parity_with_plain_optuna(seed):
    n = 25
    ours = run_sequential(make(BRANIN, sampler="tpe", seed=seed), n)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    dists = {"x1": FloatDistribution(-5, below(10.0)), "x2": FloatDistribution(0, below(15.0))}
    plain = []
    for _ in range(n):
        trial = study.ask(dists)
        plain.append(dict(trial.params))
        study.tell(trial, branin(trial.params["x1"], trial.params["x2"]))
    assert ours == plain


# -- persistence and resume -----------------------------------------------------------
def test_journal_persistence_and_resume(tmp_path):
    spec = {"experiment_dir": str(tmp_path), "seed": 0, "resume": False}
    first = make(BRANIN, spec=spec)
    configs = run_sequential(first, 3)
    running = first.suggest("3")  # recorded by the tuner, running at the crash
    first.on_trial_result("3", {"loss": 50.0, "training_iteration": 1})
    first.suggest("4")  # suggested but never recorded by the tuner: orphan
    assert (tmp_path / JOURNAL_FILE).exists()
    del first  # crash

    second = make(BRANIN, spec={**spec, "resume": True})
    restored = [{"trial_id": str(i), "config": c, "status": "TERMINATED",
                 "result": {"loss": branin(c["x1"], c["x2"])}} for i, c in enumerate(configs)]
    restored.append({"trial_id": "3", "config": running, "status": "RUNNING", "result": None})
    second.restore_trials(restored)
    study = second.study
    assert study.study_name == STUDY_NAME and len(study.trials) == 6
    assert study.trials[5].state == TrialState.WAITING  # the orphan's params, enqueued again
    states = {t.user_attrs[TRIAL_ID_ATTR]: t.state for t in study.trials[:5]}
    assert states == {"0": TrialState.COMPLETE, "1": TrialState.COMPLETE, "2": TrialState.COMPLETE,
                      "3": TrialState.RUNNING, "4": TrialState.FAIL}
    orphan = study.trials[4]
    assert orphan.user_attrs["tuneplat_orphaned"] is True
    # the resumed trial keeps its Optuna trial
    second.on_trial_result("3", {"loss": 40.0, "training_iteration": 2})
    second.on_trial_complete("3", {"loss": 40.0, "training_iteration": 2})
    t3 = study.trials[3]
    assert t3.state == TrialState.COMPLETE and t3.value == 40.0 and t3.intermediate_values == {1: 50.0, 2: 40.0}
    # the orphan's params are suggested again first, then the search goes on in the same study
    again = second.suggest("5")
    assert again == {"x1": orphan.params["x1"], "x2": orphan.params["x2"]}
    second.on_trial_complete("5", {"loss": 1.0})
    new = second.suggest("6")
    assert new not in configs and new != running
    second.on_trial_complete("6", {"loss": 2.0})
    reloaded = optuna.load_study(
        study_name=STUDY_NAME,
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / JOURNAL_FILE))),
    )
    assert len(reloaded.trials) == 7 and reloaded.best_value == 1.0


def test_resume_finished_trial_not_yet_told(tmp_path):
    spec = {"experiment_dir": str(tmp_path), "seed": 0}
    first = make(BRANIN, spec=spec)
    c = first.suggest("a")
    del first
    second = make(BRANIN, spec={**spec, "resume": True})
    second.restore_trials([{"trial_id": "a", "config": c, "status": "TERMINATED", "result": {"loss": 3.0}}])
    assert second.study.trials[0].state == TrialState.COMPLETE and second.study.trials[0].value == 3.0


def test_new_run_in_same_dir_starts_fresh_study(tmp_path):
    spec = {"experiment_dir": str(tmp_path), "seed": 0}
    run_sequential(make(BRANIN, spec=spec), 2)
    with pytest.warns(UserWarning, match="resume is False"):
        fresh = make(BRANIN, spec=spec)
    assert len(fresh.study.trials) == 0


def test_resume_in_memory_rebuilds_study_and_skips_done_points():
    points = [{"x1": 1.0, "x2": 2.0}, {"x1": 2.0, "x2": 2.0}, {"x1": 3.0, "x2": 4.0}]
    s = make(BRANIN, spec={"seed": 0, "resume": True}, points_to_evaluate=points)
    s.restore_trials([
        {"trial_id": "0", "config": points[0], "status": "TERMINATED", "result": {"loss": 5.0}},
        {"trial_id": "1", "config": points[1], "status": "PAUSED", "result": {"loss": 6.0}},
    ])
    trials = s.study.trials
    assert trials[0].state == TrialState.COMPLETE and trials[0].params == points[0] and trials[0].value == 5.0
    assert trials[1].state == TrialState.RUNNING and trials[1].params == points[1]
    s.on_trial_complete("1", {"loss": 4.0})
    assert s.study.trials[1].value == 4.0
    assert s.suggest("2") == points[2]  # the point not yet run
    assert s.suggest("3") not in points


# -- OptunaPrunerScheduler --------------------------------------------------------
def curve(level, step):
    return level + 10.0 / step


def test_pruner_scheduler_median_pruner_deterministic():
    pruner = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=2)
    sched = OptunaPrunerScheduler(pruner)
    assert isinstance(sched, TrialScheduler)
    sched.set_objective("loss", "min")
    # Two good trials complete first.
    for tid, level in (("a", 1.0), ("b", 2.0)):
        sched.on_trial_add(tid, {})
        for step in range(1, 6):
            assert sched.on_trial_result(tid, {"loss": curve(level, step), "training_iteration": step}) is Decision.CONTINUE
        sched.on_trial_complete(tid, {"loss": curve(level, 5)})
    # A bad trial: step 1 is warm-up, step 2 is worse than the median -> STOP.
    sched.on_trial_add("bad", {})
    assert sched.on_trial_result("bad", {"loss": curve(9.0, 1), "training_iteration": 1}) is Decision.CONTINUE
    assert sched.on_trial_result("bad", {"loss": curve(9.0, 2), "training_iteration": 2}) is Decision.STOP
    assert "MedianPruner" in sched.stop_reason("bad")
    sched.on_trial_complete("bad", {"loss": curve(9.0, 2)})
    # A good trial keeps running; a missing metric is ignored.
    sched.on_trial_add("good", {})
    for step in range(1, 6):
        assert sched.on_trial_result("good", {"loss": curve(0.5, step), "training_iteration": step}) is Decision.CONTINUE
    assert sched.on_trial_result("good", {"training_iteration": 6}) is Decision.CONTINUE
    sched.on_trial_add("nan", {})  # a diverged trial: NaN is reported, the pruner prunes it
    assert sched.on_trial_result("nan", {"loss": float("nan"), "training_iteration": 1}) is Decision.CONTINUE
    assert sched.on_trial_result("nan", {"loss": float("nan"), "training_iteration": 2}) is Decision.STOP
    sched.on_trial_error("good")
    states = [t.state for t in sched.study.trials]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
                      TrialState.RUNNING]


def test_pruner_scheduler_max_mode_and_errors():
    sched = OptunaPrunerScheduler(optuna.pruners.ThresholdPruner(lower=0.5), metric="acc", mode="max")
    sched.set_objective(None, None)
    sched.on_trial_add("t", {})
    assert sched.on_trial_result("t", {"acc": 0.9, "training_iteration": 1}) is Decision.CONTINUE
    assert sched.on_trial_result("t", {"acc": 0.1, "training_iteration": 2}) is Decision.STOP
    assert sched.study.direction == optuna.study.StudyDirection.MAXIMIZE
    with pytest.raises(ValueError, match="single-objective"):
        OptunaPrunerScheduler(optuna.pruners.MedianPruner(), metric=["a", "b"])
    with pytest.raises(TypeError):
        OptunaPrunerScheduler("median")


# -- packaging -------------------------------------------------------------------------
def test_import_tuneplat_does_not_import_optuna():
    code = ("import sys, tuneplat, tuneplat.search; assert 'optuna' not in sys.modules; "
            "from tuneplat.search import OptunaSearch; assert 'optuna' in sys.modules; "
            "from tuneplat.search.optuna import OptunaSearch as O; assert O is OptunaSearch")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["_Leaf", "_k_times_q", "_snap", "_categorical", "_convert_leaf", "_require",
                                  "OptunaPrunerScheduler", "OptunaSearch"])
def test_an_earlier_tuner_pkl_finds_what_it_names_in_tuneplat_search_optuna(name):
    """``tuner.pkl`` (cloudpickle) names a saved searcher's classes and functions by module: one written before the
    adapter was split into private modules names ``tuneplat.search.optuna`` (a ``_Leaf``, the ``_snap`` mapping of a
    q-log domain and the ``_k_times_q`` it calls), and ``Tuner.restore`` must still find them there."""
    found = pickle.loads(f"ctuneplat.search.optuna\n{name}\n.".encode())  # the GLOBAL opcode such a file holds
    assert found.__name__ == name and found.__module__.startswith("tuneplat.search.")


def test_suggest_never_finishes_by_itself():
    s = make({"x": uniform(0, 1)}, seed=0)
    assert s.suggest("1") != Searcher.FINISHED


def test_study_name_and_storage_keep_the_study_in_the_users_storage(tmp_path):
    """Ray's OptunaSearch(study_name=, storage=): the study lives there, and a second search adds to it."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    for round_ in range(2):
        s = OptunaSearch(metric="loss", mode="min", study_name="mine", storage=url, seed=round_)
        s.set_search_properties(None, None, {"x": uniform(0, 1)}, experiment_dir=str(tmp_path / f"exp{round_}"))
        for i in range(3):
            config = s.suggest(f"t{round_}{i}")
            s.on_trial_complete(f"t{round_}{i}", {"loss": config["x"]})
    study = optuna.load_study(study_name="mine", storage=url)
    assert len([t for t in study.trials if t.state == TrialState.COMPLETE]) == 6
    assert not (tmp_path / "exp0" / "optuna_journal.log").exists()  # (not the experiment folder's journal)
