"""Ray's ``experiment_tag``: in every result, each ``result.json`` line, ``Result.metrics`` and ``trial.experiment_tag``,
in Ray's format (``tuneplat/search/_tags.py``), the same after a restore.

The expected tags below were written out by hand from Ray 2.60's rules; where Ray is installed, its own functions
(``format_vars``, its generators' tag rules, PBT's ``_make_experiment_tag``) are the oracle on more configs.
"""

from __future__ import annotations

import json
import os
import random

import pytest

import tuneplat as tune
from tuneplat import Result, read_journal
from tuneplat.schedulers import PopulationBasedTraining
from tuneplat.search import ConcurrencyLimiter
from tuneplat.search._space import is_grid, iter_leaves
from tuneplat.search._tags import format_vars
from tuneplat.testing import VirtualTimeExecutor


def curve(config):
    for step in range(1, 4):
        yield {"loss": config["lr"] / step}


def _fit(space, storage, *, searcher=None, scheduler=None, metric="loss", mode="min", fn=curve, num_samples=1,
         callbacks=()):
    return tune.Tuner(fn, param_space=space,
                      tune_config=tune.TuneConfig(metric=metric, mode=mode, search_alg=searcher, scheduler=scheduler,
                                                  num_samples=num_samples, seed=0),
                      run_config=tune.RunConfig(name="tags", storage_path=storage, verbose=0, mlflow=False,
                                                callbacks=list(callbacks)),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()


def _index(result):
    return int(result.trial_id.rsplit("_", 1)[-1])


class SeenTags(tune.Callback):
    def __init__(self):
        self.seen = {}

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.seen[trial.trial_id] = (trial.experiment_tag, trial.last_result.get("experiment_tag"))


def test_the_default_generator_tags_its_resolved_values_in_every_result_and_file(storage):
    space = {"lr": tune.grid_search([0.01, 0.1]), "momentum": 0.9, "opt": {"name": tune.grid_search(["sgd", "adam w"])},
             "seed": 3}
    seen = SeenTags()
    grid = _fit(space, storage, callbacks=[seen])
    assert len(grid) == 4 and not grid.errors
    for r in grid:
        lr, name = r.config["lr"], {"sgd": "sgd", "adam w": "adam_w"}[r.config["opt"]["name"]]
        # Ray: "{index}_" and the grid/sampled values, sorted by key path, floats with 4 decimals, constants left out
        want = f"{_index(r)}_lr={lr:.4f},name={name}"
        assert r.metrics["experiment_tag"] == want
        assert seen.seen[r.trial_id] == (want, want)
        assert {row["experiment_tag"] for row in r._history} == {want}  # every result
        with open(os.path.join(r.path, "result.json")) as f:
            assert {json.loads(line)["experiment_tag"] for line in f} == {want}  # each result.json line
        assert Result.from_path(r.path).metrics["experiment_tag"] == want  # read back from the journal
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert all("experiment_tag" in e["result"] for e in events if e["event"] == "result")
    restored = tune.Tuner.restore(grid.experiment_path, curve, executor=VirtualTimeExecutor(num_slots=2)).get_results()
    assert sorted(r.metrics["experiment_tag"] for r in restored) == sorted(r.metrics["experiment_tag"] for r in grid)


def test_constants_only_tag_the_index_and_a_searchers_trials_count_from_one_with_every_value(storage):
    grid = _fit({"lr": 0.5, "note": "a/b c"}, storage)
    assert grid[0].metrics["experiment_tag"] == "0"
    # a searcher (Ray's SearchGenerator): "{index + 1}_" and every value of the config, constants too
    grid = _fit({"lr": tune.choice([0.25]), "note": "a/b c", "deep": {"k": 2}}, storage,
                searcher=ConcurrencyLimiter(tune.search.BasicVariantGenerator(), max_concurrent=1), num_samples=2)
    assert [r.metrics["experiment_tag"] for r in grid] == ["1_k=2,lr=0.2500,note=a_b_c", "2_k=2,lr=0.2500,note=a_b_c"]


def pbt_curve(config):
    for step in range(1, 13):
        yield {"score": config["lr"] * step}


def test_pbt_tags_an_exploited_trial_with_its_perturbed_values(storage):
    grid = _fit({"lr": tune.grid_search([0.1, 1.0, 2.0, 3.0])}, storage, metric="score", mode="max", fn=pbt_curve,
                scheduler=PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=4, seed=1,
                                                  hyperparam_mutations={"lr": [0.1, 1.0, 2.0, 3.0]}))
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    exploits = [e for e in events if e["event"] == "exploit"]
    assert exploits
    for r in grid:
        created = f"{_index(r)}_lr={[0.1, 1.0, 2.0, 3.0][_index(r)]:.4f}"  # (the grid's value of this trial)
        assert r._history[0]["experiment_tag"] == created
        mine = [e for e in exploits if e["trial_id"] == r.trial_id]
        if mine:  # Ray: the tag at creation, "@perturbed[" and the mutated keys' new values "]"
            assert r.metrics["experiment_tag"] == f"{created}@perturbed[lr={r.config['lr']:.4f}]"
            assert mine[-1]["experiment_tag"] == r.metrics["experiment_tag"]
        else:
            assert r.metrics["experiment_tag"] == created


