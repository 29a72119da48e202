"""A ``DataLoader(num_workers=2)`` epoch inside a rank: loader workers started with ``fork`` (tuneplat's ranks now,
as Ray's) vs ``spawn`` (what a Dask worker process defaults to, the build before), same run, same worker process.

    python benchmarks/loader_workers.py [--rows 32] [--epochs 3]

Prints JSON: the median epoch time for each start method and the ratio. The dataset is a class defined in this
script (``__main__``): with ``spawn`` it cannot be pickled to the loader workers, so the ``spawn`` figure uses an
importable ``TensorDataset`` of the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def epoch_times(rows: int, epochs: int, method: str, script_class: bool) -> list[float]:
    import torch
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    class Squares(Dataset):  # defined here, as in a user's script
        def __len__(self) -> int:
            return rows

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.tensor(float(i * i))

    data = Squares() if script_class else TensorDataset(torch.arange(rows, dtype=torch.float32) ** 2)
    out = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for _batch in DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context=method):
            pass
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.daemon": False}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        client.run(lambda: __import__("torch"))  # (torch imported in the worker beforehand, as in a rank)
        fork = client.submit(epoch_times, args.rows, args.epochs, "fork", True, pure=False).result()
        spawn = client.submit(epoch_times, args.rows, args.epochs, "spawn", False, pure=False).result()
    f, s = statistics.median(fork), statistics.median(spawn)
    print(json.dumps({"rows": args.rows, "epochs": args.epochs, "fork_epoch_s": round(f, 4),
                      "spawn_epoch_s": round(s, 4), "spawn_over_fork": round(s / f, 1),
                      "loadavg": os.getloadavg()[0], "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
