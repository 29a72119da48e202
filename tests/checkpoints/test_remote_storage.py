"""storage_path on a remote fsspec filesystem (S3 through s3fs, against a real S3 server on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import ckpt_trainables as T
import pytest

import tuneplat as tune
from tuneplat.storage._checkpoint import load_torch
from tuneplat.storage._storage import (
    MANIFEST,
    remote_clean_staging,
    remote_commit_checkpoint,
    remote_stage_checkpoint,
    resolve_storage,
)


def _rc(fs, url, **kw):
    return tune.RunConfig(storage_path=f"{url}/results", storage_filesystem=fs, verbose=0, mlflow=False, **kw)


def _names(fs, url):
    return sorted(p.rsplit("/", 1)[-1] for p in fs.ls(url, detail=False))


def _state(ckpt):
    with ckpt.as_directory() as d:
        return json.load(open(os.path.join(d, "state.json")))


# ---------------------------------------------------------------- the commit protocol on S3
def test_commit_publishes_whole_checkpoints_and_cleans_what_a_crash_left(s3, tmp_path):
    fs, url = s3
    trial = f"{url}/exp/trial_0"
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "model.bin").write_bytes(os.urandom(300_000))
    (src / "sub" / "opt.bin").write_bytes(b"x" * 10)
    remote_stage_checkpoint(fs, str(src), trial, "checkpoint_000001")
    assert not fs.exists(f"{trial}/checkpoint_000001")  # nothing under the final name before the commit
    final = remote_commit_checkpoint(fs, trial, "checkpoint_000001")
    assert final == f"{trial}/checkpoint_000001"
    manifest = json.loads(fs.cat_file(f"{final}/{MANIFEST}"))
    assert manifest["files"] == {"model.bin": 300_000, "sub/opt.bin": 10}
    ck = tune.Checkpoint(final, fs)
    out = ck.to_directory(str(tmp_path / "out"))
    assert (tmp_path / "out" / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    assert not (tmp_path / "out" / MANIFEST).exists()
    # a crash left: a half-uploaded staging folder and a moved-but-not-committed folder (no manifest)
    remote_stage_checkpoint(fs, str(src), trial, "checkpoint_000002")
    fs.pipe_file(f"{trial}/checkpoint_000003/model.bin", b"partial")
    with pytest.raises(FileNotFoundError, match="no longer exists"):
        tune.Checkpoint(f"{trial}/checkpoint_000003", fs).to_directory(str(tmp_path / "never"))
    remote_clean_staging(fs, trial)
    assert _names(fs, trial) == ["checkpoint_000001"]
    assert out == str(tmp_path / "out")
    assert remote_commit_checkpoint(fs, trial, "checkpoint_000009") is None  # nothing staged


def test_bad_storage_settings_say_what_to_do():
    with pytest.raises(ValueError, match="fsspec cannot open nosuchproto://"):
        resolve_storage("nosuchproto://bucket/results")
    with pytest.raises(ValueError, match="must be an fsspec filesystem"):
        resolve_storage("s3://b/r", storage_filesystem=object())
    with pytest.raises(ValueError, match="storage_path is not"):
        import fsspec

        resolve_storage(None, storage_filesystem=fsspec.filesystem("memory"))


# ---------------------------------------------------------------- end to end on S3
def test_sweep_on_s3_keeps_checkpoints_there_with_retention(dask_client, s3, cache_dir):
    fs, url = s3
    scores = {"1": 5.0, "2": 1.0, "3": 4.0, "4": 2.0, "5": 3.0}
    tuner = tune.Tuner(T.counts_with_checkpoints, param_space={"steps": 5, "scores": scores},
                       tune_config=tune.TuneConfig(metric="score", mode="max"),
                       run_config=_rc(fs, url, name="exp", checkpoint_config=tune.CheckpointConfig(
                           num_to_keep=2, checkpoint_score_attribute="score")),
                       client=dask_client)
    results = tuner.fit()
    (r,) = results
    assert r.error is None, r.error
    assert results.experiment_path == f"{url}/results/exp"
    assert r.path.startswith(f"{url}/results/exp/") and r.fsspec_filesystem is fs
    # Ray's Result.filesystem is a pyarrow filesystem (here the fsspec one, wrapped), and it reads the trial folder
    import pyarrow

    assert isinstance(r.filesystem, pyarrow.fs.PyFileSystem)
    assert r.filesystem.get_file_info(r.path.split("://", 1)[1]).type == pyarrow.fs.FileType.Directory
    fs.invalidate_cache()
    names = [n for n in _names(fs, r.path)  # (Ray's TensorBoard file; the metrics kept beside each checkpoint)
             if not n.startswith(("events.out.tfevents.", "."))]
    assert names == ["checkpoint_000001", "checkpoint_000003", "checkpoint_000005", "params.json", "progress.csv",
                     "result.json"]
    assert r.checkpoint.path == f"{r.path}/checkpoint_000005" and r.checkpoint.filesystem is fs
    assert _state(r.checkpoint)["step"] == 5
    assert [m["score"] for _, m in r.best_checkpoints] == [5.0, 4.0, 3.0]
    # the experiment's own files were uploaded: the remote copy alone is enough to restore
    assert {"journal.jsonl", "tuner.pkl"} <= set(_names(fs, f"{url}/results/exp"))
    assert len(fs.cat_file(f"{r.path}/result.json").decode().splitlines()) == 5
    # checkpoints never touched the local cache
    assert not [p for p in (cache_dir).rglob("checkpoint_*")]


def test_retry_resumes_from_the_remote_checkpoint(dask_client, s3, cache_dir):
    fs, url = s3
    tuner = tune.Tuner(T.counts_with_checkpoints, param_space={"steps": 5, "fail_at": 4},
                       run_config=_rc(fs, url, failure_config=tune.FailureConfig(max_failures=1)),
                       client=dask_client)
    (r,) = tuner.fit()
    assert r.error is None and r.metrics["step"] == 5
    assert _state(r.checkpoint) == {"step": 5, "resumed_from": 3}  # the retry got checkpoint 3 from S3


def test_two_rank_shards_land_in_one_remote_checkpoint(dask_client, s3, cache_dir):
    fs, url = s3
    tuner = tune.Tuner(T.sharded, run_config=_rc(fs, url, failure_config=tune.FailureConfig(max_failures=1)),
                       scaling_config=tune.ScalingConfig(num_workers=2), client=dask_client)
    (r,) = tuner.fit()
    assert r.error is None, r.error
    assert r.metrics["seen"] == "shard_0.json,shard_1.json"  # after the retry, each rank saw both shards
    with r.checkpoint.as_directory() as d:
        assert sorted(os.listdir(d)) == ["shard_0.json", "shard_1.json"]


def test_torch_checkpoint_on_s3_loads_with_weights_only(dask_client, s3, cache_dir, s3_endpoint, monkeypatch):
    import torch

    fs, url = s3
    (r,) = tune.Tuner(T.saves_torch, param_space={"k": 2.0}, run_config=_rc(fs, url), client=dask_client).fit()
    assert torch.equal(load_torch(r.checkpoint)["w"], torch.arange(4.0) * 2.0)
    # a URL alone: fsspec builds the filesystem from its usual configuration (here AWS_* variables)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    again = tune.Checkpoint.from_directory(r.checkpoint.path)
    assert again.path == r.checkpoint.path and again.filesystem is not fs
    assert torch.equal(load_torch(again)["w"], torch.arange(4.0) * 2.0)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        tune.Checkpoint.from_directory(f"{r.path}/checkpoint_999999")


def test_restore_from_the_s3_url_on_a_machine_without_the_cache(dask_client, s3, cache_dir):
    fs, url = s3
    tuner = tune.Tuner(T.counts_with_checkpoints, param_space={"steps": 5, "fail_at": 4},
                       run_config=_rc(fs, url, name="crashy"), client=dask_client)
    (r,) = tuner.fit()
    assert r.error is not None and r.metrics["step"] == 3
    shutil.rmtree(cache_dir)  # another machine: only S3 has the experiment
    exp_url = f"{url}/results/crashy"
    assert tune.Tuner.can_restore(exp_url, storage_filesystem=fs)
    assert not tune.Tuner.can_restore(f"{url}/results/nothing", storage_filesystem=fs)
    restored = tune.Tuner.restore(exp_url, T.counts_with_checkpoints, storage_filesystem=fs, resume_errored=True,
                                  client=dask_client)
    (r2,) = restored.fit()
    assert r2.error is None and r2.metrics["step"] == 5
    assert _state(r2.checkpoint) == {"step": 5, "resumed_from": 3}
    assert [res["step"] for res in r2.metrics_dataframe.to_dict("records")] == [1, 2, 3, 4, 5]
    with tempfile.TemporaryDirectory() as d:
        fs.get_file(f"{exp_url}/journal.jsonl", os.path.join(d, "j"))
        events = [json.loads(line)["event"] for line in open(os.path.join(d, "j"))]
    assert events.count("experiment") == 2  # the resumed run's journal was uploaded too


def test_mlflow_logs_remote_checkpoints_as_artifacts(dask_client, s3, cache_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    fs, url = s3
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    rc = tune.RunConfig(storage_path=f"{url}/results", storage_filesystem=fs, verbose=0,
                        mlflow=tune.MLflowConfig(tracking_uri=uri, experiment_name="remote-ckpts"))
    (r,) = tune.Tuner(T.counts_with_checkpoints, param_space={"steps": 2}, run_config=rc, client=dask_client).fit()
    assert r.error is None and r.mlflow_run_id
    client = MlflowClient(tracking_uri=uri)
    logged = sorted(a.path for a in client.list_artifacts(r.mlflow_run_id, "checkpoints"))
    assert logged == ["checkpoints/checkpoint_000001", "checkpoints/checkpoint_000002"]
    files = [a.path for a in client.list_artifacts(r.mlflow_run_id, "checkpoints/checkpoint_000002")]
    assert files == ["checkpoints/checkpoint_000002/state.json"]  # the manifest stays out


def test_pbt_clones_checkpoints_on_s3(dask_client, s3, cache_dir):
    from tuneplat.schedulers import PopulationBasedTraining

    fs, url = s3
    # synch: the trials wait for each other at every boundary, so the weaker one is cloned at iteration 2 and runs on
    # from the clone (asynchronous PBT clones when the two happen to be at a boundary together, under load maybe
    # only at the last iteration, with no iteration after the clone to check)
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, hyperparam_mutations={"lr": [0.1, 0.5, 1.0]},
                                  quantile_fraction=0.5, seed=0, synch=True)
    results = tune.Tuner(T.pbt_accumulate, param_space={"lr": tune.grid_search([0.1, 1.0]), "steps": 6},
                         tune_config=tune.TuneConfig(metric="acc", mode="max", scheduler=pbt),
                         run_config=_rc(fs, url, name="pbt"), client=dask_client).fit()
    assert results.num_errors == 0
    clones = [ev for r in results for ev in r.lineage]
    assert clones, "PBT never exploited"
    checked = 0
    for r in results:
        for ev in r.lineage:
            # the clone is a committed checkpoint of the exploiting trial, on S3, written by the source trial
            df = r.metrics_dataframe
            after = df[df["training_iteration"] == ev["iteration"] + 1]
            if len(after):
                assert after.iloc[0]["came_from"] == ev["from_trial"]
                checked += 1
        assert r.checkpoint.path.startswith(f"{url}/results/pbt/")
        assert fs.exists(f"{r.checkpoint.path}/{MANIFEST}")
    assert checked >= 1


def test_a_new_run_with_the_same_name_on_s3_keeps_the_old_journal(dask_client, s3, cache_dir):
    fs, url = s3
    for x in (1, 2):
        tune.Tuner(T.counts_with_checkpoints, param_space={"steps": x}, run_config=_rc(fs, url, name="again"),
                   client=dask_client).fit()
    exp = f"{url}/results/again"
    fs.invalidate_cache()
    (old,) = [p for p in fs.ls(exp, detail=False) if p.endswith(".jsonl.old")]
    assert '"steps": 1' in fs.cat_file(old).decode()
    restored = tune.Tuner.restore(exp, T.counts_with_checkpoints, storage_filesystem=fs).get_results()
    assert [r.config["steps"] for r in restored] == [2]


def test_an_empty_folder_is_a_checkpoint_on_s3_as_on_local_disk(dask_client, s3, cache_dir, tmp_path):
    """Ray keeps a checkpoint of an empty folder; an object store has no folders, so tuneplat marks what was staged.
    ``get_all_reported_checkpoints()`` lists them (earlier attempt's too, retention applied) with their metrics."""
    fs, url = s3
    cfg = {"steps": 4, "fail_at": 3}
    retain = tune.CheckpointConfig(num_to_keep=2)
    fail = tune.FailureConfig(max_failures=1)
    (remote,) = tune.Tuner(T.empty_then_listed, param_space=cfg, client=dask_client,
                           run_config=_rc(fs, url, checkpoint_config=retain, failure_config=fail)).fit()
    (local,) = tune.Tuner(T.empty_then_listed, param_space=cfg, client=dask_client,
                          run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, mlflow=False,
                                                    checkpoint_config=retain, failure_config=fail)).fit()
    for r in (remote, local):
        assert r.error is None, r.error
        assert r.checkpoint is not None and r.metrics["restored"] is True and r.metrics["start"] == 2
        assert r.metrics["listed"] == [["checkpoint_000003", 3.0, "COMMITTED"], ["checkpoint_000004", 4.0, "COMMITTED"]]
        with r.checkpoint.as_directory() as d:
            assert os.listdir(d) == []


def test_a_relaunched_trainer_on_s3_resumes_the_run_that_did_not_finish(dask_client, s3, cache_dir):
    """Ray Train V2's job-level restart with cloud storage: the same RunConfig(storage_path="s3://...", name=) on a
    machine without the local cache (a new driver) continues from the run's latest checkpoint there."""
    import shutil as _shutil

    import tuneplat.train as train
    from tuneplat.train.torch import TorchTrainer

    fs, url = s3

    def trainer():
        return TorchTrainer(T.fails_once_at_3, scaling_config=train.ScalingConfig(num_workers=1),
                            run_config=_rc(fs, url, name="job"), client=dask_client)

    with pytest.raises(train.WorkerGroupError, match="first run broke at step 3"):
        trainer().fit()
    _shutil.rmtree(cache_dir, ignore_errors=True)  # (a new machine: only S3 holds the run)
    result = trainer().fit()
    assert (result.metrics["step"], result.metrics["start"]) == (4, 2)  # from step 2's checkpoint on S3
    with pytest.raises(train.WorkerGroupError, match="first run broke at step 3"):
        trainer().fit()  # finished: a new run starts afresh (from no checkpoint, so it breaks at step 3 again)
