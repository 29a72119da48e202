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
