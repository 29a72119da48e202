"""How often a rank's forked ``DataLoader`` workers hang, with and without tuneplat's fork guard (CPython gh-112275).

    python benchmarks/fork_guard.py                  # 5 pairs of runs, 300 epochs each
    python benchmarks/fork_guard.py --pairs 3 --epochs 100

Each run is a fresh driver (``python benchmarks/fork_guard.py --run N``) fitting a 2-rank ``TorchTrainer`` on the
embedded cluster whose ranks, each epoch, read 256 rows through ``DataLoader(num_workers=2)`` (2 worker processes
forked from the rank) and then ``all_reduce`` a tensor over gloo: the pattern of Ray's no-Ray-Data DeepSpeed
example. A loader worker that never starts shows as the ``DataLoader``'s own timeout (30 s; an epoch takes ~0.1 s),
which fails the trial. Runs alternate ``TUNEPLAT_FORK_GUARD=0`` and ``1`` (ABBA). Prints JSON: for each side, the
runs, how many hung and at which epoch, and the seconds per run. Only the affected Pythons (3.10.0-3.10.14,
3.11.0-3.11.9) can hang; on others both sides are the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADER_TIMEOUT_S = 30


def train_func(config):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    import tuneplat.train

    data = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
    for epoch in range(config["epochs"]):
        rows = 0
        try:
            for _x, y in DataLoader(data, batch_size=16, num_workers=2, shuffle=True, timeout=LOADER_TIMEOUT_S):
                rows += y.shape[0]
        except RuntimeError as exc:  # "DataLoader timed out": a worker that never started
            raise RuntimeError(f"HUNG at epoch {epoch}: {exc}") from None
        total = torch.tensor([float(rows)])
        dist.all_reduce(total)
        if epoch % 50 == 0 or epoch == config["epochs"] - 1:
            tuneplat.train.report({"epoch": epoch, "rows": total.item()})


def one_run(epochs: int) -> None:
    sys.path.insert(0, ROOT)  # before benchmarks/ (its schedulers.py would shadow the schedulers package)
    from tuneplat.train import RunConfig, ScalingConfig
    from tuneplat.train.torch import TorchTrainer

    error = ""
    with tempfile.TemporaryDirectory() as storage:
        try:  # (Trainer.fit raises when training failed, as Ray's does)
            TorchTrainer(train_func, train_loop_config={"epochs": epochs}, scaling_config=ScalingConfig(num_workers=2),
                         run_config=RunConfig(storage_path=storage, name="fork_guard")).fit()
        except Exception as exc:  # noqa: BLE001 - what failed is the measurement
            error = str(exc)
    hung = "HUNG at epoch " in error
    epoch = int(error.split("HUNG at epoch ")[1].split(":")[0]) if hung else None
    print("RUN " + json.dumps({"hung": hung, "epoch": epoch, "error": None if hung else (error[:300] or None)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one fit in this process (used by the pairs)
    args = parser.parse_args()
    if args.run is not None:
        one_run(args.run)
        return
    sides: dict[str, dict] = {g: {"runs": 0, "hung": 0, "hung_at_epoch": [], "seconds": [], "other_errors": []}
                              for g in ("guard_off", "guard_on")}
    for pair in range(args.pairs):
        order = ("0", "1") if pair % 2 == 0 else ("1", "0")  # ABBA
        for flag in order:
            side = sides["guard_on" if flag == "1" else "guard_off"]
            env = {**os.environ, "TUNEPLAT_FORK_GUARD": flag, "TUNEPLAT_PLAIN_PROGRESS": "1"}
            start = time.monotonic()
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", str(args.epochs)], env=env,
                                  capture_output=True, text=True, timeout=1800, cwd=ROOT)
            side["seconds"].append(round(time.monotonic() - start, 1))
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RUN ")]
            if not lines:
                raise SystemExit(f"the run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
            run = json.loads(lines[-1][4:])
            side["runs"] += 1
            if run["hung"]:
                side["hung"] += 1
                side["hung_at_epoch"].append(run["epoch"])
            elif run["error"]:
                side["other_errors"].append(run["error"])
    print(json.dumps({"benchmark": "fork_guard", "python": sys.version.split()[0], "epochs_per_run": args.epochs,
                      "loader_forks_per_run": args.epochs * 2 * 2, **sides,
                      "loadavg": open("/proc/loadavg").read().split()[:3]}, indent=2))


if __name__ == "__main__":
    main()
