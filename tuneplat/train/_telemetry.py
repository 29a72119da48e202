"""What a rank tells the tuner about itself, off the report path: progress, throughput and system metrics.

The heartbeat thread (``_session.Heartbeat``) sends ``("ping", stats)`` every
``heartbeat_s``; ``stats`` comes from :meth:`RankMonitor.snapshot`: the rank's
state, steps and samples per second since the previous ping, time spent
waiting for data vs training when a prepared data loader (or a dataset shard)
tells it, and every ``TUNEPLAT_SYSTEM_METRICS_S`` seconds (default 5) the
process's CPU %, resident memory and, where NVML (``pynvml``) or
``nvidia-smi`` is present, the utilisation and memory of the rank's GPUs.
Sampling runs in the heartbeat thread: ``report()`` never waits for it.

Counting is cheap (a few integer additions per batch); nothing here blocks.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from typing import Any

from .._settings import env_seconds
from ._lock_wait import LockWatch

__all__ = ["RankMonitor", "system_metrics_period"]

logger = logging.getLogger("tuneplat")

def system_metrics_period() -> float:
    """Seconds between system-metric samples (``TUNEPLAT_SYSTEM_METRICS_S``, default 5; 0: off), read by the tuner."""
    return env_seconds("TUNEPLAT_SYSTEM_METRICS_S", 5)


class _Gpu:
    """GPU utilisation and memory of some device indices: NVML when importable, else ``nvidia-smi``."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.nvml: Any = None
        self.smi = shutil.which("nvidia-smi") if ids else None
        if not ids:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML here: nvidia-smi (or nothing)
            self.nvml = None

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.nvml is not None:
            try:
                for i in self.ids:
                    h = self.nvml.nvmlDeviceGetHandleByIndex(i)
                    out[f"gpu_{i}_utilization_percentage"] = float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu)
                    out[f"gpu_{i}_memory_usage_megabytes"] = self.nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
                return out
            except Exception:  # noqa: BLE001
                logger.debug("tuneplat: NVML sample failed", exc_info=True)
        if self.smi:
            try:
                text = subprocess.run([self.smi, "--query-gpu=index,utilization.gpu,memory.used",
                                       "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                      timeout=5).stdout
                for line in text.splitlines():
                    parts = [p.strip() for p in line.split(",")]
                    if len(parts) == 3 and parts[0].isdigit() and int(parts[0]) in self.ids:
                        out[f"gpu_{parts[0]}_utilization_percentage"] = float(parts[1])
                        out[f"gpu_{parts[0]}_memory_usage_megabytes"] = float(parts[2])
            except (OSError, ValueError, subprocess.SubprocessError):
                self.smi = None
        return out


class RankMonitor:
    """One rank's counters (written by the training thread) and sampled system metrics (read by the heartbeat)."""

    def __init__(self, rank: int, gpu_ids: list[int], system_metrics_s: float | None = None,
                 stale_lock_s: float | None = None) -> None:
        self.rank = rank
        self.period = system_metrics_period() if system_metrics_s is None else system_metrics_s
        self.device = f"cuda:{gpu_ids[0]}" if gpu_ids else "cpu"
        self.state = "starting"
        self.steps = 0  # batches drawn from a prepared loader, else reports
        self.loader_steps = 0
        self.reports = 0
        self.samples = 0
        self.data_wait_s = 0.0  # time spent waiting for the next batch
        self.wait_known = False  # some step said how long it waited for its data
        self.last_report_at: float | None = None
        self._lock = threading.Lock()
        self._prev: tuple[float, int, int, float] | None = None  # (time, steps, samples, data wait) at the last snapshot
        self._system: dict[str, float] = {}
        self._system_at = 0.0
        self._proc: Any = None
        self._gpu: _Gpu | None = None
        self._gpu_ids = list(gpu_ids)
        self._locks = LockWatch(stale_lock_s)

    # ------------------------------------------------------------------ written by the training thread
    def on_report(self, metrics: dict[str, Any]) -> None:
        self.reports += 1
        self.last_report_at = time.time()
        n = metrics.get("num_samples")
        if isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0:
            self.samples += int(n)

    def on_batch(self, samples: int, waited_s: float | None = None) -> None:
        """One training step of ``samples`` samples; ``waited_s``: time spent waiting for its data, if known."""
        self.loader_steps += 1
        self.samples += samples
        if waited_s is not None:
            self.wait_known = True
            self.data_wait_s += waited_s

    # ------------------------------------------------------------------ read by the heartbeat thread
    def _sample_system(self, now: float) -> None:
        period = self.period
        if period <= 0 or now - self._system_at < period:
            return
        self._system_at = now
        try:
            if self._proc is None:
                import psutil

                self._proc = psutil.Process(os.getpid())
                self._proc.cpu_percent(None)  # the first call only starts the measurement
                self._gpu = _Gpu(self._gpu_ids)
            mem = self._proc.memory_info()
            system = {"cpu_utilization_percentage": float(self._proc.cpu_percent(None)),
                      "process_memory_rss_megabytes": mem.rss / 2**20}
            if self._gpu is not None:
                system.update(self._gpu.sample())
            self._system = system
        except Exception:  # noqa: BLE001 - psutil missing or the process table unreadable: no system metrics
            logger.debug("tuneplat: system metrics sample failed", exc_info=True)

    def snapshot(self) -> dict[str, Any]:
        """The rank's row for the tuner (a small dict of plain values)."""
        now = time.monotonic()
        self._sample_system(now)
        steps = self.loader_steps or self.reports
        out: dict[str, Any] = {"state": self.state, "device": self.device, "steps": steps, "samples": self.samples,
                               "last_report_at": self.last_report_at}
        prev, self._prev = self._prev, (now, steps, self.samples, self.data_wait_s)
        if prev is not None and now > prev[0]:
            dt = now - prev[0]
            out["steps_per_s"] = (steps - prev[1]) / dt
            if self.samples:
                out["samples_per_s"] = (self.samples - prev[2]) / dt
            if self.wait_known:
                waited = self.data_wait_s - prev[3]
                out["data_wait_fraction"] = min(1.0, max(0.0, waited / dt))
        if self.wait_known:
            out["data_wait_s"] = self.data_wait_s
        try:
            stale = self._locks.check(now)
        except Exception:  # noqa: BLE001 - a diagnostic: never let it stop the heartbeat
            logger.debug("tuneplat: looking for lock waits failed", exc_info=True)
            stale = None
        if stale is not None:
            out["stale_lock"] = stale
        if self._system:
            out["system"] = dict(self._system)
            out["system_at"] = time.time()
        return out
