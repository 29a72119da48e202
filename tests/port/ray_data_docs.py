"""Ray Train's "Data Loading and Preprocessing" guide (doc/source/train/user-guides/data-loading-preprocessing.md,
Ray 2.60), its examples ported to tuneplat: imports changed from ``ray`` to ``tuneplat``, and only the lines that
build the datasets changed from Ray Data to Dask. Each changed line carries a ``# Ray:`` comment with the original.
The training functions are Ray's, unchanged (one ``print`` of each batch is kept as Ray wrote it).

Ray's examples read from ``s3://anonymous@ray-example-data``; this machine has no network, so the same files are
made locally first (``make_files``): the paths are the only other change.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import torch

import tuneplat as ray  # Ray: import ray
from tuneplat import train  # Ray: from ray import train
from tuneplat.train import ScalingConfig  # Ray: from ray.train import Checkpoint, ScalingConfig
from tuneplat.train.torch import TorchTrainer  # Ray: from ray.train.torch import TorchTrainer


def make_files(folder: str) -> dict[str, str]:
    """Local stand-ins for Ray's example files (same columns and format)."""
    rng = np.random.default_rng(0)
    sms = os.path.join(folder, "sms_spam_collection_subset.txt")
    with open(sms, "w", encoding="utf-8") as f:
        for i in range(300):
            f.write(f"{'spam' if i % 7 == 0 else 'ham'}\tmessage number {i}\n")
    iris = os.path.join(folder, "iris.parquet")
    pd.DataFrame({"sepal.length": rng.uniform(4, 8, 150), "sepal.width": rng.uniform(2, 4.5, 150),
                  "petal.length": rng.uniform(1, 7, 150), "petal.width": rng.uniform(0.1, 2.5, 150),
                  "variety": rng.choice(["Setosa", "Versicolor", "Virginica"], 150)}).to_parquet(iris)
    return {"sms": sms, "iris": iris}


# ---------------------------------------------------------------------- Quickstart (PyTorch tab)
def quickstart(scaling_config: ScalingConfig, **trainer_kw):
    import dask.bag as db  # (added)

    from tuneplat.train.data import map_batches  # (added)

    # Set this to True to use GPU.
    # If False, do CPU training instead of GPU training.
    use_gpu = False  # noqa: F841 - (Ray passes it to ScalingConfig; the test passes its own scaling_config)

    # Step 1: Create a Ray Dataset from in-memory Python lists.
    # You can also create a Ray Dataset from many other sources and file
    # formats.
    train_dataset = db.from_sequence([{"x": [x], "y": [2 * x]} for x in range(200)], npartitions=4)
    # Ray: train_dataset = ray.data.from_items([{"x": [x], "y": [2 * x]} for x in range(200)])

    # Step 2: Preprocess your Ray Dataset.
    def increment(batch):
        batch["y"] = batch["y"] + 1
        return batch

    train_dataset = map_batches(train_dataset, increment)  # Ray: train_dataset = train_dataset.map_batches(increment)

    def train_func():
        batch_size = 16

        # Step 4: Access the dataset shard for the training worker via
        # ``get_dataset_shard``.
        train_data_shard = train.get_dataset_shard("train")
        # `iter_torch_batches` returns an iterable object that
        # yield tensor batches. Ray Data automatically moves the Tensor batches
        # to GPU if you enable GPU training.
        train_dataloader = train_data_shard.iter_torch_batches(
            batch_size=batch_size, dtypes=torch.float32
        )

        for epoch_idx in range(1):  # noqa: B007 - Ray's line
            for batch in train_dataloader:
                inputs, labels = batch["x"], batch["y"]
                assert type(inputs) == torch.Tensor  # noqa: E721 - Ray's line
                assert type(labels) == torch.Tensor  # noqa: E721
                assert inputs.shape[0] == batch_size
                assert labels.shape[0] == batch_size
                # Only check one batch for demo purposes.
                # Replace the above with your actual model training code.
                break
        train.report({"x0": float(inputs[0, 0]), "y0": float(labels[0, 0]), "shape": list(inputs.shape)})  # (added)

    # Step 3: Create a TorchTrainer. Specify the number of training workers and
    # pass in your Ray Dataset.
    # The Ray Dataset is automatically split across all training workers.
    trainer = TorchTrainer(
        train_func,
        datasets={"train": train_dataset},
        scaling_config=scaling_config,  # Ray: ScalingConfig(num_workers=2, use_gpu=use_gpu)
        **trainer_kw,
    )
    result = trainer.fit()
    return result


