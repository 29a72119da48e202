"""FSDP2, DeepSpeed ZeRO-2/3, Lightning's RayDeepSpeedStrategy and JAX on GPUs (``.ci/gpu_check.sh`` runs them when a
device is lent; they skip elsewhere). One GPU: 1-rank groups with sharding on; 2 GPUs where lent."""

from __future__ import annotations

import os

import fw_loops
import pytest
import torch

import tuneplat as tune
from tuneplat.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

CONFIG = {"steps": 4, "global_batch": 32, "lr": 0.01}


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _rc(storage, name, **kw):
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **kw)


def _fit(loop, config, storage, name, workers=1, **kw):
    return TorchTrainer(loop, train_loop_config=config, scaling_config=ScalingConfig(num_workers=workers, use_gpu=True),
                        run_config=_rc(storage, name, **kw)).fit()


def test_fsdp2_one_gpu_with_sharding_trains_and_restores(storage):
    straight = _fit(fw_loops.fsdp2, {**CONFIG, "own_group": True}, storage, "fsdp_gpu")
    crashed = _fit(fw_loops.fsdp2, {**CONFIG, "own_group": True, "crash_after": 1}, storage, "fsdp_gpu_crash",
                   failure_config=tune.FailureConfig(max_failures=1))
    assert crashed.metrics_dataframe["step"].tolist() == [0, 1, 2, 3]
    torch.testing.assert_close(torch.tensor(crashed.metrics_dataframe["loss"].tolist()),
                               torch.tensor(straight.metrics_dataframe["loss"].tolist()), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(_gpus() < 2, reason="needs 2 GPUs")
def test_fsdp2_two_gpus_checkpoint_holds_both_shards(storage):
    result = _fit(fw_loops.fsdp2, CONFIG, storage, "fsdp_2gpu", workers=2)
    assert {"__0_0.distcp", "__1_0.distcp"} <= set(os.listdir(result.checkpoint.path))


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_on_gpu_trains_and_restores(storage, stage):
    pytest.importorskip("deepspeed")
    config = {**CONFIG, "stage": stage, "half": True}
    straight = _fit(fw_loops.deepspeed_zero, config, storage, f"ds{stage}")
    crashed = _fit(fw_loops.deepspeed_zero, {**config, "crash_after": 1}, storage, f"ds{stage}_crash",
                   failure_config=tune.FailureConfig(max_failures=1))
    assert crashed.metrics_dataframe["step"].tolist() == [0, 1, 2, 3]
    # fp16 with a dynamic loss scale: the restored scaler state must give the same steps
    torch.testing.assert_close(torch.tensor(crashed.metrics_dataframe["loss"].tolist()),
                               torch.tensor(straight.metrics_dataframe["loss"].tolist()), rtol=1e-3, atol=1e-4)


def test_ray_deepspeed_strategy_trains_on_a_gpu(storage):
    pytest.importorskip("deepspeed")
    pytest.importorskip("lightning")
    result = _fit(fw_loops.lightning_strategy, {"strategy": "deepspeed", "strategy_kwargs": {"stage": 2}}, storage,
                  "pl_ds")
    assert result.metrics["training_iteration"] == 2 and result.metrics["step"] > 0


def test_jax_on_the_gpu(storage):
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("this JAX has no CUDA backend (pip install 'jax[cuda12]')")
    import jax_loops

    from tuneplat.train.jax import JaxConfig, JaxTrainer

    result = JaxTrainer(jax_loops.linear_pmap, train_loop_config={"steps": 3, "global_batch": 32},
                        jax_config=JaxConfig(use_gpu=True), scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
                        run_config=_rc(storage, "jax_gpu")).fit()
    assert result.metrics["devices"] >= 1 and gpus
