"""Ray Tune's class API (``tune.Trainable``) on a real Dask cluster: steps, done, checkpoints, retries, schedulers."""

from __future__ import annotations

import os

import port_class_trainables as C
import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.schedulers import ASHAScheduler, HyperBandScheduler, PopulationBasedTraining
from tuneplat.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig


def _fit(client, storage, trainable, space, name, *, run=None, **tc):
    tuner = tune.Tuner(trainable, param_space=space, tune_config=tune.TuneConfig(**tc),
                       run_config=RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **(run or {})),
                       client=client)
    return tuner.fit()


def _journal(results):
    return read_journal(os.path.join(results.experiment_path, "journal.jsonl"))


def _iterations(result):
    return [int(i) for i in result.metrics_dataframe["training_iteration"]]


def _checkpoint_iterations(result):
    return sorted(int(m["training_iteration"]) for _, m in result.best_checkpoints)


def test_steps_are_reported_with_training_iteration_and_done_ends_the_trial(dask_client, storage):
    results = _fit(dask_client, storage, C.Accumulator, {"x": 2.0, "steps": 4}, "cls-steps", metric="loss", mode="min")
    assert len(results) == 1 and results.num_errors == 0
    r = results[0]
    df = r.metrics_dataframe
    assert _iterations(r) == [1, 2, 3, 4]
    assert list(df["before_step"]) == [0, 1, 2, 3]  # self.iteration counts completed steps, as in Ray
    assert list(df["total"]) == [2.0, 4.0, 6.0, 8.0]
    assert r.metrics["done"] is True and r.status == "TERMINATED" and r.stop_reason == "the trial reported done=True"
    assert os.path.samefile(df["logdir"].iloc[0], r.path)  # self.logdir is the trial folder
    assert df["trial_name"].iloc[0]
    assert r.checkpoint is None and r.best_checkpoints == []  # no checkpoint asked for, none taken
    assert os.path.exists(os.path.join(r.path, "cleanup_4"))  # cleanup() ran at the end


def test_checkpoint_frequency_and_at_end_with_a_dict_checkpoint(dask_client, storage):
    results = _fit(dask_client, storage, C.Accumulator, {"x": 1.5, "steps": 5}, "cls-freq",
                   run={"checkpoint_config": CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True)},
                   metric="loss", mode="min")
    r = results[0]
    assert _iterations(r) == [1, 2, 3, 4, 5]
    assert _checkpoint_iterations(r) == [2, 4, 5]  # every 2 iterations, and at the end (done=True)
    assert os.path.basename(r.checkpoint.path) == "checkpoint_000005"
    # load_checkpoint gets back the dict save_checkpoint returned
    fresh = C.Accumulator({"x": 1.5})
    fresh.restore(r.checkpoint)
    assert fresh.total == 7.5 and fresh.loaded == (r.trial_id, 7.5) and fresh.iteration == 5


def test_checkpoint_at_end_on_a_stop_criterion_with_a_folder_checkpoint(dask_client, storage):
    results = _fit(dask_client, storage, C.Accumulator, {"x": 1.0, "ckpt": "dir", "checkpoint_at": 1}, "cls-end",
                   run={"checkpoint_config": CheckpointConfig(checkpoint_at_end=True),
                        "stop": {"training_iteration": 3}},
                   metric="loss", mode="min")
    r = results[0]
    # the trainable never said done; the stop criterion did, and Ray marks the result of a STOP decision done
    assert _iterations(r) == [1, 2, 3] and r.metrics["done"] is True
    assert _checkpoint_iterations(r) == [1, 3]  # should_checkpoint=True at 1, at the end (the stop criterion) at 3
    with r.checkpoint.as_directory() as d:
        assert os.path.isfile(os.path.join(d, "state.json"))
    fresh = C.Accumulator({})
    fresh.restore(r.checkpoint)  # load_checkpoint gets the folder save_checkpoint wrote into
    assert fresh.total == 3.0


