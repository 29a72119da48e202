"""JAX on 2 CPU ranks: ``JaxTrainer`` calls ``jax.distributed.initialize`` for each rank (coordinator on rank 0),
``pmap``'s ``pmean`` spans both processes; compared with the same loop launched by hand (2 processes calling
``jax.distributed.initialize`` themselves); a checkpoint restores the same next step; ASHA stops trials."""

from __future__ import annotations

import os

import jax_loops
import numpy as np
import pytest

import tuneplat as tune
from tuneplat.train import ScalingConfig

pytest.importorskip("jax", reason="JAX is not installed (pip install 'tuneplat[jax]')")

from tuneplat.train.jax import JaxConfig, JaxTrainer  # noqa: E402

CONFIG = {"steps": 5, "global_batch": 32, "lr": 0.05}


def _rc(storage: str, name: str, **kw) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **kw)


def test_two_ranks_equal_jax_distributed_by_hand(dask_client, storage, tmp_path):
    result = JaxTrainer(jax_loops.linear_pmap, train_loop_config=CONFIG, jax_config=JaxConfig(),
                        scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "jax"),
                        client=dask_client).fit()
    assert result.metrics["processes"] == 2 and result.metrics["devices"] == 2  # one JAX cluster of 2 processes
    ours = result.metrics_dataframe["loss"].tolist()
    theirs = [m["loss"] for m in jax_loops.launch_by_hand("linear_pmap", 2, CONFIG, str(tmp_path / "hand"))]
    # the same pmean over 2 processes (a sum of two values: exact) on the same data: equal up to XLA's CPU kernels,
    # which are the same build on both sides; the loss moves by > 1e-1 per step, so a rank alone fails 1e-6
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    np.testing.assert_allclose(np.load(os.path.join(result.path, "final.npy")), np.load(tmp_path / "hand" / "final.npy"),
                               rtol=1e-6)
    one = [m["loss"] for m in jax_loops.launch_by_hand("linear_pmap", 1, CONFIG, str(tmp_path / "one"))]
    # 1 process with the same global batch: the mean of the two halves' mean losses is the whole batch's mean
    # loss and the averaged gradient is the whole batch's; only float32 summation order differs (~1e-7 relative)
    np.testing.assert_allclose(ours, one, rtol=1e-5)


def test_restored_from_checkpoint_takes_the_same_next_step_and_jax_reinitializes(dask_client, storage):
    straight = JaxTrainer(jax_loops.linear_pmap, train_loop_config=CONFIG, scaling_config=ScalingConfig(num_workers=2),
                          run_config=_rc(storage, "straight"), client=dask_client).fit()
    # the same worker processes run a second and a third JAX group: each initializes jax.distributed again
    first = JaxTrainer(jax_loops.linear_pmap, train_loop_config={**CONFIG, "steps": 2},
                       scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "first"),
                       client=dask_client).fit()
    resumed = JaxTrainer(jax_loops.linear_pmap, train_loop_config=CONFIG, resume_from_checkpoint=first.checkpoint,
                         scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "resumed"),
                         client=dask_client).fit()
    df = resumed.metrics_dataframe
    assert df["step"].tolist() == [2, 3, 4]  # it went on from step 1's checkpoint
    np.testing.assert_allclose(df["loss"].tolist(), straight.metrics_dataframe["loss"].tolist()[2:], rtol=1e-6)


def test_tuner_with_asha_over_jax_trainer_stops_trials(dask_client, storage):
    grid = tune.Tuner(
        JaxTrainer(jax_loops.linear_pmap, scaling_config=ScalingConfig(num_workers=2)),
        param_space={"train_loop_config": {"steps": 4, "global_batch": 16,
                                           "lr": tune.grid_search([0.05, 1e-7, 1e-7, 1e-7])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1,
                                    scheduler=tune.schedulers.ASHAScheduler(max_t=4, grace_period=1,
                                                                            reduction_factor=2)),
        run_config=_rc(storage, "jax_asha"), client=dask_client).fit()
    assert not grid.errors, grid.errors
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    assert iterations[-1] == 4 and iterations[0] < 4, iterations


def test_jax_config_validates():
    with pytest.raises(TypeError, match="use_gpu"):
        JaxConfig(use_gpu="yes")
    with pytest.raises(TypeError, match="JaxConfig"):
        JaxTrainer(jax_loops.linear_pmap, jax_config={"use_gpu": False})
