"""Checkpoint API, retention, restart from the latest checkpoint, shards, storage paths."""

from __future__ import annotations

import json
import os
import shutil

import ckpt_trainables as T
import pytest

import tuneplat as tune
from tuneplat.storage._checkpoint import load_torch
from tuneplat.storage._storage import clean_staging, commit_checkpoint, list_checkpoints, retain, stage_checkpoint


def _rc(storage, **kw):
    return tune.RunConfig(storage_path=storage, verbose=0, mlflow=False, **kw)


class Unsafe:
    """Not an allowed global for weights_only loading."""


# ---------------------------------------------------------------- API
def test_checkpoint_api_roundtrip(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.txt").write_text("B")
    ckpt = tune.Checkpoint.from_directory(src)
    assert ckpt.path == str(src)
    with ckpt.as_directory() as d:
        assert open(os.path.join(d, "sub", "b.txt")).read() == "B"
    out = ckpt.to_directory(tmp_path / "out")
    assert open(os.path.join(out, "a.txt")).read() == "A"
    tmp = ckpt.to_directory()  # a new temporary folder, the caller's to remove (as in Ray)
    try:
        assert sorted(os.listdir(tmp)) == ["a.txt", "sub"]
    finally:
        shutil.rmtree(tmp)
    ckpt.set_metadata({"epoch": 3})
    ckpt.update_metadata({"loss": 0.5})
    assert ckpt.get_metadata() == {"epoch": 3, "loss": 0.5}


def test_from_directory_errors_name_the_path(tmp_path):
    f = tmp_path / "model.pt"
    f.write_text("x")
    with pytest.raises(FileNotFoundError, match="is a file"):
        tune.Checkpoint.from_directory(f)
    with pytest.raises(FileNotFoundError, match="missing"):
        tune.Checkpoint.from_directory(tmp_path / "nope")


def test_load_torch_is_weights_only_by_default(tmp_path):
    import torch

    torch.save({"w": torch.ones(2)}, tmp_path / "model.pt")
    torch.save({"obj": Unsafe()}, tmp_path / "unsafe.pt")
    ckpt = tune.Checkpoint.from_directory(tmp_path)
    assert torch.equal(load_torch(ckpt)["w"], torch.ones(2))
    with pytest.raises(Exception, match="[Ww]eights only"):
        load_torch(ckpt, "unsafe.pt")
    assert isinstance(load_torch(ckpt, "unsafe.pt", weights_only=False)["obj"], Unsafe)  # the user's opt-out
    with pytest.raises(FileNotFoundError, match="model.pt"):
        load_torch(ckpt, "other.pt")


# ---------------------------------------------------------------- storage protocol
def test_stage_commit_replace_and_crash_leftovers(tmp_path):
    trial = str(tmp_path / "trial")
    os.makedirs(trial)
    src = tmp_path / "src"
    src.mkdir()
    (src / "w").write_text("v1")
    stage_checkpoint(str(src), trial, "checkpoint_000001")
    assert list_checkpoints(trial) == []  # staged only: not a checkpoint, and the leftover is removed
    assert os.listdir(trial) == []
    stage_checkpoint(str(src), trial, "checkpoint_000001")
    final = commit_checkpoint(trial, "checkpoint_000001")
    assert list_checkpoints(trial) == [final]
    # a replace interrupted between its two renames: the old checkpoint comes back
    os.rename(final, os.path.join(trial, ".trash_checkpoint_000001"))
    (tmp_path / "trial" / ".staging_checkpoint_000002").mkdir()
    (tmp_path / "trial" / ".staging_checkpoint_000002" / "w.tmp-1-ab").write_text("torn")
    clean_staging(trial)
    assert sorted(os.listdir(trial)) == ["checkpoint_000001"]
    assert open(os.path.join(final, "w")).read() == "v1"
    (src / "w").write_text("v2")
    stage_checkpoint(str(src), trial, "checkpoint_000001")
    commit_checkpoint(trial, "checkpoint_000001")
    assert open(os.path.join(final, "w")).read() == "v2"
    assert sorted(os.listdir(trial)) == ["checkpoint_000001"]


@pytest.mark.parametrize(("scores", "n", "attr", "order", "kept"), [
    ([1, 2, 3, 4, 5], 2, None, "max", [3, 4]),              # latest N
    ([5, 1, 4, 2, 3], 2, "s", "max", [0, 2, 4]),            # best 2 (5, 4) + the latest
    ([5, 1, 4, 2, 3], 2, "s", "min", [1, 3, 4]),            # best 2 (1, 2) + the latest
    ([5, 1, 4, 2, 9], 2, "s", "max", [0, 4]),               # latest is among the best: exactly N
    ([3, 3, 3, 1], 2, "s", "max", [1, 2, 3]),               # ties keep the newer
    ([float("nan"), 2, None, 1], 1, "s", "max", [1, 3]),    # missing/NaN rank worst
])
def test_retain_rule(scores, n, attr, order, kept):
    pairs = [(i, {"s": s} if s is not None else {}) for i, s in enumerate(scores)]
    deleted = retain(pairs, n, attr, order)
    assert [i for i, _ in pairs if (i, pairs[i][1]) not in deleted] == kept


def test_file_url_storage_path(tmp_path):
    from tuneplat.storage._storage import resolve_storage_path

    assert resolve_storage_path(f"file://{tmp_path}/r") == f"{tmp_path}/r"
    with pytest.raises(ValueError, match="not a local folder"):
        resolve_storage_path("s3://bucket/results")  # remote URLs go through resolve_storage
    with pytest.raises(ValueError, match="three slashes"):
        resolve_storage_path("file://relative/path")


# ---------------------------------------------------------------- end to end
def test_retention_and_result_checkpoints(dask_client, storage):
    scores = {"1": 5.0, "2": 1.0, "3": 4.0, "4": 2.0, "5": 3.0}
    tuner = tune.Tuner(T.counts_with_checkpoints, param_space={"steps": 5, "scores": scores},
                       tune_config=tune.TuneConfig(metric="score", mode="max"),
                       run_config=_rc(storage, checkpoint_config=tune.CheckpointConfig(
                           num_to_keep=2, checkpoint_score_attribute="score")),
                       client=dask_client)
    (r,) = tuner.fit()
    assert r.error is None
    on_disk = [os.path.basename(p) for p in list_checkpoints(r.path)]
    assert on_disk == ["checkpoint_000001", "checkpoint_000003", "checkpoint_000005"]
    assert os.path.basename(r.checkpoint.path) == "checkpoint_000005"  # the latest
    assert [m["score"] for _, m in r.best_checkpoints] == [5.0, 4.0, 3.0]
    with r.checkpoint.as_directory() as d:
        assert json.load(open(os.path.join(d, "state.json")))["step"] == 5
    restored = tune.Tuner.restore(os.path.dirname(r.path), T.counts_with_checkpoints).get_results()
    assert [os.path.basename(c.path) for c, _ in restored[0].best_checkpoints] == on_disk


def test_latest_n_retention_and_restart_from_latest(dask_client, storage):
    tuner = tune.Tuner(T.counts_with_checkpoints, param_space={"steps": 6, "fail_at": 5},
                       run_config=_rc(f"file://{storage}", checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                                      failure_config=tune.FailureConfig(max_failures=1)),
                       client=dask_client)
    (r,) = tuner.fit()
    assert r.error is None and r.metrics["step"] == 6
    assert r.path.startswith(storage)
    with r.checkpoint.as_directory() as d:
        state = json.load(open(os.path.join(d, "state.json")))
    assert state == {"step": 6, "resumed_from": 4}  # the retry started from the latest checkpoint (step 4)
    assert [os.path.basename(p) for p in list_checkpoints(r.path)] == ["checkpoint_000005", "checkpoint_000006"]


def test_two_rank_shards_are_one_checkpoint(dask_client, storage):
    tuner = tune.Tuner(T.sharded, run_config=_rc(storage, failure_config=tune.FailureConfig(max_failures=1)),
                       scaling_config=tune.ScalingConfig(num_workers=2), client=dask_client)
    (r,) = tuner.fit()
    assert r.error is None, r.error
    with r.checkpoint.as_directory() as d:
        assert sorted(os.listdir(d)) == ["shard_0.json", "shard_1.json"]
        assert {json.load(open(os.path.join(d, f)))["rank"] for f in os.listdir(d)} == {0, 1}
    # after the planned failure, rank 0 (whose metrics are the trial's) saw both shards of checkpoint 2
    assert r.metrics["seen"] == "shard_0.json,shard_1.json"
    assert [os.path.basename(p) for p in list_checkpoints(r.path)] == [
        "checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]


def test_torch_checkpoint_loads_with_weights_only(dask_client, storage):
    import torch

    tuner = tune.Tuner(T.saves_torch, param_space={"k": 3.0}, run_config=_rc(storage), client=dask_client)
    (r,) = tuner.fit()
    assert torch.equal(load_torch(r.checkpoint)["w"], torch.arange(4.0) * 3.0)
