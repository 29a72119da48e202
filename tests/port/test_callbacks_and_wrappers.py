"""Ray Tune callbacks, tune.with_parameters and tune.with_resources, written as a porting user writes them."""

from __future__ import annotations

import os

import port_trainables as P
import pytest

import tuneplat as tune
from tuneplat import train
from tuneplat.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig


class Recorder(tune.Callback):
    """Every hook, with Ray's signature, appends what it saw."""

    def __init__(self):
        self.events = []
        self.setup_args = None

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.setup_args = (stop, num_samples, total_num_samples)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.events.append(("start", trial.trial_id, str(trial.status)))

    def on_trial_restore(self, iteration, trials, trial, **info):
        self.events.append(("restore", trial.trial_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        assert trial in trials and trial.last_result == result  # (a copy: an edit here stays the callback's)
        self.events.append(("result", trial.trial_id, result["training_iteration"], iteration))

    def on_trial_save(self, iteration, trials, trial, **info):
        self.events.append(("save", trial.trial_id))

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        assert os.path.isdir(checkpoint.path)
        self.events.append(("checkpoint", trial.trial_id))

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.events.append(("recover", trial.trial_id))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.events.append(("error", trial.trial_id, trial.status == tune.TrialStatus.ERROR, trial.error))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.events.append(("complete", trial.trial_id, trial.status, dict(trial.config), trial.local_path,
                            trial.path, trial.logdir, trial.last_result.get("loss"), str(trial), trial.trainable_name))

    def on_experiment_end(self, trials, **info):
        self.events.append(("end", len(trials)))


def _tuner(client, storage, fn, space, callbacks=(), **tc):
    run = tc.pop("run", {})
    return tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(**tc),
                      run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False, callbacks=list(callbacks), **run),
                      client=client)


def test_ray_style_callback_sees_every_hook_with_rays_arguments(dask_client, storage, tmp_path):
    marker_dir = tmp_path / "m"
    marker_dir.mkdir()
    rec = Recorder()
    space = {"marker_dir": str(marker_dir), "name": tune.grid_search(["a", "b"]), "always_fail": False}
    results = _tuner(dask_client, storage, P.fails_once_then_checkpoints, space, callbacks=[rec],
                     metric="loss", mode="min",
                     run={"name": "cb", "failure_config": FailureConfig(max_failures=1)}).fit()
    assert results.num_errors == 0 and len(results) == 2
    assert rec.setup_args == (None, 1, 2)
    kinds = [e[0] for e in rec.events]
    assert kinds[-1] == "end" and rec.events[-1] == ("end", 2)
    for r in results:
        mine = [e for e in rec.events if len(e) > 1 and e[1] == r.trial_id]
        seq = [e[0] for e in mine]
        # attempt 1: results 1, 2 (with checkpoints), fails at step 2; retried from the checkpoint of step 1
        assert seq.count("start") == 2 and seq.count("recover") == 1 and seq.count("restore") == 1
        assert seq.index("recover") < seq.index("restore")
        assert seq.count("save") == seq.count("checkpoint") == 4
        assert seq[-1] == "complete"
        complete = mine[-1]
        _, tid, status, config, local_path, path, logdir, loss, name, trainable_name = complete
        assert status == "TERMINATED" and status == tune.TrialStatus.TERMINATED
        assert config["name"] == r.config["name"]
        assert local_path == path == logdir == r.path
        assert loss == r.metrics["loss"] == 7.0
        assert name.endswith(tid) and trainable_name == "fails_once_then_checkpoints"
    iterations = [e[3] for e in rec.events if e[0] == "result"]
    assert iterations == sorted(iterations)  # Ray's `iteration`: the tuner's step count, increasing


