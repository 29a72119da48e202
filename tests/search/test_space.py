"""Domains, space validation and BasicVariantGenerator (no Optuna)."""

from __future__ import annotations

import math
import random

import pytest

from tuneplat.search import (
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Searcher,
    SearchSpaceError,
    choice,
    flatten_dict,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    unflatten_dict,
    uniform,
)
from tuneplat.search._space import is_grid, iter_leaves, validate_space

N = 4000


def draws(domain, n=N, seed=0):
    rng = random.Random(seed)
    return [domain.sample(rng) for _ in range(n)]


def is_multiple(value, q):
    return abs(value / q - round(value / q)) < 1e-9


# -- sampling bounds ------------------------------------------------------
def test_uniform_lower_inclusive_upper_exclusive():
    values = draws(uniform(-2.0, 3.0))
    assert all(-2.0 <= v < 3.0 for v in values)
    assert min(values) < -1.9 and max(values) > 2.9


def test_uniform_never_returns_upper_even_when_rounding_would():
    class Top(random.Random):
        def uniform(self, a, b):
            return b  # what random.uniform may return after rounding

    assert uniform(0.0, 1.0).sample(Top()) < 1.0
    assert loguniform(1e-3, 1.0).sample(Top()) < 1.0


def test_loguniform_bounds_and_log_spread():
    values = draws(loguniform(1e-4, 1e-1))
    assert all(1e-4 <= v < 1e-1 for v in values)
    # uniform in log10: about a third of draws in each decade
    below_1e3 = sum(v < 1e-3 for v in values) / len(values)
    assert 0.28 < below_1e3 < 0.39


def test_loguniform_other_base():
    values = draws(loguniform(1, 8, base=2))
    assert all(1 <= v < 8 for v in values)


def test_quniform_multiples_of_q_within_closed_range():
    values = draws(quniform(0.3, 2.0, 0.1))
    assert all(0.3 - 1e-12 <= v <= 2.0 + 1e-12 for v in values)
    assert all(is_multiple(v, 0.1) for v in values)
    assert all(isinstance(v, float) for v in values)
    assert any(abs(v - 2.0) < 1e-9 for v in values)  # upper reachable
    assert any(abs(v - 0.3) < 1e-9 for v in values)


def test_quniform_lower_not_on_grid_stays_within_bounds():
    # round(0.3 / 1) * 1 == 0 would fall below lower; the draw is kept in [lower, upper].
    values = draws(quniform(0.3, 3.7, 1))
    assert set(values) == {1.0, 2.0, 3.0}


def test_qloguniform_multiples_and_bounds():
    values = draws(qloguniform(1, 100, 5))
    assert all(5 <= v <= 100 and is_multiple(v, 5) for v in values)


def test_randint_upper_exclusive():
    values = draws(randint(2, 6))
    assert set(values) == {2, 3, 4, 5}
    assert all(isinstance(v, int) for v in values)


def test_lograndint_upper_exclusive():
    values = draws(lograndint(1, 10))
    assert set(values) <= set(range(1, 10))
    assert 9 in values and 1 in values


def test_qrandint_upper_inclusive_multiples():
    values = draws(qrandint(0, 20, 5))
    assert set(values) == {0, 5, 10, 15, 20}


def test_qrandint_lower_not_on_grid():
    values = draws(qrandint(3, 20, 4))
    assert set(values) == {4, 8, 12, 16, 20}


def test_qrandint_default_q_is_inclusive_randint():
    assert set(draws(qrandint(1, 3))) == {1, 2, 3}


def test_qlograndint_multiples_inclusive():
    values = draws(qlograndint(10, 1000, 10))
    assert all(10 <= v <= 1000 and v % 10 == 0 for v in values)
    assert 1000 in values or max(values) >= 900


def test_randn_and_qrandn():
    values = draws(randn(5.0, 2.0))
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    assert abs(mean - 5.0) < 0.15 and abs(sd - 2.0) < 0.15
    assert all(is_multiple(v, 0.5) for v in draws(qrandn(0, 1, 0.5)))


def test_choice_covers_all_categories():
    assert set(draws(choice(["a", "b", 3]))) == {"a", "b", 3}


