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


def test_status_workers_and_stacks_show_the_jax_ranks(dask_client, storage):
    from rank_views import check_rank_views, look_at_parked_ranks

    trainer = JaxTrainer(jax_loops.psum_then_park, scaling_config=ScalingConfig(num_workers=2),
                         run_config=_rc(storage, "jaxobs"), client=dask_client)
    exp = os.path.join(storage, "jaxobs")
    status, stacks, pids, result = look_at_parked_ranks(trainer.fit, exp, world=2)
    check_rank_views(status, stacks, pids, "parked_in_jax_group", jax_loops.__file__, "JAX-PARKED-LINE")
    assert result.error is None and result.metrics["processes"] == 2 and result.metrics["psum"] == 2.0


@pytest.mark.slow  # its own cluster: JAX ends both worker processes, their nannies restart them
@pytest.mark.parametrize("fail_rank", [0, 1])  # 0 runs JAX's coordination service, 1 is a plain member
def test_a_rank_failing_while_its_peer_is_in_a_collective_retries(tmp_path, monkeypatch, fail_rank):

    from cluster_fixtures import local_client

    # JAX's coordination service ends every process of the group some time after one died (SIGABRT, "Terminating
    # process because the JAX distributed service detected fatal errors"): tuneplat restarts the failed group's
    # workers at once and the retry waits for them, whose start (a fresh interpreter importing the preloads) takes
    # minutes on a loaded 2-core machine, hence the bound
    monkeypatch.setenv("TUNEPLAT_START_TIMEOUT_S", "600")
    storage = str(tmp_path / "results")
    with local_client(2) as client:
        result = JaxTrainer(jax_loops.psum_steps_one_rank_fails_once,
                            train_loop_config={"steps": 4, "marker": str(tmp_path / "failed-once"),
                                               "fail_rank": fail_rank},
                            scaling_config=ScalingConfig(num_workers=2),
                            run_config=_rc(storage, "jaxcrash", failure_config=tune.FailureConfig(max_failures=1)),
                            client=client).fit()
    assert os.path.exists(tmp_path / "failed-once")  # the first attempt did fail
    assert result.error is None, result.error
    events = tune.read_journal(os.path.join(storage, "jaxcrash", "journal.jsonl"))
    assert [e["attempt"] for e in events if e["event"] == "trial_failure"] == [0]
    # the retry was placed on new worker processes, never on one about to be ended by JAX (before: it was placed on
    # the failed group's workers and requeued ~60 s later, "a worker was lost before the trial started")
    starts = [e["workers"] for e in events if e["event"] == "trial_start"]
    assert len(starts) == 2 and not set(starts[0]) & set(starts[1]), starts
    assert not [e for e in events if e["event"] == "trial_requeued"]
    last_start = max(i for i, e in enumerate(events) if e["event"] == "trial_start")
    after = [e for e in events[last_start:] if e["event"] == "result"]
    assert len(after) == 4  # the retry ran every step (no checkpoint: from step 0) with both ranks in the psum
    assert result.metrics["step"] == 3 and result.metrics["psum"] == 2.0
    assert [e["status"] for e in events if e["event"] == "trial_end"] == ["TERMINATED"]
