"""Ray Train V2's user-guide API, ported by changing imports (issue 34): names, errors, callbacks, local mode,
accelerator types, job-level restarts, ``Result.filesystem``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import v2_trainables as V

import tuneplat
from tuneplat import train
from tuneplat.train.torch import TorchTrainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rc(storage, **kw):
    return train.RunConfig(storage_path=storage, verbose=0, mlflow=False, **kw)


def test_v2_module_paths_are_the_same_objects():
    from tuneplat.train.v2.api.callback import UserCallback
    from tuneplat.train.v2.api.config import FailureConfig, RunConfig, ScalingConfig
    from tuneplat.train.v2.api.context import TrainContext
    from tuneplat.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from tuneplat.train.v2.api.exceptions import ControllerError, TrainingFailedError, WorkerGroupError
    from tuneplat.train.v2.api.preemption import PreemptionInfo
    from tuneplat.train.v2.api.report_config import CheckpointConsistencyMode, CheckpointUploadMode
    from tuneplat.train.v2.api.reported_checkpoint import ReportedCheckpoint, ReportedCheckpointStatus
    from tuneplat.train.v2.api.result import Result
    from tuneplat.train.v2.api.train_fn_utils import get_all_reported_checkpoints, report
    from tuneplat.train.v2.torch.torch_trainer import TorchTrainer as V2TorchTrainer

    pairs = [(UserCallback, train.UserCallback), (FailureConfig, train.FailureConfig), (RunConfig, train.RunConfig),
             (ScalingConfig, train.ScalingConfig), (TrainContext, train.TrainContext),
             (DataParallelTrainer, train.DataParallelTrainer), (ControllerError, train.ControllerError),
             (TrainingFailedError, train.TrainingFailedError), (WorkerGroupError, train.WorkerGroupError),
             (PreemptionInfo, train.PreemptionInfo), (CheckpointConsistencyMode, train.CheckpointConsistencyMode),
             (CheckpointUploadMode, train.CheckpointUploadMode), (ReportedCheckpoint, train.ReportedCheckpoint),
             (ReportedCheckpointStatus, train.ReportedCheckpointStatus), (Result, tuneplat.Result),
             (get_all_reported_checkpoints, train.get_all_reported_checkpoints), (report, train.report),
             (V2TorchTrainer, TorchTrainer)]
    assert all(a is b for a, b in pairs)
    assert train.v2.api.config.ScalingConfig is train.ScalingConfig  # (train.v2 without importing it first)


def test_failure_config_takes_ray_v2s_preemption_options():
    fc = train.FailureConfig(relax_collectives_on_preemption=True, preemption_grace_s=120.0)
    assert (fc.relax_collectives_on_preemption, fc.preemption_grace_s, fc.controller_failure_limit) == (True, 120.0, -1)
    default = train.FailureConfig()
    assert (default.relax_collectives_on_preemption, default.preemption_grace_s) == (False, 0.0)  # Ray's defaults
    with pytest.raises(ValueError, match=r"`FailureConfig.preemption_grace_s` is -1.*seconds >= 0"):
        train.FailureConfig(preemption_grace_s=-1)
    with pytest.raises(ValueError, match=r"`FailureConfig.relax_collectives_on_preemption` is 'yes'"):
        train.FailureConfig(relax_collectives_on_preemption="yes")


def test_preemption_info_has_ray_v2s_node_fields():
    info = train.PreemptionInfo(None, {"tcp://b:1": [3, 2], "tcp://a:1": [0]})
    assert info.preempted_node_ids == ["tcp://a:1", "tcp://b:1"]
    assert info.preempted_ranks == [0, 2, 3]
    assert info.preempted_node_to_ranks == {"tcp://b:1": [3, 2], "tcp://a:1": [0]}


class Recorder(train.UserCallback):
    def __init__(self):
        self.reports, self.exceptions = [], []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append(([(m["step"], m["rank"]) for m in metrics], checkpoint is not None,
                             run_context.get_run_config().name, run_context.train_loop_config))

    def after_exception(self, run_context, worker_exceptions):
        self.exceptions.append({rank: str(exc).splitlines()[0] for rank, exc in worker_exceptions.items()})


def test_a_failing_rank_raises_worker_group_error_and_user_callbacks_see_reports_and_the_failure(dask_client,
                                                                                                 storage):
    rec = Recorder()
    trainer = TorchTrainer(V.rank_1_fails_at_step_2, train_loop_config={"failing_rank": 1},
                           scaling_config=train.ScalingConfig(num_workers=2),
                           run_config=_rc(storage, name="wge", callbacks=[rec]), client=dask_client)
    with pytest.raises(train.WorkerGroupError) as info:
        trainer.fit()
    err = info.value
    assert isinstance(err, train.TrainingFailedError)
    assert list(err.worker_failures) == [1]
    assert "ValueError: rank 1 broke at step 2" in str(err.worker_failures[1])
    assert str(err).startswith("Training failed due to worker errors:\n")
    # Ray V2's UserCallback: one after_report per report of the group (metrics[i]: rank i's), with the checkpoint
    assert rec.reports == [([(1, 0), (1, 1)], True, "wge", {"failing_rank": 1})]
    assert len(rec.exceptions) == 1 and list(rec.exceptions[0]) == [1]
    assert "rank 1 broke at step 2" in rec.exceptions[0][1]


def test_errors_outside_the_ranks_are_controller_errors():
    from tuneplat.train._errors import fit_error

    err = fit_error(tuneplat.TrialError("A trial needs 3 rank(s) with {CPU=1} each ..."))
    assert isinstance(err, train.ControllerError) and isinstance(err.controller_failure, tuneplat.TrialError)
    several = fit_error(tuneplat.TrialError("rank(s) [0, 2] did not reach report() of iteration 4 within 60s"))
    assert isinstance(several, train.WorkerGroupError) and sorted(several.worker_failures) == [0, 2]
    pre = fit_error(tuneplat.TrialError("preempted 2 times, more than FailureConfig(max_preemption_failures=1): x"))
    assert isinstance(pre, train.PreemptionError) and isinstance(pre.preemption_info, train.PreemptionInfo)


# ---------------------------------------------------------------- local mode
def _local_loop(config):
    import tuneplat.train as t

    assert t.get_checkpoint() is None
    ctx = t.get_context()
    for step in range(3):
        d = os.path.join(config["dir"], f"ckpt{step}")
        os.makedirs(d)
        t.report({"step": step, "pid": os.getpid(), "world": (ctx.get_world_rank(), ctx.get_world_size())},
                 checkpoint=t.Checkpoint.from_directory(d))
        assert t.get_checkpoint().path == d  # the last reported one (Ray's local mode)
    assert t.get_all_reported_checkpoints() == []
    return "returned"


def test_local_mode_runs_the_function_in_this_process_without_a_cluster(tmp_path, monkeypatch):
    import distributed

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    trainer = TorchTrainer(_local_loop, train_loop_config={"dir": str(tmp_path)},
                           scaling_config=train.ScalingConfig(num_workers=0))
    result = trainer.fit()
    assert result.metrics == {"step": 2, "pid": os.getpid(), "world": (0, 1)}
    assert result.checkpoint.path == str(tmp_path / "ckpt2") and result.return_value == "returned"
    with pytest.raises(ValueError):
        distributed.default_client()  # no cluster was started or connected to
    assert train.get_context().get_trial_id() is None  # the session is gone after fit()

    def broken(config):
        raise KeyError("nope")

    with pytest.raises(train.WorkerGroupError) as info:
        TorchTrainer(broken, scaling_config=train.ScalingConfig(num_workers=0)).fit()
    assert isinstance(info.value.worker_failures[0], KeyError)
    with pytest.raises(ValueError, match="local mode"):
        tuneplat.Tuner(_local_loop, scaling_config=train.ScalingConfig(num_workers=0))


# ---------------------------------------------------------------- accelerator_type
def test_accelerator_type_places_on_workers_with_that_resource_or_is_refused_naming_it(tmp_path):
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", resources={"CPU": 1, "accelerator_type:A100": 1})
        client = Client(cluster, set_as_default=False)
        try:
            ok = TorchTrainer(V.where_am_i, scaling_config=train.ScalingConfig(num_workers=1, accelerator_type="A100"),
                              run_config=_rc(str(tmp_path), name="a100"), client=client).fit()
            assert ok.metrics["rank"] == 0
            with pytest.raises(train.TrainingFailedError, match=r"accelerator_type:H100") as info:
                TorchTrainer(V.where_am_i, scaling_config=train.ScalingConfig(num_workers=1, accelerator_type="H100"),
                             run_config=_rc(str(tmp_path), name="h100"), client=client).fit()
            assert "ScalingConfig(accelerator_type='H100')" in str(info.value)
        finally:
            client.close()
            cluster.close()
    with pytest.raises(ValueError, match="not ported"):
        train.ScalingConfig(use_tpu=True)


# ---------------------------------------------------------------- job-level fault tolerance
_DRIVER = textwrap.dedent("""
    import os, signal, sys, threading, time
    sys.path.insert(0, {tests!r})
    import v2_trainables as V
    from tuneplat import train
    from tuneplat.train.torch import TorchTrainer

    def die_when_asked():
        while not os.path.exists({kill_file!r}):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die_when_asked, daemon=True).start()
    TorchTrainer(V.stops_its_driver, train_loop_config={{"driver_pid": os.getpid(), "kill_file": {kill_file!r}}},
                 scaling_config=train.ScalingConfig(num_workers=2),
                 run_config=train.RunConfig(storage_path={storage!r}, name="job", verbose=0, mlflow=False,
                                            address={address!r})).fit()
