"""Datasets sharded to the ranks from Dask (``TorchTrainer(datasets=...)``, ``train.get_dataset_shard``).

Two ranks on real Dask worker processes (the session's LocalCluster), joined by gloo.
"""

from __future__ import annotations

import glob
import json
import os
import random

import dask.array as da
import dask.dataframe as dd
import data_trainables as dt
import numpy as np
import pandas as pd
import pytest

import tuneplat as tune
from tuneplat import train
from tuneplat.train import DataConfig, TrainingFailedError
from tuneplat.train.data._plan import epoch_order, plan_shard
from tuneplat.train.torch import TorchTrainer


def _rc(storage: str, name: str) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False)


def _fit(fn, datasets, storage, name, client, loop=None, trainer_class=TorchTrainer, **kw):
    trainer = trainer_class(fn, train_loop_config=loop or {}, datasets=datasets,
                           scaling_config=tune.ScalingConfig(num_workers=2), run_config=_rc(storage, name),
                           client=client, **kw)
    return trainer.fit()


def _seen(result, epochs: int = 2) -> list[list[dict]]:
    """[epoch][rank] -> what the rank recorded."""
    out = []
    for e in range(epochs):
        row = []
        for r in range(2):
            with open(os.path.join(result.path, f"rank{r}_epoch{e}.json"), encoding="utf-8") as f:
                row.append(json.load(f))
        out.append(row)
    return out


def _check_exact_once(seen: list[list[dict]], total: int) -> None:
    for ranks in seen:
        a, b = (set(r["ids"]) for r in ranks)
        assert len(a) == len(ranks[0]["ids"]) and len(b) == len(ranks[1]["ids"]), "a row read twice by one rank"
        assert not a & b, f"rows read by both ranks: {sorted(a & b)[:5]}"
        assert len(a) == len(b) == total // 2, (len(a), len(b))
        assert len(a | b) == total - total % 2  # the remainder (fewer rows than ranks) is not read
        assert ranks[0]["batches"] == ranks[1]["batches"], "ranks yield different numbers of batches"


