"""TensorFlow/Keras on 2 CPU ranks: ``TensorflowTrainer`` gives each rank its ``TF_CONFIG`` and
``MultiWorkerMirroredStrategy`` forms one group across the Dask workers; compared with the same loop launched by
hand (2 processes, ``TF_CONFIG`` set by hand); ``ReportCheckpointCallback`` checkpoints that restore.

Slow lane: ``import tensorflow`` takes 7-40 s per fresh worker process on this machine (2 cores, shared).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tf_loops

import tuneplat as tune
from tuneplat.train import ScalingConfig

pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install 'tuneplat[tensorflow]')")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # each test starts fresh processes of the library

from tuneplat.train.tensorflow import TensorflowConfig, TensorflowTrainer  # noqa: E402

CONFIG = {"epochs": 3, "steps": 4, "global_batch": 32, "lr": 0.05}


def _rc(storage: str, name: str, **kw) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **kw)


def test_two_ranks_equal_tf_config_by_hand_and_checkpoint_restores(dask_client, storage, tmp_path):
    result = TensorflowTrainer(tf_loops.keras_mwms, train_loop_config=CONFIG, tensorflow_config=TensorflowConfig(),
                               scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "tf"),
                               client=dask_client).fit()
    ours = result.metrics_dataframe["loss"].tolist()
    theirs = [m["loss"] for m in tf_loops.launch_by_hand("keras_mwms", 2, CONFIG, str(tmp_path / "hand"))]
    # the same 2-worker collective (ring all-reduce of two gradients: exact), data and seeds: the launches agree
    # up to CPU kernel threading; the loss moves by > 1e-2 per epoch, so a rank training alone fails 1e-5
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    a, b = np.load(os.path.join(result.path, "final.npz")), np.load(tmp_path / "hand" / "final.npz")
    for key in a.files:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)
    assert os.path.isfile(os.path.join(result.checkpoint.path, "model.keras"))
    # restore: a run of 2 epochs, then a run resumed from its checkpoint (model.keras: weights and optimizer step)
    first = TensorflowTrainer(tf_loops.keras_mwms, train_loop_config={**CONFIG, "epochs": 2},
                              scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "tf_first"),
                              client=dask_client).fit()
    resumed = TensorflowTrainer(tf_loops.keras_mwms, train_loop_config=CONFIG, resume_from_checkpoint=first.checkpoint,
                                scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "tf_resumed"),
                                client=dask_client).fit()
    np.testing.assert_allclose(resumed.metrics_dataframe["loss"].tolist(), ours[2:], rtol=1e-5)


@pytest.mark.parametrize("prepare", [True, False])
def test_dataset_shard_to_tf_feeds_keras_on_each_rank(dask_client, storage, prepare):
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.normal(size=256).astype("float32")
    df = pd.DataFrame({"x": x, "y": (2 * x + 1).astype("float32")})
    result = TensorflowTrainer(tf_loops.keras_on_shard, train_loop_config={"epochs": 3, "prepare": prepare},
                               datasets={"train": df}, scaling_config=ScalingConfig(num_workers=2),
                               run_config=_rc(storage, "tf_data"), client=dask_client).fit()
    losses = result.metrics_dataframe["loss"].tolist()
    assert result.metrics["rows"] == 128  # rank 0's shard: half of the rows, every one once per pass
    # Keras trains on every row of the shard, with or without prepare_dataset_shard (to_tf's dataset has
    # TensorFlow's auto-sharding off, as Ray's): MultiWorkerMirroredStrategy takes a batch of 16 as the global
    # batch and splits it over the 2 replicas, so a rank's 128 rows are 16 steps of 8 rows an epoch (with
    # auto-sharding on, each rank would also keep only every 2nd element of its own shard: 8 steps)
    assert result.metrics_dataframe["batches"].tolist() == [16, 16, 16]
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_each_rank_gets_its_tf_config(dask_client, storage):
    grid = tune.Tuner(TensorflowTrainer(_tf_config_seen, scaling_config=ScalingConfig(num_workers=2)),
                      run_config=_rc(storage, "tfconf"), client=dask_client).fit()
    seen = grid[0].metrics
    assert seen["index"] == 0 and len(seen["workers"]) == 2
    hosts = {w.rsplit(":", 1)[0] for w in seen["workers"]}
    assert hosts == {"127.0.0.1"} and len(set(seen["workers"])) == 2  # the workers' address, one port each
    assert seen["legacy"] == "1"


def _tf_config_seen():
    cfg = json.loads(os.environ["TF_CONFIG"])
    tune.report({"index": cfg["task"]["index"], "workers": cfg["cluster"]["worker"],
                 "legacy": os.environ.get("TF_USE_LEGACY_KERAS")})


def test_tuner_with_asha_over_tensorflow_trainer_stops_trials(dask_client, storage):
    grid = tune.Tuner(
        TensorflowTrainer(tf_loops.keras_mwms, scaling_config=ScalingConfig(num_workers=2)),
        param_space={"train_loop_config": {"epochs": 4, "steps": 2, "global_batch": 32,
                                           "lr": tune.grid_search([0.05, 1e-7, 1e-7, 1e-7])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1,
                                    scheduler=tune.schedulers.ASHAScheduler(max_t=4, grace_period=1,
                                                                            reduction_factor=2)),
        run_config=_rc(storage, "tf_asha"), client=dask_client).fit()
    assert not grid.errors, grid.errors
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    assert iterations[-1] == 4 and iterations[0] < 4, iterations


def test_keras_callback_checks_its_events_like_ray():
    from tuneplat.train.tensorflow.keras import ReportCheckpointCallback

    with pytest.raises(ValueError, match="Invalid trigger time selected for `checkpoint_on`"):
        ReportCheckpointCallback(checkpoint_on="epoch_finish")
    cb = ReportCheckpointCallback(checkpoint_on=[], metrics={"acc": "accuracy"})  # tune_mnist_keras.py's call
    import tensorflow as tf

    assert isinstance(cb, tf.keras.callbacks.Callback) and isinstance(cb, ReportCheckpointCallback)
    assert cb._reported({"accuracy": 0.5, "loss": 1.0}) == {"acc": 0.5}
    with pytest.raises(KeyError, match="Keras did not log"):
        cb._reported({"loss": 1.0})


def test_tensorflow_checkpoint_from_h5_and_saved_model_folder(tmp_path):
    import shutil

    import tensorflow as tf

    from tuneplat.train.tensorflow import TensorflowCheckpoint

    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(2)])
    model.save(tmp_path / "m.h5")
    ckpt = TensorflowCheckpoint.from_h5(str(tmp_path / "m.h5"))
    try:
        assert "m.h5" in os.listdir(ckpt.path) and ckpt.get_metadata()[TensorflowCheckpoint.MODEL_FILENAME_KEY] == "m.h5"
        for a, b in zip(ckpt.get_model().get_weights(), model.get_weights()):  # the same weights back
            np.testing.assert_array_equal(a, b)
    finally:
        shutil.rmtree(ckpt.path)
    with pytest.raises(ValueError, match="existing .h5 file"):
        TensorflowCheckpoint.from_h5(str(tmp_path / "missing.h5"))
    with pytest.raises(ValueError, match="existing SavedModel folder"):
        TensorflowCheckpoint.from_saved_model(str(tmp_path / "missing"))
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "saved_model.pb").write_bytes(b"x")
    ckpt = TensorflowCheckpoint.from_saved_model(str(tmp_path / "saved"))
    try:  # a copy of the whole folder; the model file name is "." (the folder), as in Ray
        assert "saved_model.pb" in os.listdir(ckpt.path)
        assert ckpt.get_metadata()[TensorflowCheckpoint.MODEL_FILENAME_KEY] == "."
    finally:
        shutil.rmtree(os.path.dirname(ckpt.path))


def test_status_workers_and_stacks_show_the_tensorflow_ranks(dask_client, storage):
    from rank_views import check_rank_views, look_at_parked_ranks

    trainer = TensorflowTrainer(tf_loops.all_reduce_then_park, scaling_config=ScalingConfig(num_workers=2),
                                run_config=_rc(storage, "tfobs"), client=dask_client)
    exp = os.path.join(storage, "tfobs")
    status, stacks, pids, result = look_at_parked_ranks(trainer.fit, exp, world=2)
    check_rank_views(status, stacks, pids, "parked_in_tf_group", tf_loops.__file__, "TF-PARKED-LINE")
    assert result.error is None and result.metrics["replicas"] == 2 and result.metrics["sum"] == 2.0


# (Ray's TensorFlow examples run ported in tests/port/test_ray_tensorflow_examples.py)


def test_keras_3_fit_on_two_ranks_equals_one_process_with_the_same_global_batch(dask_client, storage, tmp_path):
    # Last but one in this file: a worker process that imported Keras 3 keeps it as tf.keras (TensorFlow resolves
    # tf.keras once per process), and the tf-keras tests above share these worker processes.
    # Keras 3's own fit fails under a multi-worker MultiWorkerMirroredStrategy (keras-team/keras#20585: "Attempt to
    # convert a value (PerReplica...)", two plain processes with TF_CONFIG fail the same way); the rank set-up
    # patches the step that fails (tuneplat/train/tensorflow/_keras3.py), so this run fails without it.
    result = TensorflowTrainer(tf_loops.keras3_mwms, train_loop_config=CONFIG,
                               scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "keras3_mwms"),
                               client=dask_client).fit()
    ours = result.metrics_dataframe["loss"].tolist()
    one = tmp_path / "one"
    theirs = [m["loss"] for m in tf_loops.launch_by_hand("keras3_mwms", 1, {**CONFIG, "strategy": False}, str(one))]
    # Keras 3's multi-worker step (TensorFlow's auto-sharding by data: rank r takes rows 16r..16r+15 of each global
    # batch of 32) sums the two ranks' gradients of half-batch means scaled by 1/2, where one process takes the mean
    # over 32 rows: the same sums in another order, so float32 rounding only (measured: 1.2e-7 relative after the
    # 12 steps); both ranks on the same rows (auto-sharding off) or a rank training alone is off by more than 1e-2
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    a, b = np.load(os.path.join(result.path, "final.npz")), np.load(one / "final.npz")
    assert {"evaluated", "predicted"} <= set(a.files)  # evaluate's loss; predict's 64 rows, gathered in order
    for key in a.files:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)


def test_keras_3_model_in_tune_trials_with_tune_report_checkpoint_callback(dask_client, storage):
    # Last in this file: a worker process that imported Keras 3 keeps it as tf.keras (TensorFlow resolves tf.keras
    # once per process), and the tf-keras tests above share these worker processes.
    grid = tune.Tuner(tf_loops.keras3_trial, param_space={"epochs": 3, "lr": tune.grid_search([0.05, 0.01])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"), run_config=_rc(storage, "keras3"),
                      client=dask_client).fit()
    assert not grid.errors, grid.errors
    for result in grid:
        losses = result.metrics_dataframe["loss"].tolist()
        assert len(losses) == 3 and losses[-1] < losses[0]
        assert os.path.isfile(os.path.join(result.checkpoint.path, "model.keras"))



def test_a_rank_failing_while_its_peer_is_in_an_all_reduce_retries_on_new_processes(dask_client, storage, tmp_path):
    """Rank 0 raises while rank 1 is inside that step's all-reduce: the peer's collective fails, the group ends,
    the one failure is retried (FailureConfig) on restarted worker processes (a TensorFlow group's always are), and
    the retry runs every step with both ranks."""
    result = TensorflowTrainer(tf_loops.all_reduce_steps_one_rank_fails_once,
                               train_loop_config={"steps": 4, "marker": str(tmp_path / "failed-once"), "fail_rank": 0},
                               scaling_config=ScalingConfig(num_workers=2),
                               run_config=_rc(storage, "tfcrash", failure_config=tune.FailureConfig(max_failures=1)),
                               client=dask_client).fit()
    assert os.path.exists(tmp_path / "failed-once")  # the first attempt did fail
    assert result.error is None, result.error
    events = tune.read_journal(os.path.join(storage, "tfcrash", "journal.jsonl"))
    assert [e["attempt"] for e in events if e["event"] == "trial_failure"] == [0]
    assert "rank 0 fails at step 2" in next(e["message"] for e in events if e["event"] == "trial_failure")
    starts = [e["workers"] for e in events if e["event"] == "trial_start"]
    assert len(starts) == 2 and not set(starts[0]) & set(starts[1]), starts
    last_start = max(i for i, e in enumerate(events) if e["event"] == "trial_start")
    assert [e["result"]["sum"] for e in events[last_start:] if e["event"] == "result"] == [2.0] * 4