def test_callback_on_trial_error_not_complete(dask_client, storage, tmp_path):
    rec = Recorder()
    space = {"marker_dir": str(tmp_path), "name": "x", "always_fail": True}
    results = _tuner(dask_client, storage, P.fails_once_then_checkpoints, space, callbacks=[rec],
                     metric="loss", mode="min").fit()
    assert results.num_errors == 1
    errors = [e for e in rec.events if e[0] == "error"]
    assert len(errors) == 1 and errors[0][2] is True and "always fails" in errors[0][3]
    assert not [e for e in rec.events if e[0] == "complete"]


def test_a_callback_that_is_not_a_tune_callback_is_refused_at_once(storage):
    class NotACallback:
        def on_trial_result(self, iteration, trials, trial, result, **info): ...

    with pytest.raises(TypeError, match=r"callbacks\[0\].*tune.Callback"):
        tune.Tuner(P.objective, param_space={"x": 1},
                   run_config=RunConfig(storage_path=storage, callbacks=[NotACallback()]))


def test_trial_has_rays_status_constants():
    from tuneplat.core._trial import Trial

    t = Trial("abc_00003", {"lr": 0.01, "net": {"layers": 2}}, "/tmp/t", "objective_abc_00003")
    assert t.status == Trial.PENDING == "PENDING"
    assert t.experiment_tag == "3_lr=0.0100,layers=2"
    assert str(t) == "objective_abc_00003" and t.local_path == "/tmp/t"
    assert t.evaluated_params == {"lr": 0.01, "net/layers": 2}


# ---------------------------------------------------------------- with_parameters


def test_with_parameters_passes_objects_by_name(dask_client, storage):
    data = list(range(1000))
    trainable = tune.with_parameters(P.with_data, data=data, scale=2.0)
    results = _tuner(dask_client, storage, trainable, {"x": tune.grid_search([1.0, 3.0])},
                     metric="loss", mode="min", run={"name": "wp"}).fit()
    assert results.num_errors == 0
    best = results.get_best_result()
    assert best.config["x"] == 1.0 and best.metrics["loss"] == 2.0 * sum(data)
    assert best.metrics["n"] == 1000
    # get_context works inside a wrapped trainable
    assert best.metrics["trial_id"] == best.trial_id and best.metrics["trial_dir"] == best.path
    assert best.metrics["trial_name"].endswith(best.trial_id) and best.metrics["rank"] == 0
    assert os.path.basename(best.path).startswith("with_data_")  # named after the wrapped function


def test_with_parameters_gives_every_trial_its_own_copy(dask_client, storage):
    trainable = tune.with_parameters(P.mutates_data, data=[0, 0])
    results = _tuner(dask_client, storage, trainable, {"i": tune.grid_search(list(range(4)))},
                     metric="loss", mode="min", max_concurrent_trials=1).fit()
    assert [r.metrics["loss"] for r in results] == [2.0] * 4


def test_with_parameters_bad_input_is_refused_plainly():
    with pytest.raises(TypeError, match=r"cannot be called as fn\(config, missing=...\)"):
        tune.with_parameters(P.objective, missing=1)
    with pytest.raises(ValueError, match="already has parameters"):
        tune.with_parameters(tune.with_parameters(P.with_data, data=[1]), scale=2.0)
    with pytest.raises(TypeError, match="TorchTrainer"):
        tune.with_parameters(tune.TorchTrainer(P.objective), data=[1])
    import threading

    with pytest.raises(TypeError, match="cannot be pickled"):
        tune.with_parameters(P.with_data, data=threading.Lock())


def test_with_parameters_without_keywords_is_the_trainable_unchanged():
    # Ray's PyTorch/CIFAR guide starts with tune.with_parameters(train_cifar) and adds data later
    seen = []
    wrapped = tune.with_parameters(lambda config: seen.append(config))
    wrapped({"a": 1})
    assert seen == [{"a": 1}]
    sized = tune.with_parameters(tune.with_resources(P.objective, {"cpu": 1}))
    assert sized._tuneplat_resources.per_worker() == {"CPU": 1.0}


