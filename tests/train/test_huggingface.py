"""Hugging Face Transformers on 2 CPU ranks: Ray's guide ported by changing imports, under TorchTrainer and Tuner."""

from __future__ import annotations

import os
import subprocess
import sys

import fw_trainables as fw
import pytest
import torch

import tuneplat as tune
from tuneplat.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer

pytest.importorskip("transformers", reason="the huggingface extra is part of the test extra")


def _rc(storage: str, name: str) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False)


def _assert_same_params(trial_path: str) -> None:
    r0 = torch.load(os.path.join(trial_path, "final0.pt"), weights_only=True)
    r1 = torch.load(os.path.join(trial_path, "final1.pt"), weights_only=True)
    assert r0.keys() == r1.keys()
    for key in r0:
        assert torch.equal(r0[key], r1[key]), f"{key} differs between the ranks"


@pytest.mark.slow
def test_guide_trains_on_two_ranks_and_reports_checkpoints(dask_client, storage):
    trainer = TorchTrainer(fw.hf_guide, train_loop_config={"epochs": 2}, scaling_config=ScalingConfig(num_workers=2),
                           run_config=_rc(storage, "hf"), client=dask_client)
    result = trainer.fit()
    assert result.metrics["training_iteration"] == 2  # one report per save (save_strategy="epoch")
    assert result.metrics["epoch"] == 2 and "eval_loss" in result.metrics and "eval_accuracy" in result.metrics
    assert result.metrics["step"] == 2 * 128 // (8 * 2)  # each rank took half of every batch of 16
    _assert_same_params(result.path)
    files = os.listdir(os.path.join(result.checkpoint.path, "checkpoint"))
    assert "model.safetensors" in files and "trainer_state.json" in files
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(files)  # both ranks' parts of the HF checkpoint
    assert len(result.best_checkpoints) == 2
    # a relative output_dir lives in the trial folder, not in the worker's current directory
    assert os.path.isdir(os.path.join(result.path, "test_trainer"))
    assert not os.path.exists("test_trainer")


@pytest.mark.slow
def test_asha_stops_bad_trials_early(dask_client, storage):
    grid = tune.Tuner(
        TorchTrainer(fw.hf_guide, scaling_config=ScalingConfig(num_workers=2)),
        param_space={"train_loop_config": {"epochs": 3, "lr": tune.grid_search([5e-3, 1e-9, 1e-9])}},
        tune_config=tune.TuneConfig(metric="eval_loss", mode="min",
                                    scheduler=tune.schedulers.ASHAScheduler(max_t=3, grace_period=1,
                                                                            reduction_factor=2)),
        run_config=_rc(storage, "hf_asha"), client=dask_client).fit()
    assert not grid.errors
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    assert iterations[-1] == 3, iterations
    assert iterations[0] < 3, f"ASHA stopped no trial: {iterations}"


@pytest.mark.slow
def test_deprecated_transformers_trainer(dask_client, storage):
    from examples.huggingface_transformers import GeneratedReviews
    from tuneplat.train.huggingface import TransformersTrainer

    with pytest.warns(DeprecationWarning, match="TorchTrainer") as warned:
        trainer = TransformersTrainer(trainer_init_per_worker=fw.hf_trainer_init, trainer_init_config={"epochs": 1},
                                      scaling_config=ScalingConfig(num_workers=2),
                                      datasets={"train": GeneratedReviews(32, 1), "evaluation": GeneratedReviews(16, 2)},
                                      run_config=_rc(storage, "legacy"), client=dask_client)
    assert "prepare_trainer(trainer)" in str(warned[0].message)
    result = trainer.fit()
    assert result.metrics["epoch"] == 1 and "eval_loss" in result.metrics
    assert os.path.isdir(os.path.join(result.checkpoint.path, "checkpoint"))


def test_prepare_trainer_rejects_other_objects():
    from tuneplat.train.huggingface.transformers import prepare_trainer

    with pytest.raises(TypeError, match="transformers.Trainer"):
        prepare_trainer(object())


def test_missing_extra_names_it():
    code = ("import sys; sys.modules['transformers'] = None\n"
            "try:\n import tuneplat.train.huggingface.transformers\n"
            "except ImportError as e:\n print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'tuneplat[huggingface]'" in out.stdout, out.stdout + out.stderr
