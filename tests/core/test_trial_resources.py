"""Per-trial resources through the loop (virtual-time executor): with_resources(fn) and a searched ScalingConfig."""

from __future__ import annotations

import os

import pytest

import tuneplat as tune
from tuneplat import ScalingConfig, read_journal
from tuneplat.execution._executor import TrialSpec
from tuneplat.testing import VirtualTimeExecutor


def curve(config):
    for step in range(1, 4):
        yield {"loss": config["x"] + 1.0 / step}


class CountingExecutor(VirtualTimeExecutor):
    """The shipped virtual-time executor, recording the slots in use at each start (an algorithm's input only)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.in_use: list[int] = []
        self.shapes: list[tuple[str, object, object]] = []

    def start(self, spec: TrialSpec, reservation):
        self.in_use.append(self.num_slots - self._free)
        self.shapes.append((spec.trial_id, spec.world_size, spec.request))
        return super().start(spec, reservation)


def _fit(storage, fn, space, executor, **tc):
    return tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min", **tc),
                      run_config=tune.RunConfig(name="res", storage_path=storage, verbose=0, mlflow=False),
                      executor=executor).fit()


def _starts(grid):
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    return [e for e in events if e["event"] == "trial_start"]


def test_with_resources_function_gives_each_trial_its_own_group(storage):
    executor = CountingExecutor(num_slots=3)
    fn = tune.with_resources(curve, lambda config: ScalingConfig(num_workers=3) if config["x"] >= 1
                             else {"cpu": 1})
    grid = _fit(storage, fn, {"x": tune.grid_search([0.0, 1.0, 0.5, 2.0])}, executor)
    assert grid.num_errors == 0 and len(grid) == 4
    by_x = {r.config["x"]: r.trial_id for r in grid}
    shapes = {tid: ws for tid, ws, _ in executor.shapes}
    assert [shapes[by_x[x]] for x in (0.0, 1.0, 0.5, 2.0)] == [1, 3, 1, 3]
    assert max(executor.in_use) <= 3  # a 3-rank trial never overlapped another trial
    starts = {e["trial_id"]: e["resources"] for e in _starts(grid)}
    assert starts[by_x[1.0]] == {"num_workers": 3, "resources_per_worker": {"CPU": 1.0}}


def test_a_trial_waiting_for_room_is_not_overtaken(storage):
    executor = CountingExecutor(num_slots=2)
    fn = tune.with_resources(curve, lambda config: ScalingConfig(num_workers=2 if config["x"] == 1.0 else 1))
    _fit(storage, fn, {"x": tune.grid_search([0.0, 1.0, 0.2, 0.3])}, executor)
    order = [tid for tid, _, _ in executor.shapes]
    assert order == sorted(order)  # the 2-rank trial waited for both slots; the ones after it did not jump ahead


def test_a_trial_that_can_never_fit_ends_at_once_with_the_numbers(storage):
    fn = tune.with_resources(curve, lambda config: ScalingConfig(num_workers=int(config["n"])))
    grid = _fit(storage, fn, {"n": tune.grid_search([1, 5, 2]), "x": 0.0}, VirtualTimeExecutor(num_slots=2))
    errors = {r.config["n"]: r.error for r in grid}
    assert errors[1] is None and errors[2] is None
    assert "needs 5 rank(s)" in str(errors[5]) and "num_slots=2" in str(errors[5])


def test_a_bad_resources_function_result_fails_that_trial_only(storage):
    def resources(config):
        return {"cpu": -1} if config["x"] > 1 else "lots" if config["x"] > 0.5 else {"cpu": 1}

    grid = _fit(storage, tune.with_resources(curve, resources), {"x": tune.grid_search([0.0, 0.7, 2.0])},
                VirtualTimeExecutor(num_slots=2))
    errors = {r.config["x"]: str(r.error) if r.error else None for r in grid}
    assert errors[0.0] is None
    assert "resources(config)" in errors[0.7] and "'lots'" in errors[0.7]
    assert "resources['cpu']" in errors[2.0] and "-1" in errors[2.0]


def test_searched_scaling_config_in_param_space(storage):
    executor = CountingExecutor(num_slots=2)
    space = {"scaling_config": ScalingConfig(num_workers=tune.grid_search([1, 2]),
                                             resources_per_worker={"CPU": tune.grid_search([1, 0.5])}),
             "x": 0.1}
    grid = _fit(storage, curve, space, executor)
    assert grid.num_errors == 0 and len(grid) == 4
    seen = sorted((r.config["scaling_config"]["num_workers"], r.config["scaling_config"]["resources_per_worker"]["CPU"])
                  for r in grid)
    assert seen == [(1, 0.5), (1, 1), (2, 0.5), (2, 1)]
    assert sorted(ws for _, ws, _ in executor.shapes) == [1, 1, 2, 2]
    assert sorted(req["CPU"] for _, _, req in executor.shapes) == [0.5, 0.5, 1.0, 1.0]


def test_searched_scaling_config_is_validated_per_trial_and_in_one_place(storage):
    space = {"scaling_config": ScalingConfig(num_workers=tune.grid_search([-1, 1])), "x": 0.0}
    grid = _fit(storage, curve, space, VirtualTimeExecutor(num_slots=2))
    errors = sorted(str(r.error) for r in grid if r.error)
    assert len(errors) == 1 and "ScalingConfig.num_workers" in errors[0] and "scaling_config" in errors[0]
    with pytest.raises(ValueError, match="one place"):
        tune.Tuner(curve, param_space=space, scaling_config=ScalingConfig())
