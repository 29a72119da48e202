"""Device check of the ranks' GPU sampler (NVML, and nvidia-smi) on a real GPU kept busy by a matmul loop.

Usage (on a GPU machine, from the checkout; the tuneplat package's own imports are bypassed so that
only torch and psutil are needed): python benchmarks/gpu_sampler_check.py

Prints one JSON object: which backends were found, an idle sample, a sample under load and its cost.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name, _path in (("tuneplat", "tuneplat"), ("tuneplat.train", "tuneplat/train")):
    _mod = types.ModuleType(_name)
    _mod.__path__ = [os.path.join(sys.path[0], _path)]
    sys.modules[_name] = _mod  # (the package's __init__ needs dask & co., absent on some GPU images)

from tuneplat.train._telemetry import RankMonitor, _Gpu  # noqa: E402


def main() -> None:
    import torch

    out: dict = {}
    gpu = _Gpu([0])
    out["nvml"], out["nvidia_smi"], out["idle"] = gpu.nvml is not None, gpu.smi, gpu.sample()
    stop = threading.Event()

    def burn() -> None:
        x = torch.randn(8192, 8192, device="cuda")
        while not stop.is_set():
            x @ x
            torch.cuda.synchronize()

    t = threading.Thread(target=burn, daemon=True)
    t.start()
    time.sleep(3)
    monitor = RankMonitor(0, [0], system_metrics_s=1e-9)
    monitor.snapshot()
    time.sleep(1)
    t0 = time.perf_counter()
    out["busy"] = monitor.snapshot()
    out["sample_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    if gpu.smi:
        gpu.nvml = None
        t0 = time.perf_counter()
        out["busy_nvidia_smi"] = gpu.sample()
        out["nvidia_smi_sample_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    stop.set()
    t.join()
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
