"""One test per Ray spelling a ported script may use (issue: older spellings, paths and names)."""

from __future__ import annotations

import csv
import importlib
import json
import os
import warnings

import port_spellings as S
import pytest

import tuneplat
from tuneplat import tune
from tuneplat.train import RunConfig


def rc(storage, **kw):
    return RunConfig(storage_path=storage, verbose=0, mlflow=False, **kw)


def test_ray_module_paths_are_tuneplats_modules():
    import tuneplat.search.optuna as real

    alias = importlib.import_module("tuneplat.tune.search.optuna")
    assert alias is real and alias.__spec__.name == "tuneplat.search.optuna"
    from tuneplat.tune.result import SHOULD_CHECKPOINT
    from tuneplat.tune.schedulers import ASHAScheduler
    assert ASHAScheduler is tuneplat.schedulers.ASHAScheduler and SHOULD_CHECKPOINT == "should_checkpoint"
    assert tune.Tuner is tuneplat.Tuner and tune.result.TRAINING_ITERATION == "training_iteration"
    from tuneplat.air import CheckpointConfig, FailureConfig, ScalingConfig
    from tuneplat.air import RunConfig as AirRunConfig
    assert (AirRunConfig, CheckpointConfig, FailureConfig, ScalingConfig) == (
        tuneplat.RunConfig, tuneplat.CheckpointConfig, tuneplat.FailureConfig, tuneplat.ScalingConfig)
    from tuneplat.air.integrations.mlflow import MLflowLoggerCallback as B
    from tuneplat.logger.mlflow import MLflowLoggerCallback as A
    assert A is B
    with pytest.raises(ImportError):
        importlib.import_module("tuneplat.tune.no_such_module")


def test_keyword_report_warns_once_naming_the_new_form(dask_client, storage):
    grid = tune.Tuner(S.keyword_report, param_space={"x": tune.grid_search([1.0, 2.0])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"), run_config=rc(storage),
                      client=dask_client).fit()
    assert sorted(r.metrics["loss"] for r in grid) == [1.0, 2.0]
    assert all(r.metrics["iterations"] == 2 for r in grid)
    # the warning itself, where the user code runs (a fake session: report() needs one)
    from tuneplat.train import _session

    class Fake:
        def report(self, metrics, checkpoint=None):
            self.got = metrics

    fake = Fake()
    _session._set_session(fake)  # type: ignore[arg-type]
    _session._warned_keywords = False
    try:
        with pytest.warns(DeprecationWarning, match=r"tune\.report\(\{'loss': \.\.\., 'iterations': \.\.\.\}\)"):
            tune.report(loss=1.0, iterations=3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tune.report(loss=2.0)  # shown once per process
        assert fake.got == {"loss": 2.0}
    finally:
        _session._set_session(None)


def test_number_report_is_default_metric(dask_client, storage):
    grid = tune.Tuner(S.number_report, param_space={"x": 3.0}, run_config=rc(storage), client=dask_client).fit()
    assert grid[0].metrics[tuneplat.result.DEFAULT_METRIC] == 6.0


def test_air_session_report_and_checkpoint(dask_client, storage):
    grid = tune.Tuner(S.air_session, run_config=rc(storage), client=dask_client).fit()
    r = grid[0]
    assert r.metrics["n"] == 1 and r.metrics["trial"] == r.trial_id and (r.metrics["rank"], r.metrics["size"]) == (0, 1)
    assert r.checkpoint is not None


def test_train_torch_without_importing_the_submodule(dask_client, storage):
    grid = tune.Tuner(S.lazy_torch_attribute, run_config=rc(storage), client=dask_client).fit()
    assert grid[0].metrics["params"] == 3


def test_init_sizes_the_embedded_cluster(storage):
    from tuneplat.execution._cluster import Cluster

    tuneplat.init(num_cpus=1, num_gpus=0)
    try:
        assert tuneplat.is_initialized()
        with pytest.raises(RuntimeError, match="already called"):
            tuneplat.init(num_cpus=1)
        assert tuneplat.init(num_cpus=1, ignore_reinit_error=True)["num_cpus"] == 1
        cluster = Cluster()
        try:
            assert len(cluster.workers()) == 1 and cluster.local_gpus == 0
        finally:
            cluster.close()
    finally:
        tuneplat.shutdown()
    assert not tuneplat.is_initialized()
    with pytest.raises(TypeError, match="unexpected argument"):
        tuneplat.init(num_cpu=2)
    with pytest.raises(ValueError, match="num_cpus"):
        tuneplat.init(num_cpus=-1)


def test_placement_group_factory_and_resource_functions():
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2, "GPU": 0}])
    wrapped = tune.with_resources(S.number_report, pgf)
    from tuneplat.trainables._wrappers import resources_of

    sc = resources_of(wrapped)
    assert sc.num_workers == 1 and sc.per_worker() == {"CPU": 3.0}
    assert resources_of(tune.with_resources(S.number_report, lambda config: {"cpu": config["n"]})) is None
    with pytest.raises(ValueError, match="bundles"):
        tune.PlacementGroupFactory([])