# ---------------------------------------------------------------------- the plan (pure)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_plan_reads_every_row_once_and_gives_equal_rows(world):
    rng = random.Random(world)
    for trial in range(50):
        lengths = [rng.randint(0, 40) for _ in range(rng.randint(1, 12))]
        order = epoch_order(len(lengths), trial, seed=3, shuffle=True)
        hosts = [rng.choice(["a", "b", None]) for _ in lengths] if trial % 2 else None
        rank_hosts = [rng.choice(["a", "b"]) for _ in range(world)] if trial % 2 else None
        rows: list[tuple[int, int]] = []
        counts = []
        for r in range(world):
            plan = plan_shard(lengths, world, r, order, part_hosts=hosts, rank_hosts=rank_hosts)
            counts.append(sum(s.rows for s in plan))
            rows += [(s.part, i) for s in plan for i in range(s.start, s.stop)]
        assert len(set(rows)) == len(rows)
        assert counts == [sum(lengths) // world] * world
        assert sum(lengths) - len(rows) < world


def test_plan_prefers_partitions_on_the_ranks_host():
    lengths = [10] * 8
    hosts = ["a", "b"] * 4
    plan0 = plan_shard(lengths, 2, 0, list(range(8)), part_hosts=hosts, rank_hosts=["a", "b"])
    plan1 = plan_shard(lengths, 2, 1, list(range(8)), part_hosts=hosts, rank_hosts=["a", "b"])
    assert [s.part for s in plan0] == [0, 2, 4, 6]
    assert [s.part for s in plan1] == [1, 3, 5, 7]


def test_epoch_order_is_deterministic_for_a_seed_and_changes_per_epoch():
    assert epoch_order(20, 0, 1, True) == epoch_order(20, 0, 1, True)
    assert epoch_order(20, 0, 1, True) != epoch_order(20, 1, 1, True)
    assert epoch_order(5, 3, 1, False) == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------------- on the cluster, 2 ranks
def test_dataframe_exact_once_equal_batches_reshuffled_unsplit_whole(dask_client, storage):
    total = 203  # odd: one row is the documented remainder
    df = pd.DataFrame({"id": np.arange(total), "x": np.random.default_rng(0).random(total)})
    val = pd.DataFrame({"id": np.arange(1000, 1040)})
    result = _fit(dt.record, {"train": dd.from_pandas(df, npartitions=9), "val": val}, storage, "frame", dask_client,
                  loop={"epochs": 2, "whole": "val"},
                  dataset_config=DataConfig(datasets_to_split=["train"], randomize_block_order=True, seed=5))
    seen = _seen(result)
    _check_exact_once(seen, total)
    assert seen[0][0]["ids"] != seen[1][0]["ids"], "the partition order was not reshuffled between epochs"
    for ranks in seen:
        for r in ranks:
            assert r["whole"] == list(range(1000, 1040)), "an unsplit dataset goes whole to every rank"
    sizes = seen[0][0]["sizes"]
    assert all(s == 7 for s in sizes[:-1]) and sizes[-1] == (total // 2) % 7


def test_dask_array_exact_once(dask_client, storage):
    n = 120
    arr = da.from_array(np.stack([np.arange(n), np.arange(n) * 2], axis=1), chunks=(25, 1))  # rechunked to rows
    result = _fit(dt.record, {"train": arr}, storage, "array", dask_client,
                  loop={"column": "data", "epochs": 2, "reuse": True})  # one iterable, looped over at each epoch
    _check_exact_once(_seen(result), n)


def test_parquet_files_on_disk_with_preprocessing(dask_client, storage, tmp_path):
    total = 150
    for i in range(5):
        part = pd.DataFrame({"id": np.arange(i * 30, (i + 1) * 30), "v": np.ones(30)})
        part.to_parquet(tmp_path / f"part{i}.parquet")
    ddf = dd.read_parquet(str(tmp_path / "*.parquet")).map_partitions(lambda d: d.assign(w=d.v * 2))
    result = _fit(dt.record, {"train": ddf}, storage, "parquet_mp", dask_client, loop={"epochs": 2, "batch_size": 16})
    _check_exact_once(_seen(result), total)
    # a path (glob) is read with dask.dataframe.read_parquet
    result = _fit(dt.record, {"train": str(tmp_path / "*.parquet")}, storage, "parquet_path", dask_client,
                  loop={"epochs": 1, "batch_size": 16, "iter_kwargs": {"local_shuffle_buffer_size": 40,
                                                                       "local_shuffle_seed": 1}})
    _check_exact_once(_seen(result, 1), total)


def test_csv_with_fewer_partitions_than_ranks(dask_client, storage, tmp_path):
    path = tmp_path / "one.csv"
    pd.DataFrame({"id": np.arange(41)}).to_csv(path, index=False)
    result = _fit(dt.record, {"train": [str(path)]}, storage, "csv", dask_client, loop={"epochs": 1},
                  trainer_class=train.DataParallelTrainer)
    _check_exact_once(_seen(result, 1), 41)


def test_torch_batches_on_the_rank_device(dask_client, storage):
    df = pd.DataFrame({"x": np.arange(64, dtype="int64"), "y": np.ones(64)})
    result = _fit(dt.torch_batches, {"train": df}, storage, "torch", dask_client)
    device = result.metrics["device"]
    assert result.metrics["rows"] == 32
    assert [list(s) for s in result.metrics["seen"]] == [["x", "torch.float32", device], ["y", "torch.float32", device]]


def test_tuner_with_asha_over_a_persisted_dataset(dask_client, storage):
    rng = np.random.default_rng(1)
    df = pd.DataFrame(rng.random((256, 3)), columns=["a", "b", "c"])
    df["y"] = df.a - 2 * df.b + 0.5 * df.c
    ddf = dask_client.persist(dd.from_pandas(df, npartitions=4))  # trials share it: read from the workers' memory
    trainer = TorchTrainer(dt.train_linear, train_loop_config={"epochs": 3}, datasets={"train": ddf},
                           scaling_config=tune.ScalingConfig(num_workers=2))
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {"lr": tune.grid_search([0.01, 0.1, 0.3])}},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=tune.schedulers.ASHAScheduler(
                          max_t=3, grace_period=1, reduction_factor=2)),
                      run_config=_rc(storage, "asha"), client=dask_client).fit()
    assert not grid.errors, grid.errors
    assert len(grid) == 3
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    assert iterations[-1] == 3 and all(1 <= i <= 3 for i in iterations)  # (ASHA's stops depend on arrival order)
    assert all(np.isfinite(r.metrics["loss"]) for r in grid)


