"""Module-level trainables for the Hugging Face and Lightning tests (Dask workers import them by reference).

The ported guides (examples/) are run as they are; these wrappers only record each
rank's final parameters in the trial folder, so that tests can compare the ranks.
"""

from __future__ import annotations

import os

import torch

import tuneplat as tune


def _save_params(module: torch.nn.Module) -> None:
    ctx = tune.get_context()
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    torch.save(state, os.path.join(ctx.get_trial_dir(), f"final{ctx.get_world_rank()}.pt"))


def hf_guide(config):
    """The ported Hugging Face guide's train_func, each rank's final parameters saved."""
    from transformers import Trainer

    from examples.huggingface_transformers import train_func

    original = Trainer.train

    def train(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        _save_params(self.model)
        return out

    Trainer.train = train
    try:
        train_func(config)
    finally:
        Trainer.train = original


def lightning_guide(config):
    """The ported Lightning guide's train_func, each rank's final parameters saved."""
    import pytorch_lightning as pl

    from examples.lightning_getting_started import train_func

    original = pl.Trainer.fit

    def fit(self, model, *args, **kwargs):
        out = original(self, model, *args, **kwargs)
        _save_params(model)
        return out

    pl.Trainer.fit = fit
    try:
        train_func(config)
    finally:
        pl.Trainer.fit = original


def hf_trainer_init(train_dataset, eval_dataset, **config):
    """Ray's older TransformersTrainer's trainer_init_per_worker."""
    from transformers import Trainer, TrainingArguments

    from examples.huggingface_transformers import tiny_bert

    args = TrainingArguments(output_dir="legacy", eval_strategy="epoch", save_strategy="epoch",
                             logging_strategy="epoch", num_train_epochs=config.get("epochs", 1),
                             learning_rate=config.get("lr", 5e-3), per_device_train_batch_size=8,
                             report_to="none", disable_tqdm=True, use_cpu=True)
    return Trainer(model=tiny_bert(), args=args, train_dataset=train_dataset, eval_dataset=eval_dataset)


def lightning_mlflow_and_csv(config):
    """Ray's "Lightning with MLflow logger" example: a plain ``pl.Trainer`` per rank (no Ray strategy), Lightning's
    own ``MLFlowLogger`` (rank-zero-only) and a relative ``CSVLogger("logs")``."""
    import pytorch_lightning as pl
    from pytorch_lightning.loggers import CSVLogger, MLFlowLogger
    from torch.utils.data import DataLoader, TensorDataset

    class Dummy(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self.layer(x).flatten(), y.float())
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(32, 3, generator=g), torch.randint(0, 2, (32,), generator=g)),
                      batch_size=8)
    loggers = [MLFlowLogger(run_name="demo-run", experiment_name="demo-project", tracking_uri=config["uri"]),
               CSVLogger("logs")]
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=loggers, log_every_n_steps=1,
                         enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(Dummy(), train_dataloaders=data)


def ran_as_rank(rank):
    """What a worker process that ran another trial's rank ``rank`` with Lightning keeps: its rank_zero_only.rank."""
    import pytorch_lightning  # noqa: F401 - (sets rank_zero_only.rank, if not set yet, from the environment)
    from lightning_utilities.core.rank_zero import rank_zero_only

    rank_zero_only.rank = rank
