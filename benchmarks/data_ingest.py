"""Rows per second from Parquet files into a training loop: tuneplat's 2 ranks against what one engineer writes.

Compared, in one run, on the same generated Parquet files (``--features`` float32 columns + a float32 label,
``--row-group`` rows per row group) and the same loop body (the batch's feature columns stacked into a
``(B, features)`` tensor and a linear model's forward pass; batches of ``--batch`` rows):

  tuneplat          TorchTrainer(datasets={"train": folder}), 2 ranks, iter_torch_batches(batch_size=1024,
                    dtypes=torch.float32): each rank reads its row groups itself (plain Parquet: no Dask graph)
  reader            one process reading the files row group by row group with pyarrow, each column converted
                    Arrow -> numpy -> torch once per row group, batches sliced from it (the limit of one process)
  dataloader        torch DataLoader over that reader: an IterableDataset dealing the row groups to 2 workers,
                    each yielding whole row groups as column tensors (batch_size=None: one hand-over per row
                    group, not per batch), the batches sliced from them in the main process
  ray               Ray Train's TorchTrainer(datasets={"train": ray.data.read_parquet(folder)}), 2 workers,
                    the same iter_torch_batches call (only when Ray imports; ray.init(num_cpus=4))

Figures per epoch: rows / the slowest rank's (worker's) epoch time, and the Parquet bytes read / that time (MB/s);
for the reader and tuneplat also the CPU seconds their processes spent per million rows (all ranks together), a
figure a loaded machine changes less than rows/s, and their minor page faults per million rows (which it does not
change).
The JSON gives every epoch, the best warm epoch (after the first), each rank's (worker's, process's) peak RSS
during the epochs, and the ratios against ``reader`` and the best of ``reader``/``dataloader``. The machine's load
average at the start and the end is recorded: on a shared machine, read the ratios within one run.

Usage:
  python benchmarks/data_ingest.py                  # 1,000,000 rows x 33 float32 columns, 3 epochs; one JSON
  python benchmarks/data_ingest.py --rows 2000000   # the issue's size
  python benchmarks/data_ingest.py --only tuneplat --only reader --no-ray
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------------- the data
def make_files(folder: str, rows: int, files: int, features: int, row_group: int) -> int:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    per = rows // files
    for i in range(files):
        x = rng.random((per, features), dtype=np.float32)
        cols = {f"f{j}": x[:, j] for j in range(features)}
        cols["y"] = x.sum(axis=1)
        pq.write_table(pa.table(cols), os.path.join(folder, f"part-{i:03d}.parquet"), row_group_size=row_group)
    return per * files


class PeakRSS:
    """This process's largest RSS while the block runs (sampled every 5 ms)."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.peak = self._proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _faults() -> int:
    """Minor page faults of this process so far (every thread)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def step(batch: dict, model: object, features: int) -> int:
    """The loop body every contender runs on a batch (dict of column tensors)."""
    import torch

    x = torch.stack([batch[f"f{j}"] for j in range(features)], dim=1)
    model(x).squeeze(1).sub_(batch["y"]).pow_(2).mean()  # type: ignore[operator]
    return len(x)


# ---------------------------------------------------------------------- (2) one process, (3) DataLoader
def row_group_batches(files: list[str], groups: list[tuple[int, int]], batch: int | None):
    """The hand-written reader: each (file, row group) read with pyarrow, columns -> tensors once, batches sliced
    (``batch`` None: whole row groups)."""
    import warnings

    import pyarrow.parquet as pq
    import torch

    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    open_files: dict[int, object] = {}
    for fi, rg in groups:
        pf = open_files.get(fi)
        if pf is None:
            open_files.clear()
            pf = open_files[fi] = pq.ParquetFile(files[fi])
        table = pf.read_row_group(rg, use_threads=False)  # type: ignore[attr-defined]
        cols = {name: torch.from_numpy(table.column(name).to_numpy()) for name in table.column_names}
        n = table.num_rows
        step = batch or n
        for i in range(0, n, step):
            yield {k: v[i:i + step] for k, v in cols.items()}


def _groups(files: list[str]) -> list[tuple[int, int]]:
    import pyarrow.parquet as pq

    return [(fi, rg) for fi, f in enumerate(files) for rg in range(pq.ParquetFile(f).metadata.num_row_groups)]


def child_reader(folder: str, epochs: int, batch: int, features: int, workers: int, out: str) -> None:
    """Runs in a fresh process (so that its peak RSS is its own): ``workers`` 0 = the reader, else a DataLoader."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    groups = _groups(files)
    rss_dir = os.path.dirname(out)

    class RowGroups(IterableDataset):
        def __iter__(self):
            info = get_worker_info()
            mine = groups if info is None else groups[info.id::info.num_workers]
            with PeakRSS() as mem:
                yield from row_group_batches(files, mine, None)
            if info is not None:
                with open(os.path.join(rss_dir, f"dl_worker{info.id}_{os.getpid()}.json"), "w") as f:
                    json.dump({"worker": info.id, "peak": mem.peak}, f)

    model = torch.nn.Linear(features, 1)
    per_epoch = []
    with PeakRSS() as mem:
        for _ in range(epochs):
            if workers:
                groups_in = DataLoader(RowGroups(), batch_size=None, num_workers=workers)
                it = ({k: v[i:i + batch] for k, v in g.items()} for g in groups_in
                      for i in range(0, len(g["y"]), batch))
            else:
                it = row_group_batches(files, groups, batch)
            rows = 0
            t, cpu, flt = time.perf_counter(), time.process_time(), _faults()
            with torch.no_grad():
                for b in it:
                    rows += step(b, model, features)
            per_epoch.append((rows, time.perf_counter() - t, time.process_time() - cpu, _faults() - flt))
    peaks = [mem.peak]  # this process, then each DataLoader worker (the largest over the epochs' processes)
    by_worker: dict[int, int] = {}
    for name in sorted(os.listdir(rss_dir)):
        if name.startswith("dl_worker"):
            with open(os.path.join(rss_dir, name)) as f:
                got = json.load(f)
            by_worker[got["worker"]] = max(by_worker.get(got["worker"], 0), got["peak"])
    peaks += [by_worker[w] for w in sorted(by_worker)]
    with open(out, "w") as f:
        json.dump({"per_epoch": per_epoch, "peak_rss": peaks}, f)


