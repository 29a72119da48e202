"""ResourceChangingScheduler on trials of several ranks (Train trainers, ``ScalingConfig(num_workers=n)``), in
virtual time.

A trainer's trial has Ray Train's factory (an empty head bundle, one bundle per rank); new bundles restart the
group from its latest checkpoint with one rank per bundle. Ray is the oracle twice over: its
``DistributeResources``/``DistributeResourcesToTopJob`` (``add_bundles=True``) must give the same bundles as ours
on the very states the experiment passes through, and its ``ScalingConfig.from_placement_group_factory`` must read
them as the same ranks and resources per rank that the journal records and the next attempt starts with.
Everything here runs in virtual time: the decisions depend on the code and the learning curves only.
"""

from __future__ import annotations

import json
import os

import pytest
from ray_controller_fakes import Controller as _Controller
from ray_controller_fakes import FakeTrial as _FakeTrial
from ray_controller_fakes import Sched as _Sched
from ray_controller_fakes import allocation_functions
from tuneplat.tune.execution.placement_groups import PlacementGroupFactory
from tuneplat.tune.schedulers import FIFOScheduler, ResourceChangingScheduler
from tuneplat.tune.schedulers.resource_changing_scheduler import DistributeResources, DistributeResourcesToTopJob

import tuneplat as tune
from tuneplat.core._replay import load_state
from tuneplat.core._shapes import rank_shape
from tuneplat.testing import VirtualTimeExecutor

STEPS = 6


def _x(config):
    """The swept value (a trainer's search space is under "train_loop_config", as Ray requires)."""
    return config["x"] if "x" in config else config["train_loop_config"]["x"]


def _curve(default_ranks):
    """A learning curve that says, in each result, the ranks and CPUs per rank of the attempt that made it."""

    def curve(spec):
        ranks = spec.world_size or default_ranks
        cpus = (spec.request or {}).get("CPU", 1.0)
        for i in range(STEPS):
            yield {"loss": _x(spec.config) / (i + 1), "ranks": ranks, "cpus": cpus, "started_at": spec.start_iteration}
    return curve


def _never_called(config):  # (the curve runs instead: VirtualTimeExecutor(curve=...))
    raise AssertionError("the virtual executor runs the curve")


def _trainer(ranks):
    from tuneplat.train.torch import TorchTrainer

    return TorchTrainer(_never_called, scaling_config=tune.ScalingConfig(num_workers=ranks))


def _fit(storage, scheduler, xs, *, ranks=1, trainer=True, slots=4, name="rcs", callbacks=(), gpus=0,
         strategy="PACK"):
    scaling = tune.ScalingConfig(num_workers=ranks, use_gpu=gpus > 0, placement_strategy=strategy)
    if trainer:
        from tuneplat.train.torch import TorchTrainer

        trainable = TorchTrainer(_never_called, scaling_config=scaling)
        extra = {}
    else:
        trainable = _never_called
        extra = {"scaling_config": scaling}
    return tune.Tuner(
        trainable, param_space={"train_loop_config": {"x": tune.grid_search(xs)}} if trainer
        else {"x": tune.grid_search(xs)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=storage, name=name, mlflow=False, verbose=0, callbacks=list(callbacks)),
        executor=VirtualTimeExecutor(num_slots=slots, gpus=gpus, curve=_curve(ranks)), **extra).fit()


def _journal(storage, name="rcs"):
    with open(os.path.join(storage, name, "journal.jsonl")) as f:
        return [json.loads(line) for line in f]


def _spelt(pgf):
    """Bundles as given to a factory (a leading {}: the empty head bundle)."""
    return ([{}] if pgf.head_bundle_is_empty else []) + pgf.bundles


