"""Module-level training loops for the data-ingest tests (Dask workers import them by reference)."""

from __future__ import annotations

import json
import os

import tuneplat.train as train


def record(config: dict) -> None:
    """Reads ``config["name"]`` for ``config["epochs"]`` epochs; writes what each rank saw to the trial folder."""
    ctx = train.get_context()
    shard = train.get_dataset_shard(config.get("name", "train"))
    kw = config.get("iter_kwargs", {})
    once = shard.iter_batches(batch_size=config.get("batch_size", 7), **kw)  # made once, looped over every epoch
    for epoch in range(config.get("epochs", 2)):
        ids: list = []
        batches = 0
        sizes = []
        each = once if config.get("reuse") else shard.iter_batches(batch_size=config.get("batch_size", 7), **kw)
        for batch in each:
            col = batch[config.get("column", "id")]
            ids.extend(int(v) for v in (col[:, 0] if col.ndim > 1 else col))
            batches += 1
            sizes.append(len(col))
        seen = {"ids": ids, "batches": batches, "sizes": sizes, "world": ctx.get_world_size()}
        if "whole" in config:
            seen["whole"] = sorted(int(v) for b in train.get_dataset_shard(config["whole"]).iter_batches(batch_size=50)
                                   for v in b["id"])
        path = os.path.join(ctx.get_trial_dir(), f"rank{ctx.get_world_rank()}_epoch{epoch}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(seen, f)
        train.report({"epoch": epoch, "batches": batches})


def torch_batches(config: dict) -> None:
    """Reads tensors; reports their types, dtypes and devices."""
    import torch

    from tuneplat.train.torch import get_device

    shard = train.get_dataset_shard()
    seen = set()
    rows = 0
    for batch in shard.iter_torch_batches(batch_size=16, dtypes=torch.float32):
        for name, t in batch.items():
            assert isinstance(t, torch.Tensor), type(t)
            seen.add((name, str(t.dtype), str(t.device)))
        rows += len(batch["x"])
    train.report({"seen": sorted(seen), "rows": rows, "device": str(get_device())})


def train_linear(config: dict) -> None:
    """A small DDP regression over the shard, one report per epoch (for ASHA)."""
    import torch

    from tuneplat.train.torch import prepare_model

    model = prepare_model(torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    shard = train.get_dataset_shard("train")
    for _ in range(config.get("epochs", 3)):
        total, n = 0.0, 0
        for batch in shard.iter_torch_batches(batch_size=32, dtypes=torch.float32):
            x = torch.stack([batch["a"], batch["b"], batch["c"]], dim=1)
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(x)
            n += len(x)
        train.report({"loss": total / max(n, 1)})


def bad_name(config: dict) -> None:
    train.get_dataset_shard("nope")


def failing_preprocess(df):
    """A user's preprocessing that fails on one partition."""
    if len(df) and int(df["id"].iloc[0]) == 30:
        raise ValueError("bad row in the input")
    return df


class PeakRSS:
    """The largest resident set size of this process while the block runs, sampled every few milliseconds."""

    def __init__(self, every_s: float = 0.005) -> None:
        import threading

        import psutil

        self._proc = psutil.Process()
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.before = self.peak = self._proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def stream_and_measure(config: dict) -> None:
    """Two epochs over the shard as torch batches; reports this rank's RSS before, after the first batch (imports
    and buffers that do not depend on the dataset are paid by then) and at each epoch's peak."""
    import torch

    ctx = train.get_context()
    shard = train.get_dataset_shard("train")
    rows, peaks, warm = 0, [], None
    with PeakRSS() as mem:
        for _ in range(2):
            with PeakRSS() as epoch:
                for batch in shard.iter_torch_batches(batch_size=4096, dtypes=torch.float32):
                    rows += len(batch["f0"])
                    if warm is None:
                        warm = epoch._proc.memory_info().rss
            peaks.append(epoch.peak)
    path = os.path.join(ctx.get_trial_dir(), f"mem{ctx.get_world_rank()}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"before": mem.before, "warm": warm, "peak": mem.peak, "epoch_peaks": peaks, "rows": rows}, f)
    train.report({"rows": rows})


def read_on_tls(config: dict) -> None:
    """Reads the shard; reports the scheduler's address scheme the rank's Dask client used."""
    from distributed import get_worker

    rows = sum(len(b["id"]) for b in train.get_dataset_shard().iter_batches(batch_size=10))
    train.report({"rows": rows, "scheme": get_worker().scheduler.address.split("://")[0]})


def gpu_batches(config: dict) -> None:
    """Reads tensors with device="auto" (and with collate_fn); reports where they landed and a step's loss."""
    import torch

    from tuneplat.train.torch import get_device, prepare_model

    model = prepare_model(torch.nn.Linear(2, 1))
    shard = train.get_dataset_shard("train")
    devices = set()
    loss = torch.zeros(())
    for batch in shard.iter_torch_batches(batch_size=32, dtypes=torch.float32):
        devices |= {str(t.device) for t in batch.values()}
        x = torch.stack([batch["a"], batch["b"]], dim=1)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), batch["y"])
        loss.backward()
    collated = next(iter(shard.iter_torch_batches(batch_size=8, collate_fn=lambda b: torch.as_tensor(b["a"]))))
    train.report({"devices": sorted(devices), "device": str(get_device()), "loss": loss.item(),
                  "collated": str(collated.device)})


def tensor_columns(config: dict) -> None:
    """Reads torch batches; writes each column's type, dtype and shape, and the rows' ids and first values."""
    import torch

    ctx = train.get_context()
    shard = train.get_dataset_shard("train")
    kinds: dict = {}
    rows: list = []
    for batch in shard.iter_torch_batches(batch_size=config.get("batch_size", 16), dtypes=config.get("dtypes")):
        for name, v in batch.items():
            kinds[name] = [type(v).__name__, str(v.dtype), list(v.shape[1:])]
        ids = batch["id"].tolist()
        for i, row_id in enumerate(ids):
            rows.append([row_id] + [(batch[c][i].tolist() if isinstance(batch[c], torch.Tensor)
                                     else repr(batch[c][i])) for c in config["show"]])
    path = os.path.join(ctx.get_trial_dir(), f"cols{ctx.get_world_rank()}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"kinds": kinds, "rows": rows}, f)
    train.report({"rows": len(rows)})


def one_epoch(config: dict) -> None:
    """One epoch of numpy batches; reports the rows read."""
    rows = sum(len(b[config.get("column", "id")]) for b in train.get_dataset_shard().iter_batches(batch_size=64))
    train.report({"rows": rows})


def fails_after_reading(config: dict) -> None:
    """Reads its shard, then fails (an errored trial)."""
    rows = sum(len(b["id"]) for b in train.get_dataset_shard().iter_batches(batch_size=64))
    raise RuntimeError(f"failing on purpose after {rows} rows")


def measure_epoch(config: dict) -> None:
    """One epoch of torch batches, this rank's RSS sampled before and during it (every few ms).

    The small dataset ``"warm"`` (same columns) is read first: what the first read of Parquet costs once per
    process (pyarrow's Parquet reader loaded, its allocator's arenas, the threads' stacks) is then paid before the
    measured epoch, whose growth is what the data held costs.
    """
    import torch

    ctx = train.get_context()
    for _ in train.get_dataset_shard("warm").iter_torch_batches(batch_size=1024, dtypes=torch.float32):
        pass
    shard = train.get_dataset_shard("train")
    rows = 0
    batches = shard.iter_torch_batches(batch_size=1024, dtypes=torch.float32)
    with PeakRSS(every_s=0.002) as mem:
        for batch in batches:
            rows += len(batch["f0"])
    path = os.path.join(ctx.get_trial_dir(), f"mem{ctx.get_world_rank()}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"before": mem.before, "peak": mem.peak, "rows": rows}, f)
    train.report({"rows": rows})


def batch_page_faults(config: dict) -> None:
    """Reads its shard, then makes 300 tensors of 128 KiB (a (1024, 32) float32 batch, as torch.stack makes in a
    loop) one after another; reports the page faults this thread took doing so, and Dask's malloc setting."""
    import os
    import resource

    import torch

    rows = sum(len(b["id"]) for b in train.get_dataset_shard().iter_torch_batches(batch_size=64))
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(300):
        torch.ones(1024, 32)  # pages touched: a fresh mapping faults all 32 of them
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
    train.report({"rows": rows, "faults": faults, "trim_env": os.environ.get("MALLOC_TRIM_THRESHOLD_", "")})
