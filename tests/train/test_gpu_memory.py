"""GPU memory on a real device: peak memory reported, packing by GPU_memory, OOM recorded and retried smaller.

Marked ``gpu`` and skipped without CUDA (run with ``pytest -m gpu`` on the device machine).
"""

from __future__ import annotations

import json
import os

import gpumem_trainables as gm
import pytest
import torch

import tuneplat as tune

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


def _rc(storage: str, name: str, **kw) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **kw)


def _events(grid):
    with open(os.path.join(grid.experiment_path, "journal.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_ranks_report_their_peak_gpu_memory(storage):
    result = tune.Tuner(gm.hold_memory, param_space={"mib": 512},
                        scaling_config=tune.ScalingConfig(use_gpu=True), run_config=_rc(storage, "peak")).fit()[0]
    assert result.error is None, result.error
    assert result.metrics["gpu_memory_peak_bytes"] >= 512 * 2**20
    if "gpu_memory_process_bytes" in result.metrics:  # (NVML present)
        assert result.metrics["gpu_memory_process_bytes"] >= result.metrics["gpu_memory_peak_bytes"]


def test_gpu_memory_requests_pack_trials_onto_one_device(storage):
    total = torch.cuda.get_device_properties(0).total_memory
    want = total / 4.5  # four fit on one device by memory
    grid = tune.Tuner(gm.hold_memory, param_space={"mib": 256, "steps": 20},
                      tune_config=tune.TuneConfig(num_samples=4),
                      scaling_config=tune.ScalingConfig(resources_per_worker={"CPU": 1, "GPU_memory": want}),
                      run_config=_rc(storage, "packed")).fit()
    assert all(r.error is None for r in grid), [r.error for r in grid]
    assert {r.metrics["device"] for r in grid} == {"cuda:0"}
    order = [e["event"] for e in _events(grid) if e["event"] in ("trial_start", "trial_end")]
    assert order[:4] == ["trial_start"] * 4, order  # all four held their memory share at once


def test_a_cuda_oom_is_recorded_and_retried_smaller(storage):
    total_mib = torch.cuda.get_device_properties(0).total_memory // 2**20
    too_much = 1
    while too_much <= total_mib:
        too_much *= 2  # a power of two more than the device holds: halving reaches a size that fits
    failure = tune.FailureConfig(oom_halve="mib", max_oom_retries=3)
    grid = tune.Tuner(gm.hold_memory, param_space={"mib": too_much, "steps": 2},
                      scaling_config=tune.ScalingConfig(use_gpu=True),
                      run_config=_rc(storage, "oom", failure_config=failure)).fit()
    (result,) = list(grid)
    events = _events(grid)
    failures = [e for e in events if e["event"] == "trial_failure"]
    assert failures and all(e["kind"] == "oom" for e in failures)
    assert result.error is None, result.error
    assert result.config["mib"] < total_mib
    assert [e["change"]["mib"][0] for e in events if e["event"] == "oom_retry"][0] == too_much


def test_an_oom_without_retry_is_its_own_error_kind(storage):
    total_mib = torch.cuda.get_device_properties(0).total_memory // 2**20
    grid = tune.Tuner(gm.hold_memory, param_space={"mib": 2 * total_mib},
                      scaling_config=tune.ScalingConfig(use_gpu=True), run_config=_rc(storage, "oom1")).fit()
    assert "out of memory (OOM)" in str(grid[0].error)
    assert [e.get("error_kind") for e in _events(grid) if e["event"] == "trial_end"] == ["oom"]


def test_auto_gpu_memory_measures_the_first_trial_then_packs_the_rest(storage):
    grid = tune.Tuner(gm.hold_memory, param_space={"mib": 512, "steps": 20},
                      tune_config=tune.TuneConfig(num_samples=5),
                      scaling_config=tune.ScalingConfig(resources_per_worker={"CPU": 1, "GPU_memory": "auto"}),
                      run_config=_rc(storage, "auto")).fit()
    assert all(r.error is None for r in grid), [r.error for r in grid]
    events = _events(grid)
    starts = [e for e in events if e["event"] == "trial_start"]
    assert starts[0]["gpu_memory_auto"]["bytes"] == "whole device"  # the first runs alone to measure its peak
    floor = 512 * 2**20 * 1.25 + 512 * 2**20
    sizes = [e["gpu_memory_auto"]["bytes"] for e in starts[1:]]
    assert all(isinstance(b, int) and b >= floor for b in sizes), sizes
    order = [(e["event"], e["trial_id"]) for e in events if e["event"] in ("trial_start", "trial_end")]
    after_first = order[order.index(("trial_end", starts[0]["trial_id"])) + 1:]
    assert [k for k, _ in after_first[:4]] == ["trial_start"] * 4, order  # the other four share the device at once
    assert {r.metrics["device"] for r in grid} == {"cuda:0"}