# ---------------------------------------------------------------------------- Ray beside ours, on every call
class WithRayBeside:
    """An allocation function: ours, with Ray's called on the same state each time (both answers recorded)."""

    def __init__(self, ray_rcs, top, **kwargs):
        from ray.tune.execution.placement_groups import PlacementGroupFactory as RayPGF

        if top:
            kwargs = {**kwargs, "metric": "loss", "mode": "min"}
        self.ours = (DistributeResourcesToTopJob if top else DistributeResources)(**kwargs)
        self.ray = (ray_rcs.DistributeResourcesToTopJob if top else ray_rcs.DistributeResources)(**kwargs)
        self.ray_pgf = RayPGF
        self.calls: list[dict] = []

    def _as_ray(self, pgf):
        return self.ray_pgf(_spelt(pgf), strategy=pgf.strategy)

    def __call__(self, tune_controller, trial, result, scheduler):
        ours = self.ours(tune_controller, trial, result, scheduler)
        live = [_FakeTrial(t.trial_id, self._as_ray(t.placement_group_factory), dict(t.last_result))
                for t in tune_controller.get_live_trials()]
        me = next(t for t in live if t.trial_id == trial.trial_id)
        updater = tune_controller._resource_updater
        theirs = self.ray(_Controller(live, updater.get_num_cpus(), updater.get_num_gpus()), me, dict(result),
                          _Sched(self._as_ray(scheduler.base_trial_resources)))
        self.calls.append({"trial_id": trial.trial_id, "iteration": result["training_iteration"],
                           "had": _spelt(trial.placement_group_factory),
                           "ours": None if ours is None else _spelt(ours),
                           "ray": None if theirs is None else _spelt(theirs), "ray_pgf": theirs,
                           "strategies": (getattr(ours, "strategy", None), getattr(theirs, "strategy", None))})
        return ours


SCENARIOS = [  # (trainer?, ranks per trial as configured, slots, trials, allocation kwargs, top job?, gpus)
    (True, 1, 4, [1.0], {"add_bundles": True}, False, 0),
    (True, 1, 4, [1.0, 2.0, 3.0], {"add_bundles": True}, False, 0),
    (True, 1, 7, [1.0, 2.0], {"add_bundles": True}, True, 0),
    (True, 2, 8, [1.0, 2.0, 3.0], {"add_bundles": True}, False, 0),
    (True, 2, 7, [1.0, 2.0], {"add_bundles": True, "increase_by": {"CPU": 1}, "increase_by_times": 1}, False, 0),
    (False, 2, 6, [1.0, 2.0], {"add_bundles": True}, True, 0),
    (True, 1, 5, [1.0, 2.0], {"add_bundles": False}, False, 0),  # a one-rank trainer's one bundle grows
    (True, 1, 4, [1.0, 2.0], {"add_bundles": True}, False, 4),  # ranks of {CPU: 1, GPU: 1}
]


@pytest.mark.parametrize("trainer,ranks,slots,xs,kwargs,top,gpus", SCENARIOS,
                         ids=[f"{'trainer' if s[0] else 'fn'}{s[1]}-slots{s[2]}-{len(s[3])}trials-"
                              f"{'top' if s[5] else 'even'}-{json.dumps(s[4], sort_keys=True)}-gpus{s[6]}"
                              for s in SCENARIOS])
