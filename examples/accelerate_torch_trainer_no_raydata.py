"""Ray Train's Accelerate example (BERT fine-tuned with Hugging Face Accelerate, data from DataLoaders), on tuneplat.

The port of Ray's ``python/ray/train/examples/accelerate/accelerate_torch_trainer_no_raydata.py`` (Ray's docs
page "Get started with Hugging Face Accelerate"): the same calls in the same order, with ``tuneplat`` imports in
place of ``ray``. ``Accelerator()``, built inside the training function, finds the process group tuneplat made
for the ranks and the environment it set; ``accelerator.prepare`` wraps the model in DDP and shards the data
loaders. The main process saves the unwrapped model and reports the folder; the other ranks report without one.

Lines that differ from Ray's, each marked ``# tuneplat port:``:

- the downloads: ``bert-base-cased``, its tokenizer, GLUE MRPC and the ``evaluate`` metric are replaced by the
  offline stand-ins of :mod:`examples.glue_mrpc` (a 2-layer BERT, generated sentence pairs, accuracy and F1);
- CPU ranks: ``ScalingConfig(num_workers=2, use_gpu=False)`` (Ray: 4 GPUs).

Run it from the checkout's root: ``python -m examples.accelerate_torch_trainer_no_raydata`` (2 CPU ranks).
"""

from __future__ import annotations

from tempfile import TemporaryDirectory

import torch
from accelerate import Accelerator
from torch.optim import AdamW
from torch.utils.data import DataLoader
from transformers import get_linear_schedule_with_warmup, set_seed

import tuneplat.train
from examples.glue_mrpc import MrpcMetric, bert_tokenizer, load_mrpc, tiny_bert  # tuneplat port: offline stand-ins
from tuneplat.train import Checkpoint, ScalingConfig
from tuneplat.train.torch import TorchTrainer


def train_func(config):
    """Runs on every rank: fine-tune, evaluate and checkpoint once per epoch."""
    lr = config["lr"]
    seed = config["seed"]
    num_epochs = config["num_epochs"]
    train_batch_size = config["train_batch_size"]
    eval_batch_size = config["eval_batch_size"]

    set_seed(seed)

    accelerator = Accelerator()  # joins nothing itself: the group and RANK/WORLD_SIZE are tuneplat's

    metric = MrpcMetric()  # tuneplat port: was evaluate.load("glue", "mrpc")

    mrpc = load_mrpc()  # tuneplat port: was datasets.load_dataset("nyu-mll/glue", "mrpc")
    tokenizer = bert_tokenizer()  # tuneplat port: was AutoTokenizer.from_pretrained("bert-base-cased")

    def collate_fn(rows):
        encoded = tokenizer([row["sentence1"] for row in rows], [row["sentence2"] for row in rows],
                            truncation=True, padding="longest", return_tensors="pt")
        encoded["labels"] = torch.LongTensor([row["label"] for row in rows])
        return {name: tensor.to(accelerator.device) for name, tensor in encoded.items()}

    train_dataloader = DataLoader(mrpc["train"], shuffle=True, collate_fn=collate_fn,
                                  batch_size=train_batch_size, drop_last=True)
    eval_dataloader = DataLoader(mrpc["validation"], shuffle=False, collate_fn=collate_fn,
                                 batch_size=eval_batch_size, drop_last=True)

    # tuneplat port: was AutoModelForSequenceClassification.from_pretrained("bert-base-cased", return_dict=True)
    model = tiny_bert()
    optimizer = AdamW(params=model.parameters(), lr=lr)
    steps_per_epoch = len(train_dataloader)
    lr_scheduler = get_linear_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=100,
                                                   num_training_steps=steps_per_epoch * num_epochs)

    # DDP around the model; each rank's loaders yield its share of the batches
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)

    for epoch in range(num_epochs):
        model.train()
        for batch in train_dataloader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()

        model.eval()
        for batch in eval_dataloader:
            with torch.no_grad():
                logits = model(**batch).logits
            predictions = logits.argmax(dim=-1)
            # every rank's predictions and labels, on every rank
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            metric.add_batch(predictions=predictions, references=references)

        eval_metric = metric.compute()
        accelerator.print(f"epoch {epoch}:", eval_metric)  # the main process prints

        with TemporaryDirectory() as tmpdir:
            if accelerator.is_main_process:
                unwrapped_model = accelerator.unwrap_model(model)
                accelerator.save(unwrapped_model, f"{tmpdir}/ckpt_{epoch}.bin")
                checkpoint = Checkpoint.from_directory(tmpdir)
            else:
                checkpoint = None
            tuneplat.train.report(metrics=eval_metric, checkpoint=checkpoint)


if __name__ == "__main__":
    config = {
        "lr": 2e-5,
        "num_epochs": 3,
        "seed": 42,
        "train_batch_size": 16,
        "eval_batch_size": 32,
    }

    trainer = TorchTrainer(
        train_func,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),  # tuneplat port: Ray: num_workers=4, use_gpu=True
        # on a cluster of several machines, give the run storage every worker reaches:
        # run_config=tuneplat.train.RunConfig(storage_path="s3://..."),
    )

    result = trainer.fit()
