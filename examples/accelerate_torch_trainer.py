"""Ray Train's Accelerate example with Ray Data (BERT fine-tuned with Accelerate, data sharded by tuneplat), on tuneplat.

The port of Ray's ``python/ray/train/examples/accelerate/accelerate_torch_trainer.py``: the same calls in the
same order, with ``tuneplat`` imports in place of ``ray``. The two splits are given to
``TorchTrainer(datasets=...)`` and split across the ranks (``DataConfig(datasets_to_split=[...])``); each rank
reads its shard with ``get_dataset_shard(name).iter_torch_batches(collate_fn=...)``, so only the model, the
optimizer and the scheduler go through ``accelerator.prepare``. Every rank calls ``accelerator.save`` (the main
process writes) and reports its folder; tuneplat gathers them into one checkpoint.

Lines that differ from Ray's, each marked ``# tuneplat port:``:

- the downloads: ``bert-base-cased``, its tokenizer, GLUE MRPC and the ``evaluate`` metric are replaced by the
  offline stand-ins of :mod:`examples.glue_mrpc` (a 2-layer BERT, generated sentence pairs, accuracy and F1);
- ``ray.data.from_huggingface(split)``: tuneplat's datasets are Dask collections or what converts to one, here a
  pandas frame of the split's rows (a Hugging Face split gives its own with ``split.to_pandas()``), and Ray
  Data's ``count()`` is the frame's ``len()``;
- CPU ranks: ``ScalingConfig(num_workers=2, use_gpu=False)`` (Ray: 4 GPUs).

Run it from the checkout's root: ``python -m examples.accelerate_torch_trainer`` (2 CPU ranks).
"""

from __future__ import annotations

from tempfile import TemporaryDirectory

import pandas as pd
import torch
from accelerate import Accelerator
from torch.optim import AdamW
from transformers import get_linear_schedule_with_warmup, set_seed

import tuneplat.train
from examples.glue_mrpc import MrpcMetric, bert_tokenizer, load_mrpc, tiny_bert  # tuneplat port: offline stand-ins
from tuneplat.train import Checkpoint, DataConfig, ScalingConfig
from tuneplat.train.torch import TorchTrainer


def train_func(config):
    """Runs on every rank: fine-tune, evaluate and checkpoint once per epoch."""
    lr = config["lr"]
    seed = config["seed"]
    num_epochs = config["num_epochs"]
    train_batch_size = config["train_batch_size"]
    eval_batch_size = config["eval_batch_size"]
    train_ds_size = config["train_dataset_size"]

    set_seed(seed)

    accelerator = Accelerator()  # joins nothing itself: the group and RANK/WORLD_SIZE are tuneplat's

    metric = MrpcMetric()  # tuneplat port: was evaluate.load("glue", "mrpc")

    # this rank's shards of the two splits (each pass over an iterable below is one epoch)
    train_ds = tuneplat.train.get_dataset_shard("train")
    eval_ds = tuneplat.train.get_dataset_shard("validation")

    tokenizer = bert_tokenizer()  # tuneplat port: was AutoTokenizer.from_pretrained("bert-base-cased")

    def collate_fn(batch):  # a dict of numpy columns (text columns: object arrays) -> the model's inputs
        encoded = tokenizer(list(batch["sentence1"]), list(batch["sentence2"]),
                            truncation=True, padding="longest", return_tensors="pt")
        encoded["labels"] = torch.LongTensor(batch["label"])
        return {name: tensor.to(accelerator.device) for name, tensor in encoded.items()}

    train_dataloader = train_ds.iter_torch_batches(batch_size=train_batch_size, collate_fn=collate_fn)
    eval_dataloader = eval_ds.iter_torch_batches(batch_size=eval_batch_size, collate_fn=collate_fn)

    # tuneplat port: was AutoModelForSequenceClassification.from_pretrained("bert-base-cased", return_dict=True)
    model = tiny_bert()
    optimizer = AdamW(params=model.parameters(), lr=lr)
    steps_per_epoch = train_ds_size // (accelerator.num_processes * train_batch_size)
    lr_scheduler = get_linear_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=100,
                                                   num_training_steps=steps_per_epoch * num_epochs)

    # DDP around the model (the data are sharded already)
    model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)

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
            unwrapped_model = accelerator.unwrap_model(model)
            accelerator.save(unwrapped_model, f"{tmpdir}/ckpt_{epoch}.bin")  # written by the main process only
            checkpoint = Checkpoint.from_directory(tmpdir)
            tuneplat.train.report(metrics=eval_metric, checkpoint=checkpoint)


if __name__ == "__main__":
    config = {
        "lr": 2e-5,
        "num_epochs": 3,
        "seed": 42,
        "train_batch_size": 16,
        "eval_batch_size": 32,
    }

    mrpc = load_mrpc()  # tuneplat port: was datasets.load_dataset("glue", "mrpc")
    datasets = {  # tuneplat port: was ray.data.from_huggingface(split) for each split
        "train": pd.DataFrame(mrpc["train"]),
        "validation": pd.DataFrame(mrpc["validation"]),
    }
    config["train_dataset_size"] = len(datasets["train"])  # tuneplat port: was ray_datasets["train"].count()

    trainer = TorchTrainer(
        train_func,
        train_loop_config=config,
        datasets=datasets,
        dataset_config=DataConfig(datasets_to_split=["train", "validation"]),
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),  # tuneplat port: Ray: num_workers=4, use_gpu=True
    )

    result = trainer.fit()
