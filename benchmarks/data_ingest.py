"""Rows per second delivered into a 2-rank training loop from Parquet files.

Compared, in one run, on the same files and the same loop body (a linear model's forward pass on each batch of
``--batch`` rows, float32 tensors):

  tuneplat_parquet    TorchTrainer(datasets={"train": dd.read_parquet(dir)}), 2 ranks, iter_torch_batches: the
                      partitions are read on the Dask workers and streamed to the ranks every epoch
  tuneplat_persisted  the same dataset persisted on the cluster first (ddf.persist()), as trials of a Tuner share it
  dataloader_memory   the whole table loaded into one process's memory, torch DataLoader(shuffle=True) over a
                      TensorDataset (one process, no ranks: the baseline the issue compares against)
  slices_memory       the same tensors, batches cut by hand (a shuffled index per epoch, x[idx[i:i+b]]): what
                      one process gets from memory without DataLoader's per-row indexing and collation
  ray_data            Ray Train's TorchTrainer(datasets={"train": ray.data.read_parquet(dir)}), 2 workers,
                      iter_torch_batches (only when Ray is importable; ray.init(num_cpus=4) so that Ray Data has
                      CPUs besides the 2 training workers)

Each framework runs ``--epochs`` epochs; the figure per epoch is all ranks' rows / the slowest rank's epoch time,
and the JSON gives each epoch plus the best of the epochs after the first (warm). The machine's load is recorded.

Usage:
  python benchmarks/data_ingest.py                 # prints one JSON object
  python benchmarks/data_ingest.py --quick         # smaller data (a smoke run)
  python benchmarks/data_ingest.py --no-ray
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FEATURES = 16


def make_files(folder: str, rows: int, files: int) -> int:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    per = rows // files
    for i in range(files):
        x = rng.random((per, FEATURES), dtype=np.float32)
        frame = pd.DataFrame(x, columns=[f"f{j}" for j in range(FEATURES)])
        frame["y"] = x.sum(axis=1)
        frame.to_parquet(os.path.join(folder, f"part-{i:03d}.parquet"))
    return per * files


def loop(config: dict) -> None:
    """The training loop both trainers run (``config["train"]`` names ray.train or tuneplat.train)."""
    import importlib
    import json as _json
    import time as _time

    import torch
    import torch.distributed as dist

    train = importlib.import_module(config["train"])
    shard = train.get_dataset_shard("train")
    model = torch.nn.Linear(FEATURES, 1)
    cols = [f"f{j}" for j in range(FEATURES)]
    per_epoch = []
    for epoch in range(config["epochs"]):
        rows = 0
        t = _time.perf_counter()
        with torch.no_grad():
            for batch in shard.iter_torch_batches(batch_size=config["batch"], dtypes=torch.float32):
                x = torch.stack([batch[c] for c in cols], dim=1)
                model(x).squeeze(1).sub_(batch["y"]).pow_(2).mean()
                rows += len(x)
        took = torch.tensor([_time.perf_counter() - t], dtype=torch.float64)
        n = torch.tensor([rows], dtype=torch.float64)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            dist.all_reduce(n, op=dist.ReduceOp.SUM)
        per_epoch.append(round(float(n) / float(took), 1))
        if train.get_context().get_world_rank() == 0:  # (Ray Train 2.60 keeps no metrics reported without checkpoint)
            with open(config["out"], "w", encoding="utf-8") as f:
                _json.dump({"per_epoch": per_epoch, "rows": int(n)}, f)
        train.report({"epoch": epoch, "rows": int(n)})


def _summary(per_epoch: list[float], rows: int) -> dict:
    warm = per_epoch[1:] or per_epoch
    return {"rows_per_s_by_epoch": per_epoch, "rows_per_s_warm_best": max(warm), "rows_per_epoch": rows}


def run_tuneplat(folder: str, epochs: int, batch: int, persist: bool, storage: str, client: object) -> dict:
    import dask.dataframe as dd

    import tuneplat as tune
    from tuneplat.train.torch import TorchTrainer

    ddf = dd.read_parquet(folder)
    if persist:
        ddf = client.persist(ddf)  # type: ignore[attr-defined]
    figures = os.path.join(storage, f"tuneplat_{int(persist)}.json")
    trainer = TorchTrainer(loop, train_loop_config={"train": "tuneplat.train", "epochs": epochs, "batch": batch,
                                                    "out": figures},
                           datasets={"train": ddf}, scaling_config=tune.ScalingConfig(num_workers=2),
                           run_config=tune.RunConfig(name=f"ingest_{int(persist)}", storage_path=storage, verbose=0,
                                                     mlflow=False), client=client)
    t = time.perf_counter()
    trainer.fit()
    wall = time.perf_counter() - t
    out = _read(figures)
    out["fit_wall_s"] = round(wall, 2)
    return out


def _read(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        got = json.load(f)
    return _summary(got["per_epoch"], got["rows"])


def run_dataloader(folder: str, epochs: int, batch: int) -> dict:
    import pandas as pd
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    t = time.perf_counter()
    frame = pd.read_parquet(folder)
    x = torch.from_numpy(frame[[f"f{j}" for j in range(FEATURES)]].to_numpy().copy())
    y = torch.from_numpy(frame["y"].to_numpy())
    load_s = time.perf_counter() - t
    model = torch.nn.Linear(FEATURES, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)
    per_epoch = []
    for _ in range(epochs):
        rows = 0
        t = time.perf_counter()
        with torch.no_grad():
            for xb, yb in loader:
                model(xb).squeeze(1).sub_(yb).pow_(2).mean()
                rows += len(xb)
        per_epoch.append(round(rows / (time.perf_counter() - t), 1))
    out = _summary(per_epoch, rows)
    out["load_into_memory_s"] = round(load_s, 2)
    per_epoch = []
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        rows = 0
        t = time.perf_counter()
        idx = torch.randperm(len(x), generator=g)
        with torch.no_grad():
            for i in range(0, len(x), batch):
                take = idx[i:i + batch]
                xb, yb = x[take], y[take]
                model(xb).squeeze(1).sub_(yb).pow_(2).mean()
                rows += len(xb)
        per_epoch.append(round(rows / (time.perf_counter() - t), 1))
    out["slices"] = _summary(per_epoch, rows)
    return out


def run_ray(folder: str, epochs: int, batch: int, storage: str) -> dict:
    import ray
    import ray.data
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer as RayTorchTrainer

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        ds = ray.data.read_parquet(folder)
        figures = os.path.join(storage, "ray.json")
        trainer = RayTorchTrainer(loop, train_loop_config={"train": "ray.train", "epochs": epochs, "batch": batch,
                                                           "out": figures},
                                  datasets={"train": ds}, scaling_config=ScalingConfig(num_workers=2),
                                  run_config=RunConfig(name="ray_ingest", storage_path=storage))
        t = time.perf_counter()
        trainer.fit()
        wall = time.perf_counter() - t
        out = _read(figures)
        out["fit_wall_s"] = round(wall, 2)
        out["ray_version"] = ray.__version__
        return out
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--only", choices=["dataloader", "tuneplat", "ray"], action="append",
                        help="run only these (repeatable)")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    rows = args.rows or (200_000 if args.quick else 600_000)
    files = 8 if args.quick else 24
    tmp = tempfile.mkdtemp(prefix="tuneplat-ingest-")
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0],
                 "batch": args.batch, "epochs": args.epochs, "features": FEATURES + 1, "files": files}
    try:
        folder = os.path.join(tmp, "data")
        os.makedirs(folder)
        out["rows"] = make_files(folder, rows, files)
        out["parquet_bytes"] = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        only = set(args.only or ["dataloader", "tuneplat", "ray"])
        if "dataloader" in only:
            out["dataloader_memory"] = run_dataloader(folder, args.epochs, args.batch)
            out["slices_memory"] = out["dataloader_memory"].pop("slices")
        if "tuneplat" in only:
            from tuneplat.execution._cluster import Cluster

            cluster = Cluster()  # the embedded cluster tuneplat starts by default (2 worker processes here)
            try:
                out["tuneplat_parquet"] = run_tuneplat(folder, args.epochs, args.batch, False, tmp, cluster.client)
                out["tuneplat_persisted"] = run_tuneplat(folder, args.epochs, args.batch, True, tmp, cluster.client)
            finally:
                cluster.close()
        try:
            import ray  # noqa: F401
        except ImportError:
            out["ray_data"] = "Ray is not installed (pip install 'ray[data]')"
        else:
            if not args.no_ray and "ray" in only:
                out["ray_data"] = run_ray(folder, args.epochs, args.batch, tmp)
        for ref in ("dataloader_memory", "slices_memory"):
            base = out.get(ref, {}).get("rows_per_s_warm_best")
            for key in ("tuneplat_parquet", "tuneplat_persisted", "ray_data"):
                if base and isinstance(out.get(key), dict):
                    out[f"ratio_{key}_vs_{ref}"] = round(out[key]["rows_per_s_warm_best"] / base, 2)
        out["load_avg_end"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