# -- validation ---------------------------------------------------------
@pytest.mark.parametrize(
    "space, path, fragment",
    [
        ({"lr": uniform(1.0, 1.0)}, "param_space['lr']", "must be < upper"),
        ({"opt": {"lr": uniform(2.0, 1.0)}}, "param_space['opt']['lr']", "must be < upper"),
        ({"lr": loguniform(0.0, 1.0)}, "param_space['lr']", "must be > 0 on a log scale"),
        ({"n": lograndint(0, 10)}, "param_space['n']", "must be > 0 on a log scale"),
        ({"n": randint(5, 5)}, "param_space['n']", "must be < upper"),
        ({"c": choice([])}, "param_space['c']", "at least one value"),
        ({"x": quniform(0, 1, 0)}, "param_space['x']", "q=0 must be a number > 0"),
        ({"x": qrandint(0, 10, -2)}, "param_space['x']", "must be a number > 0"),
        ({"x": quniform(0.1, 0.2, 1.0)}, "param_space['x']", "no multiple of q"),
        ({"x": qrandint(1, 3, 5)}, "param_space['x']", "no multiple of q"),
        ({"g": grid_search([])}, "param_space['g']", "non-empty list"),
        ({"a": [uniform(0, 1), randint(3, 1)]}, "param_space['a'][1]", "must be < upper"),
    ],
)
def test_validate_space_names_key_path(space, path, fragment):
    with pytest.raises(SearchSpaceError) as info:
        validate_space(space)
    assert path in str(info.value) and fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_validate_space_reports_every_problem():
    with pytest.raises(SearchSpaceError) as info:
        validate_space({"a": uniform(1, 0), "b": {"c": choice([])}})
    assert "param_space['a']" in str(info.value) and "param_space['b']['c']" in str(info.value)


def test_validate_space_accepts_valid_space():
    validate_space({"a": uniform(0, 1), "b": {"c": choice([1])}, "d": 3, "g": grid_search([1, 2])})
    validate_space(None)
    with pytest.raises(SearchSpaceError, match="must be a dict"):
        validate_space([uniform(0, 1)])


def test_iter_leaves_and_is_grid():
    space = {"a": {"b": uniform(0, 1), "c": 3}, "g": grid_search([1])}
    paths = [p for p, _ in iter_leaves(space)]
    assert paths == [("a", "b"), ("a", "c"), ("g",)]
    assert is_grid({"grid_search": [1]}) and not is_grid({"grid_search": [1], "x": 2})


def test_flatten_unflatten_roundtrip():
    nested = {"a": {"b": 1, "c": {"d": 2}}, "e": 3}
    flat = flatten_dict(nested)
    assert flat == {"a/b": 1, "a/c/d": 2, "e": 3}
    assert unflatten_dict(flat) == nested


# -- BasicVariantGenerator -----------------------------------------------
def run_all(gen, limit=1000):
    configs = []
    for i in range(limit):
        c = gen.suggest(str(i))
        if c == Searcher.FINISHED:
            break
        configs.append(c)
        gen.on_trial_complete(str(i), {})
    return configs


def test_grid_times_num_samples():
    space = {"a": grid_search([1, 2, 3]), "b": grid_search(["x", "y"]), "c": uniform(0, 1)}
    gen = BasicVariantGenerator(random_state=0)
    gen.set_search_properties("loss", "min", space, num_samples=4)
    configs = run_all(gen)
    assert len(configs) == 3 * 2 * 4 == gen.total
    assert [(c["a"], c["b"]) for c in configs[:6]] == [(1, "x"), (1, "y"), (2, "x"), (2, "y"), (3, "x"), (3, "y")]
    assert len({c["c"] for c in configs}) == len(configs)  # fresh samples per repetition


def test_no_grid_gives_num_samples():
    gen = BasicVariantGenerator(random_state=0)
    gen.set_search_properties("loss", "min", {"x": randint(0, 10)}, num_samples=7)
    assert len(run_all(gen)) == 7


def test_seeded_determinism_and_tuneconfig_seed():
    space = {"x": uniform(0, 1), "n": {"k": randint(0, 100)}, "c": choice(["a", "b"])}

    def configs(**kw):
        seed = kw.pop("seed", None)
        gen = BasicVariantGenerator(**kw)
        gen.set_search_properties("loss", "min", space, num_samples=5, seed=seed)
        return run_all(gen)

    assert configs(random_state=3) == configs(random_state=3)
    assert configs(seed=3) == configs(random_state=3)
    assert configs(random_state=3) != configs(random_state=4)


