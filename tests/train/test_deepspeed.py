"""DeepSpeed inside a TorchTrainer loop on 2 CPU ranks: ``deepspeed.initialize`` unchanged (tuneplat set the
environment it reads and the gloo group it joins), ZeRO-2 shards from every rank in one checkpoint and restored,
compared with the same loop under DeepSpeed's own launcher (``deepspeed --num_gpus 2``; on a CPU host it starts
CPU processes).

Slow lane: on a machine that never ran DeepSpeed, its first ``deepspeed.initialize`` JIT-compiles the
shared-memory communication op of its CPU accelerator (5 minutes on a loaded 2-core machine; cached in
~/.cache/torch_extensions afterwards), and ``import deepspeed`` takes ~5 s in every fresh worker process.
"""

from __future__ import annotations

import os
import sys

import fw_loops
import pytest
import torch
from fw_launch import free_port, launch

import tuneplat as tune
from tuneplat.execution._cluster import scheduler_workers
from tuneplat.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install 'tuneplat[deepspeed]')")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # each test starts fresh processes of the library

CONFIG = {"steps": 4, "global_batch": 32, "lr": 0.01, "stage": 2}


def _rc(storage: str, name: str, **kw) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **kw)


def _live_engines() -> int:
    import gc

    from deepspeed.runtime.engine import DeepSpeedEngine

    return sum(isinstance(o, DeepSpeedEngine) for o in gc.get_objects())


def assert_no_engine_left(client) -> None:
    """No DeepSpeed engine outlives its trial in a worker: a ZeRO optimizer's gradient hooks (held by torch's
    autograd graph, in C++) refer back to it, so unless tuneplat destroys it the engine, its model, optimizer
    state, process groups and gloo threads stay for the worker's life, one more each trial. Asked by a task on each
    worker (one thread each): it runs once the rank's task, teardown included, has ended."""
    workers = list(scheduler_workers(client))
    counts = [client.submit(_live_engines, workers=[w], allow_other_workers=False, pure=False) for w in workers]
    assert client.gather(counts) == [0] * len(workers)


def deepspeed_launcher(nproc: int = 2) -> list[str]:
    """DeepSpeed's own single-node launcher (``deepspeed`` CLI), 127.0.0.1 and a free port."""
    return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(nproc), "--no_local_rank",
            "--master_addr", "127.0.0.1", "--master_port", str(free_port())]


def test_zero2_two_ranks_equal_deepspeed_launcher_and_checkpoint_holds_every_rank_partition(
        dask_client, storage, tmp_path):
    result = TorchTrainer(fw_loops.deepspeed_zero, train_loop_config=CONFIG, scaling_config=ScalingConfig(num_workers=2),
                          run_config=_rc(storage, "zero2"), client=dask_client).fit()
    ours = result.metrics_dataframe["loss"].tolist()
    theirs = [m["loss"] for m in launch(deepspeed_launcher(2), "deepspeed_zero", CONFIG, tmp_path / "ds")]
    # the same 2 gloo ranks, data and ZeRO-2 reduce-scatter/all-gather in the same order: a sum of two values is
    # exact, so the two launches agree up to kernel threading (1 thread per rank in both); the loss moves by
    # > 1e-2 per step, so a rank training alone or a lost partition fails 1e-6
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), rtol=1e-6, atol=1e-7)
    final = torch.load(os.path.join(result.path, "final.pt"), weights_only=True)
    theirs_final = torch.load(tmp_path / "ds" / "final.pt", weights_only=True)
    for key, value in final.items():
        torch.testing.assert_close(value, theirs_final[key], rtol=1e-6, atol=1e-7)
    one = TorchTrainer(fw_loops.deepspeed_zero, train_loop_config=CONFIG, scaling_config=ScalingConfig(num_workers=1),
                       run_config=_rc(storage, "zero2_one"), client=dask_client).fit()
    # 1 rank with the same global batch (DeepSpeed makes its own 1-rank group from MASTER_ADDR/MASTER_PORT, which
    # tuneplat sets for single-rank trials too): the mean of the two halves' gradients is the whole batch's, up to
    # float32 summation order (~1e-7 relative per step, compounding over 4 Adam steps)
    torch.testing.assert_close(torch.tensor(one.metrics_dataframe["loss"].tolist()), torch.tensor(ours),
                               rtol=1e-5, atol=1e-6)
    tag = os.path.join(result.checkpoint.path, "step")
    files = set(os.listdir(tag))  # rank 0's model states and partition, rank 1's partition: one checkpoint
    assert {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
            "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= files, files
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" not in result.metrics["files"]  # rank 0 wrote only its own


def test_zero2_restored_from_every_rank_partition_takes_the_same_next_step(dask_client, storage):
    straight = TorchTrainer(fw_loops.deepspeed_zero, train_loop_config=CONFIG,
                            scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "straight"),
                            client=dask_client).fit()
    crashed = TorchTrainer(fw_loops.deepspeed_zero, train_loop_config={**CONFIG, "crash_after": 1},
                           scaling_config=ScalingConfig(num_workers=2), client=dask_client,
                           run_config=_rc(storage, "crashed", failure_config=tune.FailureConfig(max_failures=1))).fit()
    df = crashed.metrics_dataframe
    assert df["step"].tolist() == [0, 1, 2, 3]  # the retry went on from step 1's checkpoint
    assert_no_engine_left(dask_client)  # the failed attempt's engines too
    torch.testing.assert_close(torch.tensor(df["loss"].tolist()),
                               torch.tensor(straight.metrics_dataframe["loss"].tolist()), rtol=1e-6, atol=1e-7)


def test_tuner_with_asha_over_deepspeed_trainer_stops_trials(dask_client, storage):
    grid = tune.Tuner(
        TorchTrainer(fw_loops.deepspeed_zero, scaling_config=ScalingConfig(num_workers=2)),
        param_space={"train_loop_config": {"steps": 4, "global_batch": 16, "stage": 1,
                                           "lr": tune.grid_search([0.02, 1e-7, 1e-7, 1e-7])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1,
                                    scheduler=tune.schedulers.ASHAScheduler(max_t=4, grace_period=1,
                                                                            reduction_factor=2)),
        run_config=_rc(storage, "ds_asha"), client=dask_client).fit()
    assert not grid.errors, grid.errors
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    assert iterations[-1] == 4 and iterations[0] < 4, iterations
    assert_no_engine_left(dask_client)  # 4 trials, stopped ones among them, on the same 2 workers