def run_child(folder: str, epochs: int, batch: int, features: int, workers: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"child{workers}", "out.json")
    os.makedirs(os.path.dirname(out))
    subprocess.run([sys.executable, os.path.abspath(__file__), "--child", folder, str(epochs), str(batch),
                    str(features), str(workers), out], check=True)
    with open(out) as f:
        got = json.load(f)
    per_epoch = [tuple(e) for e in got["per_epoch"]]
    if workers:  # the workers' CPU time is not this process's: no CPU figure
        per_epoch = [(r, s, None, None) for r, s, _c, _f in per_epoch]
    return {"per_epoch": per_epoch, "peak_rss": got["peak_rss"]}


# ---------------------------------------------------------------------- (1) tuneplat, (4) Ray
def loop(config: dict) -> None:
    """The training loop both trainers run (``config["train"]`` names ray.train or tuneplat.train)."""
    import importlib
    import json as _json
    import os as _os
    import time as _time

    import torch
    import torch.distributed as dist

    train = importlib.import_module(config["train"])
    shard = train.get_dataset_shard("train")
    model = torch.nn.Linear(config["features"], 1)
    per_epoch = []
    batches = shard.iter_torch_batches(batch_size=config["batch"], dtypes=torch.float32)
    with PeakRSS() as mem:
        for _ in range(config["epochs"]):
            if dist.is_available() and dist.is_initialized():
                dist.barrier()  # the ranks start each epoch together
            rows = 0
            t, cpu, flt = _time.perf_counter(), _time.process_time(), _faults()
            with torch.no_grad():
                for batch in batches:
                    rows += step(batch, model, config["features"])
            per_epoch.append((rows, _time.perf_counter() - t, _time.process_time() - cpu, _faults() - flt))
    rank = train.get_context().get_world_rank()
    with open(_os.path.join(config["out"], f"rank{rank}.json"), "w", encoding="utf-8") as f:
        _json.dump({"per_epoch": per_epoch, "peak_rss": mem.peak}, f)
    train.report({"rows": sum(e[0] for e in per_epoch)})


def _ranks(folder: str) -> dict:
    ranks = []
    for r in range(2):
        with open(os.path.join(folder, f"rank{r}.json"), encoding="utf-8") as f:
            ranks.append(json.load(f))
    epochs = len(ranks[0]["per_epoch"])
    per_epoch = [(sum(rk["per_epoch"][e][0] for rk in ranks), max(rk["per_epoch"][e][1] for rk in ranks),
                  sum(rk["per_epoch"][e][2] for rk in ranks), sum(rk["per_epoch"][e][3] for rk in ranks))
                 for e in range(epochs)]
    return {"per_epoch": per_epoch, "peak_rss": [rk["peak_rss"] for rk in ranks]}


def run_tuneplat(folder: str, epochs: int, batch: int, features: int, tmp: str) -> dict:
    import tuneplat as tune
    from tuneplat.execution._cluster import Cluster
    from tuneplat.train.torch import TorchTrainer

    out = os.path.join(tmp, "tuneplat")
    os.makedirs(out)
    cluster = Cluster()  # the embedded cluster tuneplat starts by default (2 worker processes here)
    try:
        trainer = TorchTrainer(loop, train_loop_config={"train": "tuneplat.train", "epochs": epochs, "batch": batch,
                                                        "features": features, "out": out},
                               datasets={"train": folder}, scaling_config=tune.ScalingConfig(num_workers=2),
                               run_config=tune.RunConfig(name="ingest", storage_path=tmp, verbose=0, mlflow=False),
                               client=cluster.client)
        t = time.perf_counter()
        trainer.fit()
        wall = time.perf_counter() - t
    finally:
        cluster.close()
    got = _ranks(out)
    got["fit_wall_s"] = round(wall, 2)
    return got