# ---------------------------------------------------------------------- Splitting datasets
def splitting(files: dict[str, str], **trainer_kw):
    import dask.dataframe as dd  # (added)

    ds = dd.read_csv(files["sms"], sep="\t", names=["label", "text"])
    # Ray: ds = ray.data.read_text("s3://anonymous@ray-example-data/sms_spam_collection_subset.txt")
    train_ds, val_ds = ds.random_split([0.7, 0.3], random_state=0)  # Ray: ds.train_test_split(0.3)

    def train_loop_per_worker():
        seen = {"train": 0, "val": 0}  # (added: what the test checks)
        # Get the sharded training dataset
        train_ds = train.get_dataset_shard("train")
        for _ in range(2):
            for batch in train_ds.iter_batches(batch_size=128):
                print("Do some training on batch", batch)
                seen["train"] += len(batch["text"])  # (added)

        # Get the unsharded full validation dataset
        val_ds = train.get_dataset_shard("val")
        for _ in range(2):
            for batch in val_ds.iter_batches(batch_size=128):
                print("Do some evaluation on batch", batch)
                seen["val"] += len(batch["text"])  # (added)
        train.report(seen)  # (added)

    my_trainer = TorchTrainer(
        train_loop_per_worker,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": train_ds, "val": val_ds},
        dataset_config=ray.train.DataConfig(
            datasets_to_split=["train"],
        ),
        **trainer_kw,
    )
    return my_trainer.fit(), (len(train_ds), len(val_ds))


# ---------------------------------------------------------------------- Reproducibility
def reproducibility(files: dict[str, str], **trainer_kw):
    import dask.dataframe as dd  # (added)

    # Preserve ordering in Ray Datasets for reproducibility.
    # Ray: ctx = ray.data.DataContext.get_current(); ctx.execution_options.preserve_order = True
    # (Dask keeps partition order; the reshuffle of it per epoch is seeded by DataConfig(seed=...))

    ds = dd.read_csv(files["sms"], sep="\t", names=["label", "text"])
    # Ray: ds = ray.data.read_text("s3://anonymous@ray-example-data/sms_spam_collection_subset.txt")

    def train_loop_per_worker():
        it = train.get_dataset_shard("train")
        order = []
        for batch in it.iter_batches(batch_size=32, local_shuffle_buffer_size=64, local_shuffle_seed=7):
            order.extend(batch["text"].tolist())
        train.report({"order": "|".join(order)})

    return TorchTrainer(train_loop_per_worker, scaling_config=ScalingConfig(num_workers=2), datasets={"train": ds},
                        dataset_config=ray.train.DataConfig(randomize_block_order=True, seed=3),
                        # Ray: ds.randomize_block_order(seed=3)
                        **trainer_kw).fit()


# ---------------------------------------------------------------------- Performance tips
def prefetching(files: dict[str, str], **trainer_kw):
    import dask.dataframe as dd  # (added)

    ds = dd.read_csv(files["sms"], sep="\t", names=["label", "text"])
    # Ray: ds = ray.data.read_text("s3://anonymous@ray-example-data/sms_spam_collection_subset.txt")

    def train_loop_per_worker():
        rows = 0  # (added)
        # Get an iterator to the dataset we passed in below.
        it = train.get_dataset_shard("train")
        for _ in range(2):
            # Prefetch 10 batches at a time.
            for batch in it.iter_batches(batch_size=128, prefetch_batches=10):
                print("Do some training on batch", batch)
                rows += len(batch["text"])  # (added)
        train.report({"rows": rows})  # (added)

    my_trainer = TorchTrainer(
        train_loop_per_worker,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": ds},
        **trainer_kw,
    )
    return my_trainer.fit()


def caching(files: dict[str, str], cluster, **trainer_kw):
    import dask.dataframe as dd  # (added)

    # Load the data.
    train_ds = dd.read_parquet(files["iris"])
    # Ray: train_ds = ray.data.read_parquet("s3://anonymous@ray-example-data/iris.parquet")

    # Define a preprocessing function.
    def normalize_length(batch):  # Ray: (batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray] (here a DataFrame)
        new_col = batch["sepal.length"] / np.max(batch["sepal.length"])
        batch["normalized.sepal.length"] = new_col
        del batch["sepal.length"]
        return batch

    # Preprocess the data. Transformations that are made before the materialize call
    # below are only run once.
    train_ds = train_ds.map_partitions(normalize_length)  # Ray: train_ds.map_batches(normalize_length)

    # Materialize the dataset in object store memory.
    # Only do this if train_ds is small enough to fit in object store memory.
    train_ds = cluster.persist(train_ds)  # Ray: train_ds = train_ds.materialize()  (cluster: a dask Client)

    # Dummy augmentation transform.
    def augment_data(batch):
        return batch

    # Add per-epoch preprocessing. Transformations that you want to run per-epoch, such
    # as data augmentation or randomization, should go after the materialize call.
    train_ds = train_ds.map_partitions(augment_data)  # Ray: train_ds.map_batches(augment_data)

    # Pass train_ds to the Trainer
    def train_loop_per_worker():  # (added: a loop to pass it to)
        cols = set()
        biggest = 0.0
        for batch in train.get_dataset_shard("train").iter_batches(batch_size=32):
            cols |= set(batch)
            biggest = max(biggest, float(np.max(batch["normalized.sepal.length"])))
        train.report({"columns": sorted(cols), "max": biggest})

    return TorchTrainer(train_loop_per_worker, scaling_config=ScalingConfig(num_workers=2),
                        datasets={"train": train_ds}, **trainer_kw).fit()
