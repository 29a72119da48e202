"""Ray Train's DeepSpeed example (BERT fine-tuned with ZeRO-3, data from a DataLoader), on tuneplat.

The port of Ray's ``python/ray/train/examples/deepspeed/deepspeed_torch_trainer_no_raydata.py``: the same calls in
the same order, with ``tuneplat`` imports in place of ``ray``. ``deepspeed.initialize`` builds the engine, the
ZeRO-3 optimizer, the learning-rate scheduler and the training data loader from ``deepspeed_config`` (a
module-level name the training function reads, set under ``if __name__ == "__main__":``: the function travels to
the ranks by value, with that global); every rank writes its own ZeRO partition with ``model.save_checkpoint`` and
reports its folder, and tuneplat gathers the folders into one checkpoint.

Lines that differ from Ray's, each marked ``# tuneplat port:``:

- the downloads: ``bert-base-cased``, its tokenizer and GLUE MRPC are replaced by the offline stand-ins of
  :mod:`examples.glue_mrpc` (a 2-layer BERT, generated sentence pairs);
- CPU ranks: ``fp16`` off (DeepSpeed's fp16 needs a GPU), ``torch_adam`` on (DeepSpeed's fused Adam would first
  compile a C++ op for its CPU accelerator), ``ScalingConfig(num_workers=2, use_gpu=False)`` (Ray: 4 GPUs);
- ``print`` of ``result.best_checkpoints`` (Ray's script evaluates it and drops the value).

Run it from the checkout's root: ``python -m examples.deepspeed_torch_trainer_no_raydata`` (2 CPU ranks, minutes).
DeepSpeed's loader forks 2 worker processes per rank each epoch: on Python 3.10.0-3.10.14 and 3.11.0-3.11.9 such a
fork can hang (CPython gh-112275), which tuneplat's ranks guard against; one later hang is not explained yet
(docs/frameworks.md, "A loader worker that never started").
"""

from __future__ import annotations

from tempfile import TemporaryDirectory

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator
from torch.utils.data import DataLoader
from torchmetrics.classification import BinaryAccuracy, BinaryF1Score
from transformers import set_seed

import tuneplat.train
from examples.glue_mrpc import bert_tokenizer, load_mrpc, tiny_bert  # tuneplat port: offline stand-ins
from tuneplat.train import Checkpoint, ScalingConfig
from tuneplat.train.torch import TorchTrainer


def train_func(config):
    """Runs on every rank: fine-tune, evaluate and checkpoint once per epoch."""
    set_seed(config["seed"])
    num_epochs = config["num_epochs"]
    eval_batch_size = config["eval_batch_size"]

    # tuneplat port: was AutoModelForSequenceClassification.from_pretrained("bert-base-cased", return_dict=True)
    model = tiny_bert()

    mrpc = load_mrpc()  # tuneplat port: was datasets.load_dataset("glue", "mrpc")
    tokenizer = bert_tokenizer()  # tuneplat port: was AutoTokenizer.from_pretrained("bert-base-cased")

    def collate_fn(rows):
        encoded = tokenizer([row["sentence1"] for row in rows], [row["sentence2"] for row in rows],
                            truncation=True, padding="longest", return_tensors="pt")
        encoded["labels"] = torch.LongTensor([row["label"] for row in rows])
        return encoded

    # every rank evaluates the whole validation split; DeepSpeed makes the (sharded) training loader below
    eval_dataloader = DataLoader(mrpc["validation"], shuffle=False, collate_fn=collate_fn,
                                 batch_size=eval_batch_size, drop_last=True)

    model, optimizer, train_dataloader, lr_scheduler = deepspeed.initialize(
        model=model,
        model_parameters=model.parameters(),
        training_data=mrpc["train"],
        collate_fn=collate_fn,
        config=deepspeed_config,  # the module-level dict set under __main__
    )
    device = get_accelerator().device_name(model.local_rank)

    f1 = BinaryF1Score().to(device)
    accuracy = BinaryAccuracy().to(device)

    for epoch in range(num_epochs):
        model.train()
        for batch in train_dataloader:
            batch = {name: tensor.to(device) for name, tensor in batch.items()}
            loss = model(**batch).loss
            model.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()

        model.eval()
        for batch in eval_dataloader:
            batch = {name: tensor.to(device) for name, tensor in batch.items()}
            with torch.no_grad():
                logits = model(**batch).logits
            predictions = logits.argmax(dim=-1)
            f1.update(predictions, batch["labels"])
            accuracy.update(predictions, batch["labels"])

        # compute() gathers every rank's counts over torch.distributed first
        eval_metric = {"f1": f1.compute().item(), "accuracy": accuracy.compute().item()}
        f1.reset()
        accuracy.reset()

        if model.global_rank == 0:
            print(f"epoch {epoch}:", eval_metric)

        with TemporaryDirectory() as tmpdir:
            model.save_checkpoint(tmpdir)  # this rank's ZeRO-3 partition (rank 0 also the tag file)
            torch.distributed.barrier()  # every rank has written before any reports
            # every rank reports its folder: they end up in the same checkpoint
            tuneplat.train.report(metrics=eval_metric, checkpoint=Checkpoint.from_directory(tmpdir))


if __name__ == "__main__":
    deepspeed_config = {
        # tuneplat port: torch_adam (CPU ranks: DeepSpeed's fused Adam compiles a C++ op on first use)
        "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "torch_adam": True}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}},
        "fp16": {"enabled": False},  # tuneplat port: Ray enables fp16 (GPUs); DeepSpeed's fp16 needs one
        "bf16": {"enabled": False},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "none"},
            "offload_param": {"device": "none"},
        },
        "gradient_accumulation_steps": 1,
        "gradient_clipping": True,
        "steps_per_print": 10,
        "train_micro_batch_size_per_gpu": 16,
        "wall_clock_breakdown": False,
    }

    training_config = {
        "seed": 42,
        "num_epochs": 3,
        "eval_batch_size": 32,
        "deepspeed_config": deepspeed_config,
    }

    trainer = TorchTrainer(
        train_func,
        train_loop_config=training_config,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),  # tuneplat port: Ray: num_workers=4, use_gpu=True
    )
    result = trainer.fit()

    print("best checkpoints:", result.best_checkpoints)  # tuneplat port: printed
