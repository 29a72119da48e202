"""Hugging Face Accelerate inside a TorchTrainer loop (Ray's "Accelerate in TorchTrainer" pattern) on 2 CPU ranks:
``Accelerator()`` built in the loop finds tuneplat's group, compared with ``accelerate launch --num_processes 2``;
``save_state`` from every process into one checkpoint, restored with ``load_state``."""

from __future__ import annotations

import os
import sys

import fw_loops
import pytest
import torch
from fw_launch import free_port, launch

import tuneplat as tune
from tuneplat.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer

pytest.importorskip("accelerate", reason="accelerate is part of the test extra")

CONFIG = {"steps": 4, "global_batch": 32, "lr": 0.01}


def _rc(storage: str, name: str, **kw) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **kw)


def accelerate_launch(nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(nproc),
            "--num_machines", "1", "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
            "--mixed_precision", "no", "--dynamo_backend", "no"]


def test_accelerator_in_the_loop_uses_the_group_and_equals_accelerate_launch(dask_client, storage, tmp_path):
    result = TorchTrainer(fw_loops.accelerate_loop, train_loop_config=CONFIG, scaling_config=ScalingConfig(num_workers=2),
                          run_config=_rc(storage, "accelerate"), client=dask_client).fit()
    assert result.metrics["processes"] == 2 and result.metrics["distributed_type"] == "DistributedType.MULTI_CPU"
    ours = result.metrics_dataframe["loss"].tolist()
    theirs = [m["loss"] for m in launch(accelerate_launch(2), "accelerate_loop", CONFIG, tmp_path / "acc")]
    # DDP over the same 2 gloo ranks and the same data: the gradient all-reduce of two values is exact, so only
    # kernel threading could differ (1 thread per rank in both); the loss moves by > 1e-2 per step
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), rtol=1e-6, atol=1e-7)
    files = set(os.listdir(result.checkpoint.path))  # the main process's model/optimizer, every process's RNG state
    assert {"random_states_0.pkl", "random_states_1.pkl", "step.json"} <= files, files


def _probe(dask_client, storage: str, name: str, ranks: int) -> dict:
    return TorchTrainer(fw_loops.accelerate_probe, scaling_config=ScalingConfig(num_workers=ranks),
                        run_config=_rc(storage, name), client=dask_client).fit().metrics


def test_plain_accelerator_on_cpu_ranks_uses_the_group_and_a_later_single_rank_does_not(dask_client, storage):
    # Ray's examples build Accelerator() without cpu=True: on a host without GPUs it finds no accelerator backend and,
    # unless ACCELERATE_USE_CPU is set, runs as a lone process (DistributedType.NO, 1 process, no DDP, every rank
    # loading all 8 rows); tuneplat sets it for the CPU ranks of a group (with Ray's ACCELERATE_TORCH_DEVICE). On a
    # host with GPUs it keeps the CPU ranks of use_gpu=False off them the same way.
    m = _probe(dask_client, storage, "probe2", 2)
    assert (m["processes"], m["index"], m["distributed_type"], m["device"], m["ddp"]) == (
        2, 0, "DistributedType.MULTI_CPU", "cpu", True), m
    assert len(m["rows"]) == 4, m  # rank 0's half of the prepared loader's 8 rows
    # the variable is the trial's: a 1-rank trial in the same worker processes runs as one process again
    one = _probe(dask_client, storage, "probe1", 1)
    assert (one["processes"], one["use_cpu"], len(one["rows"])) == (1, None, 8), one


def test_accelerate_restored_with_load_state_takes_the_same_next_step(dask_client, storage):
    straight = TorchTrainer(fw_loops.accelerate_loop, train_loop_config=CONFIG,
                            scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "straight"),
                            client=dask_client).fit()
    crashed = TorchTrainer(fw_loops.accelerate_loop, train_loop_config={**CONFIG, "crash_after": 1},
                           scaling_config=ScalingConfig(num_workers=2), client=dask_client,
                           run_config=_rc(storage, "crashed", failure_config=tune.FailureConfig(max_failures=1))).fit()
    df = crashed.metrics_dataframe
    assert df["step"].tolist() == [0, 1, 2, 3]
    torch.testing.assert_close(torch.tensor(df["loss"].tolist()),
                               torch.tensor(straight.metrics_dataframe["loss"].tolist()), rtol=1e-6, atol=1e-7)


def test_tuner_with_asha_over_accelerate_trainer_stops_trials(dask_client, storage):
    grid = tune.Tuner(
        TorchTrainer(fw_loops.accelerate_loop, scaling_config=ScalingConfig(num_workers=2)),
        param_space={"train_loop_config": {"steps": 4, "global_batch": 16,
                                           "lr": tune.grid_search([0.02, 1e-7, 1e-7, 1e-7])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1,
                                    scheduler=tune.schedulers.ASHAScheduler(max_t=4, grace_period=1,
                                                                            reduction_factor=2)),
        run_config=_rc(storage, "acc_asha"), client=dask_client).fit()
    assert not grid.errors, grid.errors
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    assert iterations[-1] == 4 and iterations[0] < 4, iterations
