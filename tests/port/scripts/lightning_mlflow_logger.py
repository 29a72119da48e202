# Ray Train's "Lightning with MLflow logger" (experiment tracking guide), ported by changing imports only, with what
# a user's notebook adds: a Dataset class defined in the script read by DataLoader(num_workers=2), and a relative
# CSVLogger("logs"). pytorch_lightning is imported at the top of the script, so it is imported while each rank
# unpickles train_func. (Ray's version logs to a shared file: store; here a sqlite store under the cwd.)
import os
import sys

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.mlflow import MLFlowLogger
from torch.utils.data import DataLoader, Dataset

from tuneplat.train import RunConfig, ScalingConfig  # was: from ray.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer  # was: from ray.train.torch import TorchTrainer


class RandomBits(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, generator=g), torch.randint(0, 2, (), generator=g)


class DummyModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.binary_cross_entropy_with_logits(self(x).flatten(), y.float())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def train_func(config):
    logger = MLFlowLogger(run_name="demo-run", experiment_name="demo-project", tracking_uri=config["uri"])
    ptl_trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=[logger, CSVLogger("logs")],
                             log_every_n_steps=1, enable_progress_bar=False, enable_checkpointing=False)
    ptl_trainer.fit(DummyModel(), train_dataloaders=DataLoader(RandomBits(), batch_size=8, num_workers=2))


if __name__ == "__main__":
    uri = "sqlite:///" + os.path.join(os.getcwd(), "mlflow.db")
    import mlflow

    mlflow.MlflowClient(uri).search_experiments()  # (the database made once, before the ranks open it)
    trainer = TorchTrainer(train_func, train_loop_config={"uri": uri}, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="pl_mlflow", storage_path=os.path.join(os.getcwd(), "results"),
                                                mlflow=False))
    result = trainer.fit()
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("demo-project").experiment_id])
    print("RUNS", sorted(r.info.run_name for r in runs))
    print("CSV_LOGS", os.path.isdir(os.path.join(result.path, "logs")), os.path.exists("logs"))
    sys.stdout.flush()
