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


def test_keras_3_trains_on_two_ranks_with_its_own_callback_base(dask_client, storage):
    result = TensorflowTrainer(tf_loops.keras3_mwms, train_loop_config=CONFIG,
                               scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "keras3"),
                               client=dask_client).fit()
    losses = result.metrics_dataframe["loss"].tolist()
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert os.path.isfile(os.path.join(result.checkpoint.path, "model.keras"))


def test_dataset_shard_to_tf_feeds_keras_on_each_rank(dask_client, storage):
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.normal(size=256).astype("float32")
    df = pd.DataFrame({"x": x, "y": (2 * x + 1).astype("float32")})
    result = TensorflowTrainer(tf_loops.keras_on_shard, train_loop_config={"epochs": 3}, datasets={"train": df},
                               scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "tf_data"),
                               client=dask_client).fit()
    losses = result.metrics_dataframe["loss"].tolist()
    assert result.metrics["rows"] == 128  # rank 0's shard: half of the rows, every one once per pass
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


# ------------------------------------------------------------------ Ray's TensorFlow examples, ported (tests/port/scripts)
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "port", "scripts")


def _script(name, cwd, *args):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPTS)))  # the checkout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=840, env=env, cwd=str(cwd))
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def _line(out, key):
    found = [ln for ln in out.splitlines() if ln.startswith(key + " ")]
    assert found, out[-3000:]
    return found[-1][len(key) + 1:]


def test_ray_tensorflow_quick_start_runs_ported(tmp_path):
    out = _script("tensorflow_quick_start", tmp_path)
    assert _line(out, "RESULT").endswith("True")  # train_func() alone, then TensorflowTrainer on 2 ranks


def test_ray_tensorflow_mnist_example_reports_each_epoch_with_a_checkpoint(tmp_path):
    out = _script("tensorflow_mnist_example", tmp_path, "--smoke-test")
    iterations, accuracy, files = _line(out, "RESULT").split(" ", 2)
    assert int(iterations) == 4 and 0.0 <= float(accuracy) <= 1.0  # epochs=4: one report per epoch
    assert "model.keras" in files


def test_ray_tune_mnist_keras_stops_at_the_iteration_limit(tmp_path):
    out = _script("tune_mnist_keras", tmp_path, "--smoke-test")
    assert "ERRORS 0" in out
    iterations = json.loads(_line(out, "ITERATIONS").split(" ERRORS")[0])
    assert len(iterations) == 10 and max(iterations) == 2  # stop={"training_iteration": 2} in the smoke test
