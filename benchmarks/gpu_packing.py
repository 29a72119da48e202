"""GPU trials packed by memory (``{"GPU_memory": ...}``) vs by fraction (``{"GPU": 0.25}``) vs one at a time.

One GPU, ``--trials`` identical matmul trials (``--mib`` MiB of matrices, ``--steps`` reports of ``--inner``
matmuls each), MLflow off, the embedded Dask cluster (one worker process per core). Modes:

* ``whole``: ``{"GPU": 1}``, one trial at a time (the reference);
* ``fraction``: ``{"GPU": 0.25}``, four at a time, whatever they need;
* ``memory``: a probe trial runs first and reports its peak (``gpu_memory_peak_bytes``); the others ask
  ``{"GPU_memory": 1.25 x peak + 512 MiB}`` (allocator slack and the CUDA context), so as many share the device
  as its memory allows (bounded by the worker processes);
* ``auto``: ``{"GPU_memory": "auto"}``: the tuner does the above itself (the first trial alone on the device,
  the others sized from its measured peak, ``docs/resources.md``), with no probe run.

Per mode: wall time of ``fit()``, trials per hour, the largest per-trial peak reported, and the device's peak
memory in use (``nvidia-smi``, sampled every 0.2 s). Runs in well under 3 minutes on an H100. Prints JSON.

    python benchmarks/gpu_packing.py [--trials 16] [--mib 256] [--steps 10] [--inner 20]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time

# this folder has a schedulers.py of its own: import the project's packages, not it
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import tuneplat as tune  # noqa: E402


def matmul_load(config: dict) -> None:
    import torch

    from tuneplat.train.torch import get_device

    device = get_device()
    n = int((int(config["mib"]) * 2**20 / 4 / 3) ** 0.5)
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for step in range(int(config["steps"])):
        for _ in range(int(config["inner"])):
            c = a @ b
        torch.cuda.synchronize(device)
        tune.report({"value": float(c[0, 0]), "step": step})


class DevicePeak:
    """Largest ``memory.used`` of GPU 0 seen by ``nvidia-smi`` while running."""

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                      "-i", "0"], capture_output=True, text=True, timeout=5).stdout
                self.peak_mib = max(self.peak_mib, float(out.strip().splitlines()[0]))
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                pass
            self._stop.wait(0.2)

    def __enter__(self) -> DevicePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(mode: str, resources: dict, trials: int, space: dict, storage: str) -> dict:
    with DevicePeak() as device:
        t0 = time.perf_counter()
        grid = tune.Tuner(tune.with_resources(matmul_load, resources), param_space=space,
                          tune_config=tune.TuneConfig(num_samples=trials),
                          run_config=tune.RunConfig(name=mode, storage_path=storage, verbose=0, mlflow=False)).fit()
        wall = time.perf_counter() - t0
    errors = [str(r.error) for r in grid if r.error]
    peaks = [r.metrics.get("gpu_memory_peak_bytes", 0) for r in grid if r.metrics]
    assert grid.experiment_path is not None
    with open(os.path.join(grid.experiment_path, "journal.jsonl"), encoding="utf-8") as f:
        events = [json.loads(line) for line in f if line.strip()]
    running = most = 0
    for e in events:
        if e.get("event") == "trial_start":
            running += 1
            most = max(most, running)
        elif e.get("event") == "trial_end":
            running -= 1
    return {"resources": {k: (f"{v / 2**20:.0f}MiB" if k.lower() == "gpu_memory" and not isinstance(v, str) else v)
                          for k, v in resources.items()},
            "wall_s": round(wall, 2), "trials_per_hour": round(trials / wall * 3600, 1),
            "max_trials_at_once": most, "trial_peak_mib": round(max(peaks, default=0) / 2**20, 1),
            "device_peak_mib": device.peak_mib, "errors": errors[:3]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--inner", type=int, default=20)
    args = parser.parse_args()
    logging.getLogger("tuneplat").setLevel(logging.ERROR)
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "needs an NVIDIA GPU"}))
        return
    space = {"mib": args.mib, "steps": args.steps, "inner": args.inner}
    out: dict = {"device": torch.cuda.get_device_name(0), "cpus": os.cpu_count(), "trials": args.trials,
                 "workload": space, "modes": {}}
    with tempfile.TemporaryDirectory() as storage:
        probe = run("probe", {"cpu": 1, "gpu": 1}, 1, space, storage)
        peak_bytes = probe["trial_peak_mib"] * 2**20
        want = 1.25 * peak_bytes + 512 * 2**20
        out["probe"] = probe
        out["modes"]["whole"] = run("whole", {"cpu": 1, "gpu": 1}, args.trials, space, storage)
        out["modes"]["fraction"] = run("fraction", {"cpu": 1, "gpu": 0.25}, args.trials, space, storage)
        out["modes"]["memory"] = run("memory", {"cpu": 1, "gpu_memory": want}, args.trials, space, storage)
        out["modes"]["auto"] = run("auto", {"cpu": 1, "gpu_memory": "auto"}, args.trials, space, storage)
    whole = out["modes"]["whole"]["wall_s"]
    out["speedup_vs_whole"] = {m: round(whole / r["wall_s"], 2) for m, r in out["modes"].items()}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