def test_with_parameters_called_directly_runs_the_function():
    seen = {}

    def fn(config, data=None):
        seen["v"] = (config, data)

    tune.with_parameters(fn, data=[1, 2])({"a": 1})
    assert seen["v"] == ({"a": 1}, [1, 2])


# ---------------------------------------------------------------- with_resources


def test_with_resources_dict_sets_every_trials_request(storage):
    tuner = tune.Tuner(tune.with_resources(P.objective, {"cpu": 2, "gpu": 0.5, "memory": 10**9, "custom": 1}),
                       param_space={"x": 1}, run_config=RunConfig(storage_path=storage))
    assert tuner.scaling_config.num_workers == 1
    assert tuner.scaling_config.per_worker() == {"CPU": 2.0, "GPU": 0.5, "custom": 1.0}
    sc = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1})
    tuner = tune.Tuner(tune.with_resources(P.objective, sc), param_space={"x": 1},
                       run_config=RunConfig(storage_path=storage))
    assert tuner.scaling_config is sc


def test_with_resources_and_with_parameters_compose_in_either_order(dask_client, storage):
    a = tune.with_resources(tune.with_parameters(P.with_data, data=[1, 2]), {"cpu": 1})
    b = tune.with_parameters(tune.with_resources(P.with_data, {"cpu": 1}), data=[1, 2])
    for i, trainable in enumerate((a, b)):
        results = _tuner(dask_client, storage, trainable, {"x": 1.0}, metric="loss", mode="min",
                         run={"name": f"compose{i}"}).fit()
        assert results.num_errors == 0 and results[0].metrics["loss"] == 3.0


def test_with_resources_that_never_fit_are_refused_with_the_cluster_described(dask_client, storage):
    tuner = _tuner(dask_client, storage, tune.with_resources(P.objective, {"cpu": 4}), {"x": 1})
    with pytest.raises(tune.PlacementError, match=r"CPU=4"):
        tuner.fit()


def test_with_resources_bad_input_is_refused_plainly(storage):
    with pytest.raises(ValueError, match=r"resources\['cpu'\]` is -1"):
        tune.with_resources(P.objective, {"cpu": -1})
    with pytest.raises(TypeError, match="dict like"):
        tune.with_resources(P.objective, [{"CPU": 1}])
    with pytest.raises(ValueError, match="scaling_config= as well"):
        tune.Tuner(tune.with_resources(P.objective, {"cpu": 1}), param_space={"x": 1},
                   scaling_config=ScalingConfig(), run_config=RunConfig(storage_path=storage))


def test_with_resources_sizes_the_embedded_cluster(storage):
    """No cluster given: {"cpu": k} makes worker processes of k CPUs, so the trial fits (as in Ray)."""
    cores = os.cpu_count() or 1
    if cores < 2:
        pytest.skip("needs 2 cores")
    results = tune.Tuner(
        tune.with_resources(P.objective, {"cpu": 2}), param_space={"x": tune.grid_search([1.0, 2.0]), "steps": 1},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=train.RunConfig(storage_path=storage, verbose=0, mlflow=False),
    ).fit()
    assert results.num_errors == 0 and results.num_terminated == 2


def test_with_resources_survives_restore(dask_client, storage):
    trainable = tune.with_resources(P.objective, {"cpu": 1})
    tuner = _tuner(dask_client, storage, trainable, {"x": 1.0}, metric="loss", mode="min", run={"name": "wr-restore"})
    tuner.fit()
    restored = tune.Tuner.restore(os.path.join(storage, "wr-restore"), trainable, client=dask_client)
    assert restored.scaling_config.per_worker() == {"CPU": 1.0}
    assert CheckpointConfig  # imported from tuneplat.train as in Ray


def test_a_class_trainable_is_refused_with_the_way_to_port_it(storage):
    class MyTrainable:
        def setup(self, config): ...

        def step(self): ...

    with pytest.raises(TypeError, match="class MyTrainable.*function trainables"):
        tune.Tuner(MyTrainable, param_space={"x": 1}, run_config=RunConfig(storage_path=storage))