def run_ray(folder: str, epochs: int, batch: int, features: int, tmp: str) -> dict:
    import ray
    import ray.data
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer as RayTorchTrainer

    out = os.path.join(tmp, "ray")
    os.makedirs(out)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        trainer = RayTorchTrainer(loop, train_loop_config={"train": "ray.train", "epochs": epochs, "batch": batch,
                                                           "features": features, "out": out},
                                  datasets={"train": ray.data.read_parquet(folder)},
                                  scaling_config=ScalingConfig(num_workers=2),
                                  run_config=RunConfig(name="ray_ingest", storage_path=tmp))
        t = time.perf_counter()
        trainer.fit()
        wall = time.perf_counter() - t
    finally:
        ray.shutdown()
    got = _ranks(out)
    got["per_epoch"] = [(r, t, None, None) for r, t, _c, _f in got["per_epoch"]]  # Ray Data reads in other processes
    got["fit_wall_s"] = round(wall, 2)
    got["ray_version"] = ray.__version__
    return got


# ---------------------------------------------------------------------- the run
def summary(got: dict, parquet_bytes: int) -> dict:
    per_epoch = got.pop("per_epoch")
    rates = [round(r / s) for r, s, _c, _f in per_epoch]
    mbs = [round(parquet_bytes / s / 1e6, 1) for _r, s, _c, _f in per_epoch]
    warm = rates[1:] or rates
    best = rates.index(max(warm), 1 if len(rates) > 1 else 0)
    rss = got.pop("peak_rss")
    out = {"rows_per_s_warm_best": rates[best], "parquet_MB_per_s_warm_best": mbs[best], "rows_per_s_by_epoch": rates,
           "rows_per_epoch": per_epoch[0][0], "peak_rss_MB": [round(p / 1e6) for p in rss], **got}
    cpu = [c for _r, _s, c, _f in per_epoch[1:] or per_epoch if c]
    if cpu:  # what the load does not change much: CPU seconds the readers' processes spent per million rows
        out["cpu_s_per_million_rows_warm_best"] = round(min(cpu) / per_epoch[0][0] * 1e6, 2)
    faults = [f for _r, _s, _c, f in per_epoch[1:] or per_epoch if f is not None]
    if faults:  # what the load does not change: minor page faults of the readers' processes per million rows
        out["page_faults_per_million_rows_warm"] = [round(f / per_epoch[0][0] * 1e6) for f in faults]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--row-group", type=int, default=65_536)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--only", choices=["tuneplat", "reader", "dataloader", "ray"], action="append",
                        help="run only these (repeatable)")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        folder, epochs, batch, features, workers, out_file = args.child
        child_reader(folder, int(epochs), int(batch), int(features), int(workers), out_file)
        return
    tmp = tempfile.mkdtemp(prefix="tuneplat-ingest-")
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0],
                 "batch": args.batch, "epochs": args.epochs, "columns": args.features + 1}
    try:
        folder = os.path.join(tmp, "data")
        os.makedirs(folder)
        out["rows"] = make_files(folder, args.rows, args.files, args.features, args.row_group)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        out.update(files=args.files, row_group_rows=args.row_group, parquet_bytes=size)
        only = set(args.only or ["tuneplat", "reader", "dataloader", "ray"])
        if "reader" in only:
            out["reader"] = summary(run_child(folder, args.epochs, args.batch, args.features, 0, tmp), size)
        if "dataloader" in only:
            out["dataloader"] = summary(run_child(folder, args.epochs, args.batch, args.features, 2, tmp), size)
        if "tuneplat" in only:
            out["tuneplat"] = summary(run_tuneplat(folder, args.epochs, args.batch, args.features, tmp), size)
        if "ray" in only and not args.no_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                out["ray"] = "Ray is not installed (pip install 'ray[data,train]')"
            else:
                out["ray"] = summary(run_ray(folder, args.epochs, args.batch, args.features, tmp), size)
        rate = {k: out[k]["rows_per_s_warm_best"] for k in ("reader", "dataloader") if isinstance(out.get(k), dict)}
        for key in ("tuneplat", "ray"):
            if not isinstance(out.get(key), dict):
                continue
            if "reader" in rate:
                out[f"ratio_{key}_vs_reader"] = round(out[key]["rows_per_s_warm_best"] / rate["reader"], 2)
            if rate:
                out[f"ratio_{key}_vs_best_single_node"] = round(out[key]["rows_per_s_warm_best"] / max(rate.values()),
                                                                2)
        out["load_avg_end"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
