"""ResourceChangingScheduler in virtual time: a trial's CPUs change while the experiment runs.

The scheduler's decisions, the journal's ``trial_resources`` events, the restart from the checkpoint of the
paused iteration and what the trial sees in ``get_trial_resources()`` are checked on the virtual-time executor
(one slot per CPU, so a trial of 2 CPUs takes 2 of the 4 slots); Ray's own ``DistributeResources`` is the
oracle for the allocation functions (tests/port/test_ray_signatures.py compares the signatures).
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from ray_controller_fakes import Controller as _Controller
from ray_controller_fakes import FakeTrial as _FakeTrial
from ray_controller_fakes import Sched as _Sched
from ray_controller_fakes import allocation_functions
from tuneplat.tune.execution.placement_groups import PlacementGroupFactory
from tuneplat.tune.schedulers import ASHAScheduler, FIFOScheduler, ResourceChangingScheduler
from tuneplat.tune.schedulers.resource_changing_scheduler import DistributeResources

import tuneplat as tune
from tuneplat.core._replay import load_state
from tuneplat.testing import VirtualTimeExecutor

STEPS = 6


def counting(config):
    """Reports STEPS results with a checkpoint each; says the CPUs it was given and where it started."""
    ck = tune.get_checkpoint()
    start = 0
    if ck is not None:
        with ck.as_directory() as d, open(os.path.join(d, "s.json")) as f:
            start = json.load(f)["i"]
    cpus = tune.get_context().get_trial_resources().head_cpus
    for i in range(start, STEPS):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "s.json"), "w") as f:
                json.dump({"i": i + 1}, f)
            tune.report({"loss": config["x"] / (i + 1), "cpus": cpus, "started_at": start},
                        checkpoint=tune.Checkpoint.from_directory(d))


def _fit(storage, scheduler, xs, slots=4, trainable=counting):
    return tune.Tuner(
        tune.with_resources(trainable, PlacementGroupFactory([{"CPU": 1, "GPU": 0}])),
        param_space={"x": tune.grid_search(xs)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0),
        executor=VirtualTimeExecutor(num_slots=slots)).fit()


def _journal(storage):
    with open(os.path.join(storage, "rcs", "journal.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_resized_trials_restart_from_their_checkpoint_with_the_new_cpus(storage):
    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), DistributeResources()), [1.0, 2.0, 3.0])
    events = _journal(storage)
    changes = [e for e in events if e["event"] == "trial_resources"]
    # 4 slots, 3 trials of 1 CPU: the first result of each sees 1 CPU free and an even share of one more unit
    assert changes, "no trial was resized"
    for e in changes:
        assert e["request"] == {"CPU": e["bundles"][0]["CPU"]} and e["previous"] != e["request"]
        assert e["reason"].startswith("ResourceChangingScheduler: DistributeResources gave")
        # the next attempt of that trial starts from the checkpoint of the paused iteration, with the new CPUs
        later = events[events.index(e):]
        start = next(x for x in later if x["event"] == "trial_start" and x["trial_id"] == e["trial_id"])
        assert start["start_iteration"] == e["iteration"]
        assert start["checkpoint"].endswith(f"checkpoint_{e['iteration']:06d}")
        assert start["resources"]["resources_per_worker"] == e["request"]
    for r in grid:
        rows = r.metrics_dataframe.to_dict("records")
        # no round lost nor repeated: one result per iteration, in order, and the last at STEPS
        assert [m["training_iteration"] for m in rows] == list(range(1, STEPS + 1))
        # what the trial saw in get_trial_resources() is what the journal gave it for that attempt
        given = {0: 1.0}
        for e in changes:
            if e["trial_id"] == r.metrics["trial_id"]:
                given[e["iteration"]] = e["request"]["CPU"]
        for m in rows:
            assert m["cpus"] == given[m["started_at"]], (m, given)
    resized = {e["trial_id"] for e in changes}
    # a trial resized to 2 CPUs held 2 of the 4 slots: the CPUs of running trials never exceeded the 4
    assert len(resized) >= 1


def test_the_journal_replays_to_the_same_resources(storage):
    _fit(storage, ResourceChangingScheduler(FIFOScheduler(), DistributeResources()), [1.0, 2.0, 3.0])
    events = _journal(storage)
    state = load_state(os.path.join(storage, "rcs"))  # (what restore and `tuneplat status` read)
    last = {}
    for e in events:
        if e["event"] == "trial_resources":
            last[e["trial_id"]] = e["bundles"]
    assert last
    for t in state.trials:
        if t.trial_id in last:
            assert t.placement_group_factory == PlacementGroupFactory(last[t.trial_id])
            assert [req for _, req, _ in t.resource_changes][-1] == t.placement_group_factory.required_resources
        else:
            assert t.placement_group_factory == PlacementGroupFactory([{"CPU": 1}])


def test_the_base_scheduler_decides_first(storage):
    # ASHA stops trials at its rungs; a STOP is never turned into a resize, and a trial it stops is not resized
    scheduler = ResourceChangingScheduler(ASHAScheduler(max_t=STEPS, grace_period=1, reduction_factor=2),
                                          DistributeResources())
    _fit(storage, scheduler, [1.0, 2.0, 3.0, 4.0])
    events = _journal(storage)
    stops = [e for e in events if e["event"] == "decision" and e["decision"] == "STOP"]
    pauses = [e for e in events if e["event"] == "decision" and e["decision"] == "PAUSE"]
    assert stops  # (x=4 reports the worst loss at every rung after x=1..3 did: ASHA cuts it at its first)
    assert {(e["trial_id"], e["iteration"]) for e in stops}.isdisjoint({(e["trial_id"], e["iteration"]) for e in pauses})
    assert len(pauses) == len([e for e in events if e["event"] == "trial_resources"])
    assert scheduler.describe()["base_scheduler"]["scheduler"] == "asha"


def _bad_function(value):
    def allocate(tune_controller, trial, result, scheduler):
        return value if trial.config["x"] == 2.0 else None
    return allocate


def test_an_allocation_function_returning_a_wrong_type_fails_that_trial_only(storage):
    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), _bad_function(3)), [1.0, 2.0])
    by_x = {r.config["x"]: r for r in grid}
    assert by_x[1.0].error is None and by_x[1.0].metrics["training_iteration"] == STEPS
    error = str(by_x[2.0].error)
    assert "resources_allocation_function" in error and "allocate" in error and "returned 3" in error
    assert by_x[2.0].metrics["trial_id"] in error and "PlacementGroupFactory" in error


def test_more_cpus_than_any_worker_has_is_an_error_naming_the_trial_and_the_numbers(storage):
    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), _bad_function(PlacementGroupFactory([{"CPU": 9}]))),
                [1.0, 2.0])
    by_x = {r.config["x"]: r for r in grid}
    assert by_x[1.0].error is None and by_x[1.0].metrics["training_iteration"] == STEPS
    error = str(by_x[2.0].error)
    tid = by_x[2.0].metrics["trial_id"]
    assert f"trial {tid} was given PlacementGroupFactory([{{'CPU': 9.0}}]" in error, error
    assert "num_slots=4" in error  # what exists
    assert by_x[2.0].metrics["training_iteration"] == 1  # it ran until the pause, and kept its results


def test_a_dict_is_accepted_as_rays_resources_and_none_keeps_them(storage):
    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), _bad_function({"cpu": 2})), [1.0, 2.0])
    by_x = {r.config["x"]: r for r in grid}
    assert [m["cpus"] for m in by_x[2.0].metrics_dataframe.to_dict("records")] == [1.0] + [2.0] * (STEPS - 1)
    assert {m["cpus"] for m in by_x[1.0].metrics_dataframe.to_dict("records")} == {1.0}
    with pytest.warns(UserWarning, match="resources_allocation_function` is None"):
        ResourceChangingScheduler(FIFOScheduler(), None)
    with pytest.raises(TypeError, match="base_scheduler"):
        ResourceChangingScheduler("asha")
    default = ResourceChangingScheduler()._resources_allocation_function  # (Ray's default: even shares, one bundle)
    assert type(default) is DistributeResources and default.add_bundles is False and default.increase_by == {}


def test_multi_rank_trials_with_one_bundle_growth_are_refused_at_once(storage):
    # (Ray's default DistributeResources(add_bundles=False) grows one bundle: tests/core/test_resource_changing_ranks.py
    # has several ranks with add_bundles=True)
    with pytest.raises(ValueError, match="add_bundles=True"):
        tune.Tuner(counting, param_space={"x": 1.0},
                   tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=ResourceChangingScheduler()),
                   run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0),
                   scaling_config=tune.ScalingConfig(num_workers=2),
                   executor=VirtualTimeExecutor(num_slots=4)).fit()


# ---------------------------------------------------------------------------- Ray's allocation functions as oracle
SCENARIOS = [  # (base bundles, each live trial's bundles, cluster cpus, gpus)
    ([{"CPU": 1}], [[{"CPU": 1}]] * 3, 4, 0),
    ([{"CPU": 1}], [[{"CPU": 1}]] * 3, 8, 0),
    ([{"CPU": 1}], [[{"CPU": 3}], [{"CPU": 3}], [{"CPU": 1}]], 4, 0),  # more used than there is: shrink
    ([{"CPU": 1}], [[{"CPU": 2}]], 8, 0),
    ([{"CPU": 2}], [[{"CPU": 2}]] * 2, 9, 0),
    ([{"CPU": 1, "GPU": 1}], [[{"CPU": 1, "GPU": 1}]] * 2, 8, 4),
    ([{"CPU": 1}], [[{"CPU": 1}]] * 5, 2, 0),
]
FUNCTIONS = [
    {}, {"increase_by": {"CPU": 2}}, {"increase_by": {"CPU": 1}, "increase_by_times": 2},
    {"reserve_resources": {"CPU": 1}}, {"add_bundles": True}, {"add_bundles": True, "increase_by_times": 2,
                                                                "increase_by": {"CPU": 1}},
]


@pytest.mark.parametrize("kwargs", FUNCTIONS, ids=[json.dumps(k) for k in FUNCTIONS])
@pytest.mark.parametrize("top", [False, True], ids=["even", "top_job"])
def test_allocation_functions_give_what_rays_give(kwargs, top):
    ours_fn, ray_fn = allocation_functions(kwargs, top)
    from ray.tune.execution.placement_groups import PlacementGroupFactory as RayPGF
    compared = 0
    for base, live, cpus, gpus in SCENARIOS:
        if not kwargs.get("add_bundles") and any(len(b) > 1 for b in live):
            continue
        for i in range(len(live)):
            out = []
            for fn, pgf in ((ours_fn, PlacementGroupFactory), (ray_fn, RayPGF)):
                trials = [_FakeTrial(f"t{j}", pgf(b), {"loss": float(j), "training_iteration": 2})
                          for j, b in enumerate(live)]
                got = fn(_Controller(trials, cpus, gpus), trials[i], trials[i].last_result, _Sched(pgf(base)))
                out.append(None if got is None else (got.bundles, got.head_bundle_is_empty, got.strategy))
            assert out[0] == out[1], (base, live, cpus, gpus, i)
            compared += 1
    assert compared >= 10


class _InterruptAfterResize(tune.Callback):
    """Ctrl-C once some trial was resized and has run a step with its new CPUs (once: the restored run has it too)."""

    fired = False

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["cpus"] != 1.0 and not type(self).fired:
            type(self).fired = True
            raise KeyboardInterrupt


def test_a_restore_keeps_the_resources_a_trial_was_given(storage):
    def allocate(tune_controller, trial, result, scheduler):  # the x=2 trial gets 2 CPUs at its 2nd result
        return PlacementGroupFactory([{"CPU": 2}]) if trial.config["x"] == 2.0 and result["training_iteration"] >= 2 \
            else None

    def run(tuner):
        return tuner.fit()

    _InterruptAfterResize.fired = False
    first = tune.Tuner(
        tune.with_resources(counting, PlacementGroupFactory([{"CPU": 1}])), param_space={"x": tune.grid_search([1.0, 2.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    scheduler=ResourceChangingScheduler(FIFOScheduler(), allocate)),
        run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0,
                                  callbacks=[_InterruptAfterResize()]),
        executor=VirtualTimeExecutor(num_slots=4))
    run(first)
    path = os.path.join(storage, "rcs")
    before = {t.trial_id: t for t in load_state(path).trials}
    resized = [t for t in before.values() if t.resources is not None]
    assert len(resized) == 1 and resized[0].placement_group_factory.head_cpus == 2.0
    assert not resized[0].status.is_finished()
    grid = tune.Tuner.restore(path, tune.with_resources(counting, PlacementGroupFactory([{"CPU": 1}])),
                              executor=VirtualTimeExecutor(num_slots=4)).fit()
    events = _journal(storage)
    tid = resized[0].trial_id
    restarts = [e for e in events if e["event"] == "trial_start" and e["trial_id"] == tid]
    assert restarts[-1]["resources"]["resources_per_worker"] == {"CPU": 2.0}  # the resize outlived the tuner
    for r in grid:
        rows = r.metrics_dataframe.to_dict("records")
        assert [m["training_iteration"] for m in rows] == list(range(1, STEPS + 1))
        if r.metrics["trial_id"] == tid:
            assert rows[-1]["cpus"] == 2.0


class Counter(tune.Trainable):
    """Ray's class API: ``self.trial_resources`` is the trial's resources after a resize."""

    def setup(self, config):
        self.i = 0

    def step(self):
        self.i += 1
        return {"loss": self.config["x"] / self.i, "cpus": self.trial_resources.head_cpus, "done": self.i >= STEPS}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "i.json"), "w") as f:
            json.dump({"i": self.i}, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "i.json")) as f:
            self.i = json.load(f)["i"]


def test_a_trainable_class_sees_its_new_resources(storage):
    grid = tune.Tuner(
        tune.with_resources(Counter, PlacementGroupFactory([{"CPU": 1}])), param_space={"x": tune.grid_search([2.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    scheduler=ResourceChangingScheduler(FIFOScheduler(), _bad_function({"CPU": 3}))),
        run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0,
                                  checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1)),
        executor=VirtualTimeExecutor(num_slots=4)).fit()
    rows = grid[0].metrics_dataframe.to_dict("records")
    assert [m["training_iteration"] for m in rows] == list(range(1, STEPS + 1))
    assert [m["cpus"] for m in rows] == [1.0] + [3.0] * (STEPS - 1)


def test_tuneplat_status_shows_a_trials_resource_changes(storage, capsys):
    from tuneplat.cli import main

    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), _bad_function({"CPU": 3})), [1.0, 2.0])
    tid = next(r.metrics["trial_id"] for r in grid if r.config["x"] == 2.0)
    capsys.readouterr()
    assert main(["status", os.path.join(storage, "rcs"), "--trial", tid]) == 0
    assert 'resources    from iteration 1: {"CPU": 3.0} (ResourceChangingScheduler)' in capsys.readouterr().out
    assert main(["status", os.path.join(storage, "rcs"), "--trial", tid, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["resource_changes"] == [{"iteration": 1, "resources": {"CPU": 3.0}}]
