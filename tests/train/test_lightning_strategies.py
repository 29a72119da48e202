"""Lightning's sharded strategies on tuneplat's ranks: ``RayFSDPStrategy`` trains on 2 CPU ranks (gloo) and ends
with the parameters ``RayDDPStrategy`` reaches; ``RayDeepSpeedStrategy`` exists with Ray's signature (Lightning
runs DeepSpeed on CUDA only: its GPU test is in ``test_frameworks_gpu.py``)."""

from __future__ import annotations

import os

import fw_loops
import pytest
import torch

import tuneplat as tune
from tuneplat.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer

pytest.importorskip("lightning", reason="the lightning extra is part of the test extra")


def _fit(dask_client, storage, name, **config):
    return TorchTrainer(fw_loops.lightning_strategy, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=2), client=dask_client,
                        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False)).fit()


def test_ray_fsdp_strategy_trains_on_two_cpu_ranks_like_ddp(dask_client, storage):
    fsdp = _fit(dask_client, storage, "fsdp", strategy="fsdp")
    ddp = _fit(dask_client, storage, "ddp", strategy="ddp")
    assert fsdp.metrics["training_iteration"] == 2 and fsdp.metrics["step"] == 2 * 128 // (16 * 2)
    a = torch.load(os.path.join(fsdp.path, "final.pt"), weights_only=True)
    b = torch.load(os.path.join(ddp.path, "final.pt"), weights_only=True)
    assert set(a) == set(b)
    # FSDP's reduce-scatter and DDP's all-reduce average the same two gradients (exact for 2 ranks) and Adam runs
    # on the same values, shard or whole: the 8 steps agree to float32 rounding of the flattened shards' updates
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    from examples.lightning_getting_started import ImageClassifier

    initial = ImageClassifier().state_dict()
    assert any(not torch.equal(initial[k], a[k]) for k in a)  # it trained
    # on CPU ranks the checkpoint is sharded (torch.distributed.checkpoint): rank 1 saved its shard under its own
    # folder, which it reported, so both shards are in the one checkpoint
    shards = set(os.listdir(os.path.join(fsdp.checkpoint.path, "checkpoint.ckpt")))
    assert {"__0_0.distcp", "__1_0.distcp", "meta.pt"} <= shards, shards


def test_ray_deepspeed_strategy_has_rays_signature():
    import inspect

    import lightning.pytorch as pl

    from tuneplat.train.lightning import RayDeepSpeedStrategy

    assert issubclass(RayDeepSpeedStrategy, pl.strategies.DeepSpeedStrategy)
    params = inspect.signature(pl.strategies.DeepSpeedStrategy.__init__).parameters
    assert "stage" in params and "offload_optimizer" in params