# ---------------------------------------------------------------------------- Ray's own functions as the oracle
_ODD = [0.01, 1e-7, 3, True, None, "relu", "a b/c:d", "  x ", "ü", [1, 2], (3, 4), {"k": 1}, -2.5, "",
        float("inf"), 10**20]


def test_format_vars_is_rays_on_odd_values():
    ray_vg = pytest.importorskip("ray.tune.search.variant_generator", reason="Ray is not installed: the oracle")
    rng = random.Random(0)
    for _ in range(200):
        resolved = {("config",) + tuple(f"k{rng.randint(0, 9)}" for _ in range(rng.randint(1, 3))): rng.choice(_ODD)
                    for _ in range(rng.randint(1, 5))}
        assert format_vars(resolved) == ray_vg.format_vars(resolved), resolved


def _resolved_paths(space):
    return [p for p, v in iter_leaves(space) if p and (is_grid(v) or isinstance(v, tune.search.Domain))]


def test_tags_are_rays_for_sampled_spaces_searchers_and_pbt(storage):
    ray_vg = pytest.importorskip("ray.tune.search.variant_generator", reason="Ray is not installed: the oracle")
    ray_pbt = pytest.importorskip("ray.tune.schedulers.pbt", reason="Ray is not installed: the oracle")
    space = {"lr": tune.loguniform(1e-4, 1e-1), "momentum": tune.uniform(0.1, 0.9), "act": tune.choice(["relu", "ta nh"]),
             "layers": tune.grid_search([1, 3]), "net": {"width": tune.randint(8, 64), "fixed": "x y"}, "seed": 7}
    grid = _fit(space, os.path.join(storage, "basic"), num_samples=3)
    paths = _resolved_paths(space)
    for r in grid:
        resolved = {("config",) + p: _at(r.config, p) for p in paths}
        # BasicVariantGenerator.create_trial: str(counter) + "_" + format_vars(resolved_vars)
        assert r.metrics["experiment_tag"] == f"{_index(r)}_{ray_vg.format_vars(resolved)}"
    grid = _fit(space | {"layers": tune.choice([1, 3])}, os.path.join(storage, "searcher"), num_samples=3,
                searcher=ConcurrencyLimiter(tune.search.BasicVariantGenerator(), max_concurrent=2))
    for r in grid:
        # SearchGenerator.create_trial_if_possible: counter + 1, format_vars(_resolve_nested_dict(config))
        want = f"{_index(r) + 1}_{ray_vg.format_vars(ray_vg._resolve_nested_dict(r.config))}"
        assert r.metrics["experiment_tag"] == want
    mutations = {"lr": [0.1, 1.0, 2.0, 3.0]}
    grid = _fit({"lr": tune.grid_search([0.1, 1.0, 2.0, 3.0])}, os.path.join(storage, "pbt"), metric="score",
                mode="max", fn=pbt_curve, scheduler=PopulationBasedTraining(
                    time_attr="training_iteration", perturbation_interval=4, seed=1, hyperparam_mutations=mutations))
    perturbed = [r for r in grid if "@" in r.metrics["experiment_tag"]]
    assert perturbed
    for r in perturbed:
        original = r._history[0]["experiment_tag"]
        assert r.metrics["experiment_tag"] == ray_pbt._make_experiment_tag(original, r.config, mutations)


def _at(config, path):
    for p in path:
        config = config[p]
    return config