def test_points_to_evaluate_with_a_grid_as_rays_docstring(dask_client, storage):
    """Ray's BasicVariantGenerator docstring: three points, a grid over a, num_samples=4: six trials."""
    from tuneplat.search import BasicVariantGenerator

    searcher = BasicVariantGenerator(points_to_evaluate=[{"a": 2, "b": 2}, {"a": 1}, {"b": 2}])
    grid = tune.Tuner(S.number_report, param_space={"a": tune.grid_search([1, 2]), "b": tune.randint(0, 3), "x": 1.0},
                      tune_config=tune.TuneConfig(search_alg=searcher, num_samples=4), run_config=rc(storage),
                      client=dask_client).fit()
    configs = [(r.config["a"], r.config["b"]) for r in sorted(grid, key=lambda r: r.trial_id)]
    assert len(configs) == 6
    assert configs[0] == (2, 2) and configs[1][0] == 1 and configs[2:4] == [(1, 2), (2, 2)]
    assert [a for a, _ in configs[4:]] == [1, 2]


def test_scaling_config_in_param_space(dask_client, storage):
    trainer = tune.TorchTrainer(S.trainer_loop, scaling_config=tuneplat.ScalingConfig(num_workers=1))
    tuner = tune.Tuner(trainer, param_space={"scaling_config": tuneplat.ScalingConfig(num_workers=2),
                                             "train_loop_config": {"epochs": 1}},
                       run_config=rc(storage), client=dask_client)
    assert tuner.scaling_config.num_workers == 2 and "scaling_config" not in tuner.param_space
    assert tuneplat.ScalingConfig(num_workers=tune.grid_search([1, 2])).has_search_domains()
    with pytest.raises(TypeError, match="must be a ScalingConfig"):
        tune.Tuner(trainer, param_space={"scaling_config": {"num_workers": 2}}, run_config=rc(storage))


def test_trial_names_in_table_and_folders(dask_client, storage, capsys):
    grid = tune.Tuner(S.number_report, param_space={"x": tune.grid_search([1.0, 2.0])},
                      tune_config=tune.TuneConfig(trial_name_creator=lambda t: f"run-x{t.config['x']:g}",
                                                  trial_dirname_creator=lambda t: f"dir-{t.config['x']:g}"),
                      run_config=RunConfig(storage_path=storage, verbose=2, mlflow=False),
                      client=dask_client).fit()
    table = capsys.readouterr().out.split("== Status")[-1]
    assert "run-x1" in table and "run-x2" in table
    assert sorted(os.path.basename(r.path) for r in grid) == ["dir-1", "dir-2"]