def test_points_to_evaluate_first_and_partial():
    gen = BasicVariantGenerator(points_to_evaluate=[{"x": 0.5}, {"x": 0.25, "n": {"k": 7}}], random_state=0)
    gen.set_search_properties("loss", "min", {"x": uniform(0, 1), "n": {"k": randint(0, 5)}}, num_samples=2)
    configs = run_all(gen)
    assert len(configs) == 2  # the points take the place of the num_samples repetitions (Ray's rule)
    assert configs[0]["x"] == 0.5 and 0 <= configs[0]["n"]["k"] < 5
    assert configs[1] == {"x": 0.25, "n": {"k": 7}}
    gen = BasicVariantGenerator(points_to_evaluate=[{"x": 0.5}], random_state=0)
    gen.set_search_properties("loss", "min", {"x": uniform(0, 1), "g": grid_search([1, 2]),
                                             "twice": sample_from(lambda spec: spec.config.x * 2)}, num_samples=2)
    configs = run_all(gen)
    assert len(configs) == 4
    assert [(c["x"], c["g"], c["twice"]) for c in configs[:2]] == [(0.5, 1, 1.0), (0.5, 2, 1.0)]
    assert configs[2]["x"] != 0.5 and configs[2]["twice"] == 2 * configs[2]["x"]


def test_sample_from_sees_spec_config():
    space = {"a": randint(1, 10), "nested": {"b": uniform(0, 1)},
             "twice_a": sample_from(lambda spec: spec.config.a * 2),
             "b_plus": sample_from(lambda spec: spec.config.nested.b + 1),
             "const": sample_from(lambda: 42)}
    gen = BasicVariantGenerator(random_state=0)
    gen.set_search_properties("loss", "min", space, num_samples=20)
    for c in run_all(gen):
        assert c["twice_a"] == 2 * c["a"]
        assert c["b_plus"] == c["nested"]["b"] + 1
        assert c["const"] == 42


def test_concurrency_limiter_blocks_then_frees():
    gen = ConcurrencyLimiter(BasicVariantGenerator(random_state=0), max_concurrent=2)
    gen.set_search_properties("loss", "min", {"x": uniform(0, 1)}, num_samples=5)
    assert isinstance(gen.suggest("1"), dict) and isinstance(gen.suggest("2"), dict)
    assert gen.suggest("3") is None
    gen.on_trial_complete("1", {})
    assert isinstance(gen.suggest("3"), dict)


def test_restore_reproduces_generator_state():
    space = {"x": uniform(0, 1)}
    full = BasicVariantGenerator(random_state=1)
    full.set_search_properties("loss", "min", space, num_samples=6)
    expected = run_all(full)
    resumed = BasicVariantGenerator(random_state=1)
    resumed.set_search_properties("loss", "min", space, num_samples=6)
    resumed.restore_trials([{"trial_id": str(i), "config": c, "status": "TERMINATED", "result": {}}
                            for i, c in enumerate(expected[:2])])
    assert run_all(resumed) == expected[2:]


def test_constant_grid_search_keeps_the_random_values_across_one_repetitions_grid():
    """Ray's BasicVariantGenerator(constant_grid_search=True): one draw per repetition, shared by its grid."""
    space = {"x": uniform(0, 1), "d": grid_search([1, 2, 3])}
    g = BasicVariantGenerator(constant_grid_search=True, random_state=0)
    g.set_search_properties("loss", "min", space, num_samples=2)
    configs = [g.suggest(str(i)) for i in range(6)]
    assert [c["d"] for c in configs] == [1, 2, 3, 1, 2, 3]
    assert len({c["x"] for c in configs[:3]}) == 1 and len({c["x"] for c in configs[3:]}) == 1
    assert configs[0]["x"] != configs[3]["x"]
    plain = BasicVariantGenerator(random_state=0)
    plain.set_search_properties("loss", "min", space, num_samples=2)
    assert len({plain.suggest(str(i))["x"] for i in range(3)}) == 3  # (the default: fresh values per combination)
