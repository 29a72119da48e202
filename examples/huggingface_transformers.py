"""Ray's "Get started with Hugging Face Transformers" guide, ported to tuneplat by changing imports.

Two things differ from the guide, so that it runs anywhere without downloads: the
model is a 2-layer BERT built from a config (``bert-base-cased`` has 12 layers and
comes from the Hub), and the "reviews" are generated token sequences whose label
(one of 5, as Yelp's stars) is a function of the tokens; accuracy is computed with
numpy instead of ``evaluate.load("accuracy")``. Everything tuneplat-related is the
guide's code with ``ray`` replaced by ``tuneplat``.

Run it: ``python examples/huggingface_transformers.py`` (2 CPU ranks).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
)

import tuneplat.train.huggingface.transformers
from tuneplat.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer

VOCAB, LENGTH, LABELS = 100, 16, 5


class GeneratedReviews(torch.utils.data.Dataset):
    """Token sequences; the label is the first token modulo 5 (what the stars were in Yelp's reviews)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(1, VOCAB, (n, LENGTH), generator=g)
        self.labels = self.input_ids[:, 1] % LABELS

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[i], "attention_mask": torch.ones(LENGTH, dtype=torch.long),
                "labels": self.labels[i]}


def tiny_bert() -> BertForSequenceClassification:
    """A 2-layer BERT from a config (no download), 5 labels as in the guide."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=LABELS)
    return BertForSequenceClassification(config)


# [1] Encapsulate data preprocessing, training, and evaluation
# logic in a training function
# ============================================================
def train_func(config):
    config = config or {}
    # Datasets
    small_train_dataset = GeneratedReviews(config.get("train_rows", 128), seed=1)
    small_eval_dataset = GeneratedReviews(config.get("eval_rows", 32), seed=2)

    # Model
    model = tiny_bert()

    # Evaluation Metrics
    def compute_metrics(eval_pred):
        logits, labels = eval_pred
        predictions = np.argmax(logits, axis=-1)
        return {"accuracy": float((predictions == labels).mean())}

    # Hugging Face Trainer
    training_args = TrainingArguments(
        output_dir="test_trainer", eval_strategy="epoch", save_strategy="epoch", logging_strategy="epoch",
        report_to="none", num_train_epochs=config.get("epochs", 2), learning_rate=config.get("lr", 5e-3),
        per_device_train_batch_size=8, per_device_eval_batch_size=16, disable_tqdm=True, use_cpu=True,
    )

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=small_train_dataset,
        eval_dataset=small_eval_dataset,
        compute_metrics=compute_metrics,
    )

    # [2] Report Metrics and Checkpoints to Ray Train
    # ===============================================
    callback = tuneplat.train.huggingface.transformers.RayTrainReportCallback()
    trainer.add_callback(callback)

    # [3] Prepare Transformers Trainer
    # ================================
    trainer = tuneplat.train.huggingface.transformers.prepare_trainer(trainer)

    # Start Training
    trainer.train()


if __name__ == "__main__":
    # [4] Define a Ray TorchTrainer to launch `train_func` on all workers
    # ===================================================================
    ray_trainer = TorchTrainer(
        train_func, scaling_config=ScalingConfig(num_workers=2, use_gpu=False)
    )
    result = ray_trainer.fit()
    print(result.metrics)
    print(result.checkpoint)