def test_ranks_are_given_as_rays_functions_give_bundles_and_its_trainers_read_them(storage, trainer, ranks, slots,
                                                                                   xs, kwargs, top, gpus):
    ray_rcs = pytest.importorskip("ray.tune.schedulers.resource_changing_scheduler",
                                  reason="Ray is the reference; install the bench extra (CI does)")
    from ray.air.config import ScalingConfig as RayScalingConfig

    fn = WithRayBeside(ray_rcs, top, **kwargs)
    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), fn), xs, ranks=ranks, trainer=trainer,
                slots=slots, gpus=gpus)
    assert grid.num_errors == 0, [str(r.error) for r in grid if r.error]
    assert fn.calls
    for call in fn.calls:  # the same state in, the same bundles out
        assert call["ours"] == call["ray"] and call["strategies"][0] == call["strategies"][1], call
    events = _journal(storage)
    changes = [e for e in events if e["event"] == "trial_resources"]
    changed = {(c["trial_id"], c["iteration"]): c for c in fn.calls if c["ours"] is not None and c["ours"] != c["had"]}
    # each answer that differs from what the trial had is one journaled change, with the bundles as given (in any
    # order: a change is journaled when that trial's group has left its workers)
    assert sorted((e["trial_id"], e["iteration"], e["bundles"]) for e in changes) == \
        sorted((tid, it, c["ours"]) for (tid, it), c in changed.items())
    assert changes, "no scenario here is without a change: each starts with free room for the first trial to take"
    for e in changes:
        c = changed[e["trial_id"], e["iteration"]]
        ray_sc = RayScalingConfig.from_placement_group_factory(c["ray_pgf"])  # how Ray's trainer reads them
        assert e["num_workers"] == ray_sc.num_workers
        assert e["request"] == {k: float(v) for k, v in ray_sc.resources_per_worker.items()}
        assert ray_sc.trainer_resources == {}  # (one equal bundle per rank: no trainer bundle merged in)
        # the trial's next attempt: from the paused iteration's checkpoint, with those ranks and resources
        later = events[events.index(e):]
        start = next(x for x in later if x["event"] == "trial_start" and x["trial_id"] == e["trial_id"])
        assert start["start_iteration"] == e["iteration"]
        assert len(start["workers"]) == e["num_workers"]
        assert start["resources"] == {"num_workers": e["num_workers"], "resources_per_worker": e["request"]}
    for r in grid:  # what each attempt ran with is what the journal gave it; no iteration lost nor repeated
        rows = r.metrics_dataframe.to_dict("records")
        assert [m["training_iteration"] for m in rows] == list(range(1, STEPS + 1))
        given = {0: (ranks, 1.0)}
        for e in changes:
            if e["trial_id"] == r.trial_id:
                given[e["iteration"]] = (e["num_workers"], e["request"].get("CPU", 0.0))
        for m in rows:
            assert (m["ranks"], m["cpus"]) == given[m["started_at"]], (m, given)


def test_a_trainers_placement_strategy_is_its_factorys_as_in_ray(storage):
    ray_rcs = pytest.importorskip("ray.tune.schedulers.resource_changing_scheduler",
                                  reason="Ray is the reference; install the bench extra (CI does)")
    fn = WithRayBeside(ray_rcs, False, add_bundles=True)
    _fit(storage, ResourceChangingScheduler(FIFOScheduler(), fn), [1.0], ranks=1, slots=3, strategy="SPREAD")
    assert fn.calls and all(c["strategies"][0] == c["strategies"][1] for c in fn.calls)
    changes = [e for e in _journal(storage) if e["event"] == "trial_resources"]
    assert [e["strategy"] for e in changes] == ["SPREAD"]  # (Ray's functions keep the base factory's strategy)
    t = load_state(os.path.join(storage, "rcs")).trials[0]
    assert t.placement_group_factory == PlacementGroupFactory([{}] + [{"CPU": 1}] * 3, "SPREAD")


def test_a_function_trainable_of_one_rank_still_holds_the_sum_in_one_process(storage):
    # Ray's function trainables: the bundles are one process's; adding bundles gives that rank more CPUs
    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), DistributeResources(add_bundles=True)),
                [1.0], ranks=1, trainer=False, slots=3)
    changes = [e for e in _journal(storage) if e["event"] == "trial_resources"]
    assert changes and "num_workers" not in changes[-1]
    assert changes[-1]["bundles"] == [{"CPU": 1.0}] * 3 and changes[-1]["request"] == {"CPU": 3.0}
    assert {m["ranks"] for m in grid[0].metrics_dataframe.to_dict("records")} == {1}
    assert grid[0].metrics["cpus"] == 3.0


