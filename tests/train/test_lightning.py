"""PyTorch Lightning on 2 CPU ranks: Ray's guide ported by changing imports, under TorchTrainer and Tuner."""

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

pytest.importorskip("lightning", reason="the lightning extra is part of the test extra")


def _rc(storage: str, name: str) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False)


@pytest.mark.slow
def test_guide_trains_on_two_ranks_and_reports_each_epoch(dask_client, storage):
    trainer = TorchTrainer(fw.lightning_guide, train_loop_config={"max_epochs": 3},
                           scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "pl"),
                           client=dask_client)
    result = trainer.fit()
    assert result.metrics["training_iteration"] == 3 and result.metrics["epoch"] == 2
    assert result.metrics["step"] == 3 * 256 // (32 * 2)  # DistributedSampler: each rank half of the rows
    assert "loss" in result.metrics
    r0 = torch.load(os.path.join(result.path, "final0.pt"), weights_only=True)
    r1 = torch.load(os.path.join(result.path, "final1.pt"), weights_only=True)
    for key in r0:
        assert torch.equal(r0[key], r1[key]), f"{key} differs between the ranks"
    ckpt = torch.load(os.path.join(result.checkpoint.path, "checkpoint.ckpt"), weights_only=False)
    for key, value in ckpt["state_dict"].items():
        assert torch.equal(value, r0[key])
    assert len(result.best_checkpoints) == 3
    assert os.path.isdir(os.path.join(result.path, "lightning_logs"))  # the default root is the trial folder
    assert not os.path.exists("lightning_logs")


@pytest.mark.slow
def test_asha_stops_bad_trials_early(dask_client, storage):
    grid = tune.Tuner(
        TorchTrainer(fw.lightning_guide, scaling_config=ScalingConfig(num_workers=2)),
        param_space={"train_loop_config": {"max_epochs": 3, "rows": 128,
                                           "lr": tune.grid_search([0.02, 1e-9, 1e-9])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    scheduler=tune.schedulers.ASHAScheduler(max_t=3, grace_period=1,
                                                                            reduction_factor=2)),
        run_config=_rc(storage, "pl_asha"), client=dask_client).fit()
    assert not grid.errors
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    assert iterations[-1] == 3 and iterations[0] < 3, iterations


def test_prepare_trainer_checks_strategy_and_environment():
    import lightning.pytorch as lp

    from tuneplat.train.lightning import RayDDPStrategy, prepare_trainer

    with pytest.raises(RuntimeError, match="RayDDPStrategy"):
        prepare_trainer(lp.Trainer(strategy="ddp", devices=1, logger=False, enable_checkpointing=False,
                                   enable_progress_bar=False))
    trainer = lp.Trainer(strategy=RayDDPStrategy(), devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False)
    with pytest.raises(RuntimeError, match="RayLightningEnvironment"):
        prepare_trainer(trainer)


def test_both_lightning_packages_get_their_own_classes():
    import lightning.pytorch as lp
    import pytorch_lightning

    from tuneplat.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback

    def build(pl):
        return RayDDPStrategy(), RayLightningEnvironment(), RayTrainReportCallback()

    for pl, base in ((lp, lp.strategies.DDPStrategy), (pytorch_lightning, pytorch_lightning.strategies.DDPStrategy)):
        strategy, env, callback = build(pl)
        assert isinstance(strategy, base) and type(strategy).__name__ == "RayDDPStrategy"
        assert isinstance(env, pl.plugins.environments.LightningEnvironment)
        assert isinstance(callback, pl.callbacks.Callback)


def test_missing_extra_names_it():
    code = ("import sys; sys.modules['lightning'] = None; sys.modules['pytorch_lightning'] = None\n"
            "try:\n import tuneplat.train.lightning\n"
            "except ImportError as e:\n print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'tuneplat[lightning]'" in out.stdout, out.stdout + out.stderr


@pytest.mark.slow
def test_rank_zero_only_loggers_log_once_and_relative_logs_go_to_the_run_folder(dask_client, storage, tmp_path):
    # Ray's "Lightning with MLflow logger": Lightning reads the rank from the environment (RANK & co.) when imported,
    # which the ranks have before the training function is unpickled; a worker process that imported Lightning for
    # another rank before (here: every worker ran a rank 1) is told its rank now
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/pl-mlflow.db"
    client = MlflowClient(uri)  # the database made once (every rank's MLFlowLogger opens a client in __init__)
    dask_client.run(fw.ran_as_rank, 1)
    result = TorchTrainer(fw.lightning_mlflow_and_csv, train_loop_config={"uri": uri},
                          scaling_config=ScalingConfig(num_workers=2), run_config=_rc(storage, "pl_mlflow"),
                          client=dask_client).fit()
    experiment = client.get_experiment_by_name("demo-project")
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    assert [r.info.run_name for r in runs] == ["demo-run"]  # rank 0's, not one per rank (nor none)
    assert os.path.isdir(os.path.join(result.path, "logs")), os.listdir(result.path)  # CSVLogger("logs")
    assert not os.path.exists("logs")