""")


def test_a_relaunched_driver_resumes_a_run_that_did_not_finish_and_sets_aside_a_finished_one(dask_client, storage,
                                                                                            tmp_path, caplog):
    script = _DRIVER.format(tests=os.path.dirname(os.path.abspath(__file__)), storage=storage,
                            address=dask_client.scheduler.address, kill_file=str(tmp_path / "kill"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-2000:]  # killed at step 2, as the training function asked
    run = os.path.join(storage, "job")

    def relaunch():
        return TorchTrainer(V.stops_its_driver, train_loop_config={},
                            scaling_config=train.ScalingConfig(num_workers=2),
                            run_config=_rc(storage, name="job"), client=dask_client).fit()

    journal = open(os.path.join(run, "journal.jsonl")).read()
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        result = relaunch()
    assert result.error is None, (caplog.text, journal)
    assert result.metrics["start"] == 1, (caplog.text, journal)
    assert (result.metrics["step"], result.metrics["start"]) == (4, 1)  # step 1's checkpoint, from get_checkpoint()
    assert "did not finish; it resumes" in caplog.text and run in caplog.text
    assert [json.loads(x)["result"]["step"] for x in open(os.path.join(run, "journal.jsonl"))
            if '"event": "result"' in x] == [1, 2, 3, 4]  # one run, continued
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        again = relaunch()  # finished: a new run starts afresh, the old one moves aside (as a Tuner's rerun)
    assert (again.metrics["step"], again.metrics["start"]) == (4, 0)
    assert "it moved, whole, to" in caplog.text
    assert sorted(n for n in os.listdir(storage) if n.startswith("job")) != ["job"]


def test_tuners_scaling_config_in_param_space_overrides_the_trainers(dask_client, storage):
    """Ray's Tuner guide: the trainer has ScalingConfig(num_workers=1); param_space's grid gives each trial its own."""
    trainer = TorchTrainer(V.where_am_i, scaling_config=train.ScalingConfig(num_workers=1))
    grid = tuneplat.Tuner(trainer, param_space={"scaling_config": train.ScalingConfig(
        num_workers=tuneplat.grid_search([1, 2]))}, run_config=_rc(storage, name="override"), client=dask_client).fit()
    assert grid.num_errors == 0
    assert sorted(res.metrics["world_size"] for res in grid) == [1, 2]


def test_result_from_path_hands_out_a_pyarrow_filesystem_after_a_bare_import_pyarrow(tmp_path):
    """Ray's results guide: ``import pyarrow`` then ``result.filesystem`` (a ``pyarrow.fs.FileSystem``)."""
    trial = tmp_path / "exp" / "trial_0"
    trial.mkdir(parents=True)
    (trial / "params.json").write_text('{"lr": 0.1}')
    (trial / "result.json").write_text('{"loss": 1.0, "training_iteration": 1}\n')
    code = textwrap.dedent(f"""
        import pyarrow
        from tuneplat.train import Result
        result = Result.from_path({str(trial)!r})
        fs = result.filesystem
        assert isinstance(fs, pyarrow.fs.FileSystem), type(fs)
        info = fs.get_file_info(result.path)
        print(type(fs).__name__, info.type == pyarrow.fs.FileType.Directory, result.metrics["loss"])
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["LocalFileSystem", "True", "1.0"]