def _grow_to(n):
    def allocate(tune_controller, trial, result, scheduler):  # n ranks from the 2nd result on
        return PlacementGroupFactory([{}] + [{"CPU": 1}] * n) if result["training_iteration"] >= 2 else None
    return allocate


def test_the_journal_replays_to_the_new_shape_and_status_shows_it(storage, capsys):
    from tuneplat.cli import main

    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), _grow_to(3)), [1.0], ranks=1, slots=4)
    tid = grid[0].trial_id
    state = load_state(os.path.join(storage, "rcs"))  # (what restore and `tuneplat status` read)
    t = state.by_id[tid]
    assert t.bundle_per_rank and t.world_size == 3
    assert t.placement_group_factory == PlacementGroupFactory([{}] + [{"CPU": 1}] * 3)
    assert t.resource_changes == [(2, {"CPU": 1.0}, 3)]
    assert rank_shape(t.placement_group_factory, t.bundle_per_rank) == ({"CPU": 1.0}, 3)
    capsys.readouterr()
    assert main(["status", os.path.join(storage, "rcs"), "--trial", tid]) == 0
    assert 'resources    from iteration 2: 3 ranks of {"CPU": 1.0} (ResourceChangingScheduler)' in \
        capsys.readouterr().out
    assert main(["status", os.path.join(storage, "rcs"), "--trial", tid, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["resource_changes"] == [{"iteration": 2, "resources": {"CPU": 1.0}, "num_workers": 3}]
    decision = next(e for e in _journal(storage) if e["event"] == "decision" and e["decision"] == "PAUSE")
    assert "gave 3 ranks of {CPU: 1} (had 1 rank of {CPU: 1})" in decision["reason"]


class _InterruptAfterGrowth(tune.Callback):
    """Ctrl-C once a grown group has reported (once: the restored run has it too)."""

    fired = False

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["ranks"] > 1 and not type(self).fired:
            type(self).fired = True
            raise KeyboardInterrupt


def test_a_restore_restarts_the_group_with_the_ranks_it_was_given(storage):
    _InterruptAfterGrowth.fired = False
    scheduler = ResourceChangingScheduler(FIFOScheduler(), _grow_to(2))
    _fit(storage, scheduler, [1.0], ranks=1, slots=4, callbacks=[_InterruptAfterGrowth()])
    path = os.path.join(storage, "rcs")
    before = load_state(path).trials[0]
    assert before.world_size == 2 and not before.status.is_finished()
    grid = tune.Tuner.restore(path, _trainer(1), executor=VirtualTimeExecutor(num_slots=4, curve=_curve(1))).fit()
    starts = [e for e in _journal(storage) if e["event"] == "trial_start"]
    # the restored run's start: the 2 ranks the scheduler gave, not the trainer's num_workers=1
    assert len(starts[-1]["workers"]) == 2
    assert starts[-1]["resources"] == {"num_workers": 2, "resources_per_worker": {"CPU": 1.0}}
    rows = grid[0].metrics_dataframe.to_dict("records")
    assert [m["training_iteration"] for m in rows] == list(range(1, STEPS + 1))
    assert [m["ranks"] for m in rows] == [1, 1] + [2] * (STEPS - 2)  # (given 2 ranks at its 2nd result)


def test_bundles_that_differ_fail_that_trial_naming_it(storage):
    def allocate(tune_controller, trial, result, scheduler):  # Ray's trainer form, a trainer CPU merged in
        return PlacementGroupFactory([{}, {"CPU": 2}, {"CPU": 1}]) if _x(trial.config) == 2.0 else None

    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), allocate), [1.0, 2.0], ranks=1, slots=4)
    by_x = {_x(r.config): r for r in grid}
    assert by_x[1.0].error is None and by_x[1.0].metrics["training_iteration"] == STEPS
    error = str(by_x[2.0].error)
    assert f"trial {by_x[2.0].trial_id}" in error and "bundles that differ" in error
    assert "DistributeResources(add_bundles=True)" in error