def test_per_trial_files_and_result_from_path(dask_client, storage):
    grid = tune.Tuner(S.keyword_report, param_space={"x": 1.0}, run_config=rc(storage, name="files"),
                      client=dask_client).fit()
    path = grid[0].path
    with open(os.path.join(path, "progress.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["loss"]) for r in rows] == [3.0, 2.0, 1.0]
    assert len(open(os.path.join(path, "result.json")).read().splitlines()) == 3
    assert any(n.startswith("events.out.tfevents.") for n in os.listdir(path))
    again = tune.Result.from_path(path)
    assert again.config == {"x": 1.0} and again.metrics["loss"] == 1.0 and again.status == "TERMINATED"
    assert len(again.metrics_dataframe) == 3
    with pytest.raises(FileNotFoundError):
        tune.Result.from_path(os.path.join(storage, "files", "nope"))


def test_torch_trainer_restore_continues_from_the_checkpoint(dask_client, storage, tmp_path):
    marker = str(tmp_path / "failed-once")
    trainer = tune.TorchTrainer(S.trainer_loop, train_loop_config={"epochs": 3, "fail_at": 1, "marker": marker},
                                run_config=rc(storage, name="restore"), client=dask_client)
    with pytest.raises(tuneplat.train.TrainingFailedError):
        trainer.fit()
    path = os.path.join(storage, "restore")
    assert tune.TorchTrainer.can_restore(path) and os.path.isfile(os.path.join(path, "trainer.pkl"))
    restored = tune.TorchTrainer.restore(path)
    restored.client = dask_client
    result = restored.fit()
    assert result.metrics["epoch"] == 2 and result.metrics["training_iteration"] == 3
    assert not tune.TorchTrainer.can_restore(str(tmp_path / "nothing"))


def test_data_parallel_trainer_and_unported_arguments():
    assert issubclass(tune.TorchTrainer, tuneplat.train.DataParallelTrainer)
    with pytest.raises(TypeError, match="a dataset must be a dask.dataframe.DataFrame"):  # docs/data-ingest.md
        tuneplat.train.DataParallelTrainer(S.trainer_loop, datasets={"train": [1, 2]})
    with pytest.raises(TypeError, match="resume_from_checkpoint=...\\) takes a tuneplat Checkpoint"):
        tune.TorchTrainer(S.trainer_loop, resume_from_checkpoint="/tmp")


def test_mlflow_logger_callback_aims_the_mirror(tmp_path):
    from tuneplat.air.integrations.mlflow import MLflowLoggerCallback, mirror_config

    cb = MLflowLoggerCallback(tracking_uri="sqlite:///x.db", experiment_name="e", tags={"k": 1}, save_artifact=True)
    out = mirror_config(RunConfig(mlflow=False, callbacks=[cb]))
    assert (out.mlflow.tracking_uri, out.mlflow.experiment_name, out.mlflow.log_checkpoints, dict(out.mlflow.tags)) \
        == ("sqlite:///x.db", "e", True, {"k": "1"})
    with pytest.raises(ValueError, match="disagree"):
        mirror_config(RunConfig(mlflow=tuneplat.MLflowConfig(experiment_name="other"), callbacks=[cb]))
    with pytest.raises(ValueError, match="several"):
        mirror_config(RunConfig(callbacks=[cb, MLflowLoggerCallback()]))
    assert json.dumps  # (module used above)


def test_setup_mlflow_logs_into_the_mirrors_run_named_by_the_name_creator(dask_client, storage, monkeypatch):
    """MLflowLoggerCallback aims the mirror; setup_mlflow in the trial gets the mirror's child run: one run per trial."""
    import mlflow

    from tuneplat.air.integrations.mlflow import MLflowLoggerCallback

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{os.path.abspath(storage)}/mlflow.db")  # (MLflow's default)

    grid = tune.Tuner(S.logs_to_its_mlflow_run, param_space={"x": tune.grid_search([1.0, 2.0])},
                      tune_config=tune.TuneConfig(trial_name_creator=lambda t: f"run-x{t.config['x']:g}"),
                      run_config=RunConfig(storage_path=storage, verbose=0, name="named", mlflow=False,
                                           callbacks=[MLflowLoggerCallback(experiment_name="named-exp")]),
                      client=dask_client).fit()
    assert grid.num_errors == 0
    client = mlflow.MlflowClient(f"sqlite:///{os.path.abspath(storage)}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("named-exp").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["named", "run-x1", "run-x2"]  # no run made twice
    by_name = {r.info.run_name: r for r in runs}
    for r in grid:
        run = by_name[f"run-x{r.config['x']:g}"]
        assert r.metrics["run_id"] == run.info.run_id  # the trial's active run was the mirror's child run
        assert [m.value for m in client.get_metric_history(run.info.run_id, "inner")] == [0.0, r.config["x"]]
        assert run.info.status == "FINISHED"
    target = os.path.join(storage, "named", "mlflow_target.json")
    assert oct(os.stat(target).st_mode & 0o777) == "0o600"


def test_results_carry_rays_auto_filled_keys(dask_client, storage):
    """A ported script reads ``result.metrics["config"]``, ``["done"]``, ``["date"]``, ``["node_ip"]`` or
    ``["time_since_restore"]`` as Ray fills them, in ``Result.metrics`` and in each ``result.json`` line; the
    names come from installed Ray's own list when it is there."""
    try:
        from ray.tune.result import AUTO_RESULT_KEYS
    except ImportError:  # the bench extra is not installed: the list as Ray 2.60 has it
        AUTO_RESULT_KEYS = ("training_iteration", "time_total_s", "episodes_total", "timesteps_total", "node_ip",
                            "hostname", "pid", "time_this_iter_s", "timestamp", "date", "time_since_restore",
                            "timesteps_since_restore", "iterations_since_restore", "config", "checkpoint_dir_name")
    # RLlib's counters (episodes, timesteps) are not filled (docs/porting-from-ray.md)
    expected = set(AUTO_RESULT_KEYS) - {"episodes_total", "timesteps_total", "timesteps_since_restore"}
    grid = tune.Tuner(S.number_report, param_space={"x": tune.grid_search([3.0, 4.0])}, run_config=rc(storage),
                      client=dask_client).fit()
    for r in grid:
        assert expected <= set(r.metrics), expected - set(r.metrics)
        assert r.metrics["config"] == r.config and r.metrics["done"] is True
        assert r.metrics["node_ip"] == "127.0.0.1" and r.metrics["time_since_restore"] >= 0
        with open(os.path.join(r.path, "result.json"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        assert lines and all(expected <= set(line) for line in lines)
        assert all(line["config"] == r.config and line["done"] is False for line in lines)
        assert tuneplat.Result.from_path(r.path).metrics["config"] == r.config
        assert r.metrics["checkpoint_dir_name"] is None  # (no checkpoint reported)
    grid = tune.Tuner(S.air_session, run_config=rc(storage), client=dask_client).fit()
    with open(os.path.join(grid[0].path, "result.json"), encoding="utf-8") as f:
        names = [json.loads(line)["checkpoint_dir_name"] for line in f]
    kept = [os.path.basename(c.path) for c, _ in grid[0].best_checkpoints]
    assert names == kept and len(set(names)) == 2, (names, kept)  # each result names the checkpoint it carried
    assert grid[0].metrics["checkpoint_dir_name"] == os.path.basename(grid[0].checkpoint.path)