def test_a_failed_trial_resumes_through_load_checkpoint(dask_client, storage, tmp_path):
    space = {"x": 1.0, "steps": 6, "fail_at": 4, "marker_dir": str(tmp_path)}
    results = _fit(dask_client, storage, C.Accumulator, space, "cls-retry",
                   run={"checkpoint_config": CheckpointConfig(checkpoint_frequency=2),
                        "failure_config": FailureConfig(max_failures=1)},
                   metric="loss", mode="min")
    assert results.num_errors == 0
    r = results[0]
    df = r.metrics_dataframe
    assert _iterations(r) == [1, 2, 3, 4, 5, 6]  # iteration 3 of the failed attempt is superseded
    assert list(df["total"]) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # the state went on from the checkpoint
    assert list(df["loads"]) == [0, 0, 1, 1, 1, 1]
    assert df["loaded_total"].iloc[-1] == 2.0
    starts = [e for e in _journal(results) if e["event"] == "trial_start"]
    assert [e["start_iteration"] for e in starts] == [0, 2]
    assert os.path.exists(os.path.join(r.path, "cleanup_3"))  # cleanup() also ran when step() failed


def test_pbt_clones_a_class_trainables_state(dask_client, storage):
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"x": [0.1, 0.5, 1.0, 2.0]}, quantile_fraction=0.5, seed=0,
                                  synch=True)  # every trial waits at each boundary: an exploit each time
    results = _fit(dask_client, storage, C.Accumulator, {"x": tune.grid_search([0.1, 1.0]), "steps": 12}, "cls-pbt",
                   metric="total", mode="max", scheduler=pbt)
    assert len(results) == 2 and results.num_errors == 0
    exploits = [e for e in _journal(results) if e["event"] == "exploit"]
    assert exploits, "PBT never exploited"
    frames = {r.trial_id: r.metrics_dataframe for r in results}
    checked = 0
    for r in results:
        assert _iterations(r) == list(range(1, 13))  # its own count goes on across exploits
        df = frames[r.trial_id]
        for ev in r.lineage:
            after = df[df["training_iteration"] == ev["iteration"] + 1]
            if not len(after):
                continue
            row = after.iloc[0]
            src = frames[ev["from_trial"]]
            src_row = src[src["training_iteration"] == ev["from_iteration"]].iloc[-1]
            # setup() ran with the explored config, then load_checkpoint() with the source's state at from_iteration
            assert row["loaded_owner"] == ev["from_trial"]
            assert row["loaded_total"] == pytest.approx(src_row["total"])
            assert row["x"] == ev["new_config"]["x"]
            assert row["total"] == pytest.approx(src_row["total"] + ev["new_config"]["x"])
            checked += 1
    assert checked


def test_asha_stops_class_trials_early_and_with_parameters_reaches_setup(dask_client, storage):
    floors = [0.5, 0.1, 0.8, 0.0, 0.6, 0.3, 0.9, 0.4]
    results = _fit(dask_client, storage, tune.with_parameters(C.Curve, scale=2.0),
                   {"floor": tune.grid_search(floors)}, "cls-asha",
                   run={"stop": {"training_iteration": 9}},
                   metric="loss", mode="min", scheduler=ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3))
    assert len(results) == 8 and results.num_errors == 0
    lengths = {r.config["floor"]: len(_iterations(r)) for r in results}
    assert lengths[0.0] == 9 and min(lengths.values()) < 9
    early = [r for r in results if len(_iterations(r)) < 9]
    assert all(r.stop_reason and "ASHA" in r.stop_reason for r in early)
    for r in results:
        df = r.metrics_dataframe
        assert list(df["own_step"]) == _iterations(r)
        assert list(df["loss"]) == pytest.approx([2.0 * (r.config["floor"] + 1.0 / s) for s in df["own_step"]])
        assert r.checkpoint is None  # ASHA never pauses: no checkpoint unless asked for
    assert results.get_best_result().config["floor"] == 0.0