def test_on_the_embedded_tls_cluster(storage):
    """No client given: the embedded cluster (TLS by default); the ranks' Dask clients speak TLS too."""
    trainer = TorchTrainer(dt.read_on_tls, datasets={"train": pd.DataFrame({"id": np.arange(90)})},
                           scaling_config=tune.ScalingConfig(num_workers=2), run_config=_rc(storage, "tls"))
    result = trainer.fit()
    assert result.metrics["scheme"] == "tls"
    assert result.metrics["rows"] == 45


# ---------------------------------------------------------------------- errors
def test_failing_preprocessing_names_the_partition_and_keeps_the_traceback(dask_client, storage):
    df = pd.DataFrame({"id": np.arange(100)})
    ddf = dd.from_pandas(df, npartitions=10).map_partitions(dt.failing_preprocess)
    with pytest.raises(TrainingFailedError) as info:
        _fit(dt.record, {"train": ddf}, storage, "failing", dask_client)
    text = str(info.value)
    assert "partition 3 (of 10)" in text and "bad row in the input" in text
    trace = info.value.__cause__.traceback  # the rank's traceback: the user's function where it raised
    assert 'in failing_preprocess\n    raise ValueError("bad row in the input")' in trace


def test_unknown_dataset_name_lists_the_given_ones(dask_client, storage):
    with pytest.raises(TrainingFailedError, match=r"no such dataset; the trainer was given \['train', 'val'\]"):
        _fit(dt.bad_name, {"train": pd.DataFrame({"id": [1, 2]}), "val": pd.DataFrame({"id": [3]})}, storage,
             "badname", dask_client)


def test_bad_inputs_are_refused_at_construction():
    with pytest.raises(TypeError, match="a dask.dataframe.DataFrame, a dask.array.Array, a dask.bag.Bag"):
        TorchTrainer(dt.record, datasets={"train": {1, 2, 3}})
    with pytest.raises(ValueError, match="cannot tell the file format"):
        TorchTrainer(dt.record, datasets={"train": "data/file.json"})
    with pytest.raises(ValueError, match=r"names \['tset'\], which are not among the trainer's datasets \['train'\]"):
        TorchTrainer(dt.record, datasets={"train": pd.DataFrame({"id": [1]})},
                     dataset_config=DataConfig(datasets_to_split=["tset"]))
    with pytest.raises(TypeError, match="dataset_config must be a tuneplat.train.DataConfig"):
        TorchTrainer(dt.record, datasets={"train": pd.DataFrame({"id": [1]})}, dataset_config={"split": "all"})


def test_get_dataset_shard_outside_a_trial():
    with pytest.raises(RuntimeError, match="called outside a trial"):
        train.get_dataset_shard("train")


def test_restore_needs_the_datasets_again(dask_client, storage):
    trainer = TorchTrainer(dt.record, train_loop_config={"epochs": 1}, datasets={"train": pd.DataFrame({"id": [1, 2]})},
                           scaling_config=tune.ScalingConfig(num_workers=2), run_config=_rc(storage, "restore"),
                           client=dask_client)
    result = trainer.fit()
    folder = os.path.dirname(result.path)
    assert glob.glob(os.path.join(folder, "trainer.pkl"))
    with pytest.raises(ValueError, match=r"was given datasets \['train'\]: pass them again"):
        TorchTrainer.restore(folder)