def test_elastic_groups_and_one_bundle_growth_of_several_ranks_are_refused_at_once(storage):
    def fit(scaling, scheduler):
        tune.Tuner(_never_called, param_space={"x": 1.0},
                   tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler),
                   run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0),
                   scaling_config=scaling, executor=VirtualTimeExecutor(num_slots=4, curve=_curve(1))).fit()

    with pytest.raises(ValueError, match=r"elastic ScalingConfig\(num_workers=\(1, 3\)\).*Use one of them"):
        fit(tune.ScalingConfig(num_workers=(1, 3)),
            ResourceChangingScheduler(FIFOScheduler(), DistributeResources(add_bundles=True)))
    # Ray's DistributeResources(add_bundles=False) refuses several bundles at the first result; here at once
    with pytest.raises(ValueError, match=r"add_bundles=False\) \(the default\) grows a trial's one bundle.*2 ranks"):
        fit(tune.ScalingConfig(num_workers=2), ResourceChangingScheduler())


TRAINER_STATES = [  # (base, each live trial's bundles, cluster cpus, gpus): trainer factories, Ray's form
    ([{}, {"CPU": 1}], [[{}, {"CPU": 1}]] * 3, 8, 0),
    ([{}, {"CPU": 1}], [[{}] + [{"CPU": 1}] * 3, [{}] + [{"CPU": 1}] * 3, [{}, {"CPU": 1}]], 4, 0),  # shrink
    ([{}, {"CPU": 2}, {"CPU": 2}], [[{}, {"CPU": 2}, {"CPU": 2}]] * 2, 13, 0),
    ([{}, {"CPU": 1, "GPU": 1}], [[{}, {"CPU": 1, "GPU": 1}]] * 2, 8, 3),
    ([{}, {"CPU": 1}, {"CPU": 1}], [[{}] + [{"CPU": 1}] * 5, [{}, {"CPU": 1}, {"CPU": 1}]], 6, 0),  # shrink
]
TRAINER_FUNCTIONS = [{"add_bundles": True}, {"add_bundles": True, "increase_by_times": 2},
                     {"add_bundles": True, "increase_by": {"CPU": 2}, "increase_by_times": 1},
                     {"add_bundles": True, "reserve_resources": {"CPU": 1}}]