def test_hyperband_pauses_and_resumes_class_trials_from_their_checkpoints(dask_client, storage):
    floors = [0.5, 0.1, 0.8, 0.3, 0.0, 0.9, 0.4, 0.7, 0.2]
    results = _fit(dask_client, storage, C.Curve, {"floor": tune.grid_search(floors)}, "cls-hb",
                   metric="loss", mode="min", scheduler=HyperBandScheduler(max_t=9, reduction_factor=3))
    assert len(results) == 9 and results.num_errors == 0
    journal = _journal(results)
    resumed = {e["trial_id"] for e in journal if e["event"] == "trial_resume"}
    assert resumed
    restarts = [e for e in journal if e["event"] == "trial_start" and e["start_iteration"] > 0]
    assert {e["trial_id"] for e in restarts} == resumed
    assert not [e for e in journal if e["event"] == "superseded" and e["count"]]
    for r in results:
        its = _iterations(r)
        assert its == list(range(1, len(its) + 1))
        assert list(r.metrics_dataframe["own_step"]) == its  # the state came back through load_checkpoint
    assert results.get_best_result().config["floor"] == 0.0


def test_a_class_trainable_outside_a_tuner_saves_and_restores(tmp_path):
    t = C.Accumulator({"x": 3.0, "ckpt": "dir"})
    assert t.trial_id == "default" and t.train()["training_iteration"] == 1
    folder = t.save(str(tmp_path / "ck"))
    other = C.Accumulator({"x": 3.0, "ckpt": "dir"})
    other.restore(folder)
    assert other.total == 3.0 and other.iteration == 1
    assert Checkpoint.from_directory(folder).get_metadata()["trainable"]["iteration"] == 1
    logdir = t.logdir  # outside a tuner: a temporary folder, gone once the trainable is stopped
    assert os.path.isdir(logdir)
    t.stop()
    other.stop()
    assert not os.path.exists(logdir)

    class Outside(tune.Trainable):
        def step(self):
            return [1]

        def save_checkpoint(self, checkpoint_dir):
            return "/elsewhere"

    with pytest.raises(TypeError, match=r"Outside.step\(\) must return a dict"):
        Outside({}).train()
    with pytest.raises(ValueError, match="inside the folder"):
        Outside({}).save(str(tmp_path / "x"))


def test_with_parameters_checks_setup_and_plain_classes_are_refused(storage):
    with pytest.raises(TypeError, match=r"setup\(config, data=...\)"):
        tune.with_parameters(C.Accumulator, data=[1])

    class NotATrainable:
        def step(self): ...

    with pytest.raises(TypeError, match="does not subclass tune.Trainable"):
        tune.Tuner(NotATrainable, run_config=RunConfig(storage_path=storage))
    with pytest.raises(TypeError, match="does not subclass tune.Trainable"):
        tune.with_resources(NotATrainable, {"cpu": 1})
    tuner = tune.Tuner(tune.with_resources(C.Accumulator, {"cpu": 1}), run_config=RunConfig(storage_path=storage))
    assert tuner.scaling_config.per_worker() == {"CPU": 1.0}


def test_tuner_restore_resumes_an_errored_class_trial_through_load_checkpoint(dask_client, storage, tmp_path):
    space = {"x": 2.0, "steps": 5, "fail_at": 4, "marker_dir": str(tmp_path)}
    run = {"checkpoint_config": CheckpointConfig(checkpoint_frequency=3)}
    first = _fit(dask_client, storage, C.Accumulator, space, "cls-restore", run=run, metric="loss", mode="min")
    assert first.num_errors == 1 and _checkpoint_iterations(first[0]) == [3]
    tuner = tune.Tuner.restore(os.path.join(storage, "cls-restore"), C.Accumulator, resume_errored=True,
                               client=dask_client)
    results = tuner.fit()
    assert results.num_errors == 0
    df = results[0].metrics_dataframe
    assert _iterations(results[0]) == [1, 2, 3, 4, 5] and list(df["total"]) == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert list(df["loads"])[-1] == 1 and results[0].metrics["done"] is True


def test_legacy_tune_run_with_a_class_and_checkpoint_freq(dask_client, storage):
    analysis = tune.run(C.Accumulator, config={"x": 1.0}, metric="total", mode="max", stop={"training_iteration": 4},
                        checkpoint_freq=2, checkpoint_at_end=True, storage_path=storage, name="cls-run", verbose=0,
                        client=dask_client)
    r = analysis.result_grid[0]
    assert _iterations(r) == [1, 2, 3, 4] and _checkpoint_iterations(r) == [2, 4]
    with pytest.raises(ValueError, match="one place"):
        tune.run(C.Accumulator, checkpoint_freq=2, checkpoint_config=CheckpointConfig(), storage_path=storage)