# ---------------------------------------------------------------------- bounded memory
@pytest.mark.slow
def test_streaming_keeps_driver_and_ranks_far_below_the_dataset(tmp_path, storage):
    """~350 MB of Parquet, 2 epochs on 2 ranks: the driver's and each rank's RSS grow by a small part of it.

    A rank holds about ``prefetch_partitions + 1`` partitions (here 3 MB each) and its worker those it computed
    for either rank: after the first batch (imports and Arrow's pools, whose size depends on the machine, not on the
    data), the growth depends on the partition size, not on the dataset's, and the second epoch holds no more.
    """
    from cluster_fixtures import local_client

    folder = tmp_path / "big"
    folder.mkdir()
    cols, rows, files = 50, 15_000, 80  # float32, 3 MB a partition in memory (random: Parquet cannot shrink it)
    rng = np.random.default_rng(0)
    for i in range(files):
        frame = pd.DataFrame(rng.random((rows, cols), dtype=np.float32), columns=[f"f{j}" for j in range(cols)])
        frame.to_parquet(folder / f"part{i:03d}.parquet", compression=None)
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size > 300e6
    with local_client(2) as client:  # fresh worker processes: their RSS is this test's
        trainer = TorchTrainer(dt.stream_and_measure, datasets={"train": str(folder / "*.parquet")},
                               scaling_config=tune.ScalingConfig(num_workers=2), run_config=_rc(storage, "mem"),
                               client=client)
        with dt.PeakRSS() as driver:
            result = trainer.fit()
    ranks = []
    for r in range(2):
        with open(os.path.join(result.path, f"mem{r}.json"), encoding="utf-8") as f:
            ranks.append(json.load(f))
    assert sum(m["rows"] for m in ranks) == 2 * rows * files  # 2 epochs of every row
    growth = [m["peak"] - m["before"] for m in ranks]
    print([{k: (round(v / 1e6) if k != "epoch_peaks" else [round(x / 1e6) for x in v]) for k, v in m.items()
            if k != "rows"} for m in ranks])
    print(f"dataset {size / 1e6:.0f} MB on disk; driver RSS {driver.before / 1e6:.0f} -> peak {driver.peak / 1e6:.0f} MB;"
          f" ranks' RSS growth {[round(g / 1e6) for g in growth]} MB, peaks {[round(m['peak'] / 1e6) for m in ranks]} MB")
    assert driver.peak - driver.before < size / 8, "the driver held a large part of the dataset"
    for m, g in zip(ranks, growth):
        # what the first batch costs (imports, Arrow's pools and threads: 96 MB here, ~130 MB on a larger CI machine)
        # does not depend on the dataset; after it, a rank holds a few partitions, not its 174 MB half of the data
        assert m["peak"] - m["warm"] < size / 8, f"a rank's RSS grew by {(m['peak'] - m['warm']) / 1e6:.0f} MB after" \
            f" its first batch, for a {size / 1e6:.0f} MB dataset"
        assert m["epoch_peaks"][1] - m["epoch_peaks"][0] < size / 16, "the second epoch held more than the first"
        assert g < size / 2, f"a rank's RSS grew by {g / 1e6:.0f} MB for a {size / 1e6:.0f} MB dataset"


def test_public_names():
    import tuneplat.train.data as data

    assert data.__all__ == sorted(data.__all__)
    assert all(hasattr(data, n) for n in data.__all__)
    for name in ("DataConfig", "DataIterator", "get_dataset_shard"):
        assert name in train.__all__ and getattr(train, name) is getattr(data, name)
    assert train.__all__ == sorted(train.__all__)
