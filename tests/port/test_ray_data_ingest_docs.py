"""Ray Train's data-ingest guide, ported (tests/port/ray_data_docs.py): each example runs on 2 ranks."""

from __future__ import annotations

import ray_data_docs as docs

import tuneplat as tune


def _kw(storage, name, client):
    return {"run_config": tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False), "client": client}


def test_quickstart(dask_client, storage):
    result = docs.quickstart(tune.ScalingConfig(num_workers=2), **_kw(storage, "quick", dask_client))
    assert result.metrics["shape"] == [16, 1]
    assert result.metrics["y0"] == 2 * result.metrics["x0"] + 1  # the preprocessing ran


def test_splitting_train_split_val_whole(dask_client, storage, tmp_path):
    result, (n_train, n_val) = docs.splitting(docs.make_files(str(tmp_path)), **_kw(storage, "split", dask_client))
    assert result.metrics["train"] == 2 * (n_train // 2)  # 2 epochs of this rank's half
    assert result.metrics["val"] == 2 * n_val  # 2 epochs of the whole validation set


def test_reproducibility_same_seeds_same_order(dask_client, storage, tmp_path):
    files = docs.make_files(str(tmp_path))
    a = docs.reproducibility(files, **_kw(storage, "repro_a", dask_client))
    b = docs.reproducibility(files, **_kw(storage, "repro_b", dask_client))
    assert a.metrics["order"] == b.metrics["order"]
    assert a.metrics["order"].count("|") + 1 == 150


def test_prefetching(dask_client, storage, tmp_path):
    result = docs.prefetching(docs.make_files(str(tmp_path)), **_kw(storage, "prefetch", dask_client))
    assert result.metrics["rows"] == 2 * 150


def test_caching_the_preprocessed_dataset(dask_client, storage, tmp_path):
    result = docs.caching(docs.make_files(str(tmp_path)), dask_client, **_kw(storage, "cache", dask_client))
    assert "sepal.length" not in result.metrics["columns"] and "normalized.sepal.length" in result.metrics["columns"]
    assert result.metrics["max"] <= 1.0