@pytest.mark.parametrize("kwargs", TRAINER_FUNCTIONS, ids=[json.dumps(k) for k in TRAINER_FUNCTIONS])
@pytest.mark.parametrize("top", [False, True], ids=["even", "top_job"])
def test_on_trainer_factories_ours_give_rays_bundles_and_read_back_as_rays_trainer_does(kwargs, top):
    ours_fn, ray_fn = allocation_functions(kwargs, top)
    from ray.air.config import ScalingConfig as RayScalingConfig
    from ray.tune.execution.placement_groups import PlacementGroupFactory as RayPGF
    compared = shrunk = refused = 0
    for base, live, cpus, gpus in TRAINER_STATES:
        for i in range(len(live)):
            out = []
            for fn, pgf in ((ours_fn, PlacementGroupFactory), (ray_fn, RayPGF)):
                trials = [_FakeTrial(f"t{j}", pgf(b), {"loss": float(j), "training_iteration": 2})
                          for j, b in enumerate(live)]
                out.append(fn(_Controller(trials, cpus, gpus), trials[i], trials[i].last_result, _Sched(pgf(base))))
            ours, theirs = out
            assert (ours is None) == (theirs is None)
            if ours is None:
                continue
            assert (_spelt(ours), ours.strategy) == (_spelt(theirs), theirs.strategy), (base, live, cpus, gpus, i)
            compared += 1
            if any(b != ours.bundles[-1] for b in ours.bundles):
                # an increase_by unlike a rank's bundle: Ray reads every worker as the last bundle (and so holds more
                # than the factory says); here that trial is refused, naming the fix
                with pytest.raises(ValueError, match="bundles that differ.*increase_by"):
                    rank_shape(ours, bundle_per_rank=True)
                refused += 1
                continue
            ray_sc = RayScalingConfig.from_placement_group_factory(theirs)
            assert rank_shape(ours, bundle_per_rank=True) == (
                {k: float(v) for k, v in ray_sc.resources_per_worker.items()}, ray_sc.num_workers)
            shrunk += len(ours.bundles) < len(live[i]) - 1
    assert compared >= 10 and shrunk >= 1  # (the states above hold more ranks than their clusters: some shrink)
    assert compared - refused >= 5


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_boosting_trainers_are_trainers_too(storage, framework):
    # any Train trainer's trial has one bundle per rank, not only TorchTrainer's (the tuner marks trainers)
    pytest.importorskip(framework, reason=f"the {framework} extra is not installed")
    if framework == "xgboost":
        from tuneplat.train.xgboost import XGBoostTrainer as Trainer
    else:
        from tuneplat.train.lightgbm import LightGBMTrainer as Trainer
    grid = tune.Tuner(
        Trainer(_never_called, scaling_config=tune.ScalingConfig(num_workers=1)),
        param_space={"train_loop_config": {"x": 1.0}},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    scheduler=ResourceChangingScheduler(FIFOScheduler(), _grow_to(2))),
        run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0),
        executor=VirtualTimeExecutor(num_slots=4, curve=_curve(1))).fit()
    rows = grid[0].metrics_dataframe.to_dict("records")
    assert [m["ranks"] for m in rows] == [1, 1] + [2] * (STEPS - 2)
    t = load_state(os.path.join(storage, "rcs")).trials[0]
    assert t.placement_group_factory == PlacementGroupFactory([{}, {"CPU": 1}, {"CPU": 1}]) and t.world_size == 2


def test_trials_of_their_own_shapes_must_share_the_first_trials_as_in_ray(storage):
    # with_resources(fn, resources_fn): a trial's shape is known once it started; Ray refuses trials whose base
    # resources differ from the first trial's (here that trial fails, the others go on)
    fn = tune.with_resources(_never_called, lambda config: tune.ScalingConfig(num_workers=int(config["n"])))
    grid = tune.Tuner(
        fn, param_space={"n": tune.grid_search([2, 1, 2]), "x": 1.0},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1, scheduler=ResourceChangingScheduler(
            FIFOScheduler(), DistributeResources(add_bundles=True))),
        run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0),
        executor=VirtualTimeExecutor(num_slots=3, curve=_curve(1))).fit()
    by_n = {}
    for r in grid:
        by_n.setdefault(r.config["n"], []).append(r)
    assert all(r.error is None for r in by_n[2]), [str(r.error) for r in by_n[2]]
    assert {r.metrics["ranks"] for r in by_n[2]} == {3}  # (the 3 slots: one rank more, from its checkpoint)
    error = str(by_n[1][0].error)
    assert "varying base resources" in error and by_n[1][0].trial_id in error
    assert "PlacementGroupFactory([{}, {'CPU': 1.0}, {'CPU': 1.0}]" in error  # (the first trial's)


def test_an_allocation_function_that_raises_fails_that_trial_only(storage):
    def allocate(tune_controller, trial, result, scheduler):
        if _x(trial.config) == 2.0:
            raise ZeroDivisionError("a bug in the function")
        return None

    grid = _fit(storage, ResourceChangingScheduler(FIFOScheduler(), allocate), [1.0, 2.0], ranks=1, slots=4)
    by_x = {_x(r.config): r for r in grid}
    assert by_x[1.0].error is None and by_x[1.0].metrics["training_iteration"] == STEPS
    error = str(by_x[2.0].error)
    assert "raised ZeroDivisionError: a bug in the function" in error and by_x[2.0].trial_id in error
