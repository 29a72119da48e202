"""GPU memory on virtual devices: packing by memory vs by fractions, the automatic mode, OOM outcomes and retries.

``VirtualTimeExecutor(gpus=..., gpu_memory=...)`` models devices; trials hold memory through
``tuneplat.testing.use_gpu_memory`` (or a curve's ``gpu_memory_peak_bytes``) and a device that runs out fails
the allocating trial with "CUDA out of memory", recorded by the same code path as a CUDA OOM on a Dask worker.
"""

from __future__ import annotations

import os

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core._gpu_auto import HEADROOM, MARGIN, OOM_GROWTH
from tuneplat.testing import VirtualTimeExecutor, use_gpu_memory

GiB = 2**30


def hold(config):
    """Holds ``config["gib"]`` GiB of GPU memory for three steps (``config["grow"]``: more from step 2 on)."""
    use_gpu_memory(config["gib"] * GiB)
    for step in range(1, 4):
        if step == 2 and config.get("grow"):
            use_gpu_memory((config["gib"] + config["grow"]) * GiB)
        tune.report({"loss": 1.0 / step})


def _fit(storage, trainable, space, executor, *, resources=None, samples=1, failure=None, name="gpu"):
    kw = {"scaling_config": tune.ScalingConfig(resources_per_worker=resources)} if resources is not None else {}
    return tune.Tuner(trainable, param_space=space,
                      tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=samples),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                failure_config=failure),
                      executor=executor, **kw).fit()


def _events(grid, kind):
    return [e for e in read_journal(os.path.join(grid.experiment_path, "journal.jsonl")) if e["event"] == kind]


@pytest.mark.parametrize(("resources", "at_once"), [({"GPU_memory": "20GiB"}, 4), ({"GPU": 0.5}, 2),
                                                    ({"GPU_memory": 10 * GiB}, 8)])
def test_trials_pack_by_memory_or_by_fraction(storage, resources, at_once):
    ex = VirtualTimeExecutor(num_slots=16, gpus=1, gpu_memory="80GiB")
    grid = _fit(storage, hold, {"gib": 9}, ex, resources={"CPU": 1, **resources}, samples=8)
    assert all(r.error is None for r in grid), [r.error for r in grid]
    assert ex.max_running == at_once
    assert {r.metrics["gpu_memory_peak_bytes"] for r in grid} == {9 * GiB}  # reported as a CUDA rank reports it
    assert ex.max_gpu_memory_used == at_once * 9 * GiB


def test_with_resources_dict_form_and_two_devices(storage):
    ex = VirtualTimeExecutor(num_slots=16, gpus=2, gpu_memory="40GiB")
    grid = _fit(storage, tune.with_resources(hold, {"cpu": 1, "gpu_memory": "20GiB"}), {"gib": 15}, ex, samples=6)
    assert all(r.error is None for r in grid)
    assert ex.max_running == 4  # two per device
    starts = _events(grid, "trial_start")
    assert {w.rsplit(":", 1)[1] for e in starts for w in e["workers"]} == {"gpu0", "gpu1"}


def test_fractions_do_not_know_memory_and_the_device_runs_out(storage):
    # four quarter-GPU trials of 30 GiB each on an 80 GiB device: the third allocation does not fit
    ex = VirtualTimeExecutor(num_slots=8, gpus=1, gpu_memory="80GiB")
    grid = _fit(storage, hold, {"gib": 30}, ex, resources={"CPU": 1, "GPU": 0.25}, samples=4,
                failure=tune.FailureConfig(max_failures=0))
    errors = [str(r.error) for r in grid if r.error is not None]
    assert len(errors) == 2, errors
    assert all(e.startswith("out of memory (OOM): rank 0: OutOfMemoryError: CUDA out of memory.") for e in errors)
    assert "virtual GPU 0: 80 GiB total, 60 GiB held by trials" in errors[0]
    assert [e["error_kind"] for e in _events(grid, "trial_end") if e["status"] == "ERROR"] == ["oom", "oom"]


def test_an_oom_is_retried_smaller_with_oom_halve(storage):
    def by_batch(config):
        use_gpu_memory(config["mb"] * 10 * GiB)
        tune.report({"loss": 1.0 / config["mb"]})

    ex = VirtualTimeExecutor(num_slots=2, gpus=1, gpu_memory="40GiB")
    grid = _fit(storage, by_batch, {"mb": 16, "accum": 1}, ex, resources={"GPU": 1},
                failure=tune.FailureConfig(oom_halve="mb", oom_double="accum"))
    (result,) = list(grid)
    assert result.error is None, result.error
    assert result.config == {"mb": 4, "accum": 4}  # 160 and 80 GiB do not fit a 40 GiB device; 40 does
    assert [e["kind"] for e in _events(grid, "trial_failure")] == ["oom", "oom"]
    assert result.metrics["gpu_memory_peak_bytes"] == 40 * GiB


def test_a_curve_that_holds_more_than_its_device_fails_as_oom(storage):
    def curve(config):
        for step in range(1, 4):
            yield {"loss": 1.0 / step, "gpu_memory_peak_bytes": step * 30 * GiB}

    grid = _fit(storage, curve, {}, VirtualTimeExecutor(gpus=1, gpu_memory="80GiB"), resources={"GPU": 1},
                failure=tune.FailureConfig(max_failures=0))
    assert str(grid[0].error).startswith("out of memory (OOM): rank 0: OutOfMemoryError: CUDA out of memory")
    assert grid[0].metrics["training_iteration"] == 2  # steps 1 and 2 (30, 60 GiB) ran; step 3 (90 GiB) did not


def test_auto_runs_the_first_trial_alone_then_packs_by_its_measured_peak(storage):
    ex = VirtualTimeExecutor(num_slots=16, gpus=1, gpu_memory="80GiB")
    grid = _fit(storage, hold, {"gib": 10}, ex, resources={"CPU": 1, "GPU_memory": "auto"}, samples=6)
    assert all(r.error is None for r in grid), [r.error for r in grid]
    journal = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    starts = [e for e in journal if e["event"] == "trial_start"]
    first, rest = starts[0], starts[1:]
    assert first["gpu_memory_auto"]["bytes"] == "whole device"
    assert "first trial of its shape" in first["gpu_memory_auto"]["why"]
    assert first["resources"]["resources_per_worker"]["GPU"] == 1.0
    figure = int(10 * GiB * MARGIN + HEADROOM)
    assert {e["gpu_memory_auto"]["bytes"] for e in rest} == {figure}
    assert all("largest peak measured" in e["gpu_memory_auto"]["why"] for e in rest)
    order = [(e["event"], e["trial_id"]) for e in journal if e["event"] in ("trial_start", "trial_end")]
    assert order.index(("trial_end", first["trial_id"])) < order.index(("trial_start", rest[0]["trial_id"]))
    assert ex.max_running == 5  # the other five at 13 GiB each, at once (80 // 13 = 6 would fit)
    experiment = next(e for e in journal if e["event"] == "experiment")
    assert experiment["scaling"]["resources_per_worker"]["GPU_memory"] == "auto"


def test_auto_with_a_starting_figure_packs_from_the_start(storage):
    ex = VirtualTimeExecutor(num_slots=16, gpus=1, gpu_memory="80GiB")
    grid = _fit(storage, hold, {"gib": 10}, ex, resources={"GPU_memory": "auto:16GiB"}, samples=5)
    assert all(r.error is None for r in grid)
    assert ex.max_running == 5
    starts = _events(grid, "trial_start")
    assert starts[0]["gpu_memory_auto"] == {"bytes": 16 * GiB,
                                            "why": "the starting figure given ('auto:...'); nothing measured yet"}


def test_auto_raises_the_figure_after_an_oom(storage):
    # the first trial (alone) measures 10 GiB: the others start at 13 GiB, three on a 40 GiB device; one of them
    # grows to 30 GiB at its second step and the device runs out: later trials ask for 1.5x as much
    ex = VirtualTimeExecutor(num_slots=8, gpus=1, gpu_memory="40GiB")
    grid = _fit(storage, hold, {"gib": 10, "grow": tune.grid_search([0, 0, 20, 0, 0, 0])}, ex,
                resources={"GPU_memory": "auto"}, failure=tune.FailureConfig(max_failures=3))
    failures = _events(grid, "trial_failure")
    assert failures and {e["kind"] for e in failures} == {"oom"}
    assert all(r.error is None for r in grid), [r.error for r in grid]  # retried at the raised figure
    journal = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    first_oom = next(i for i, e in enumerate(journal) if e["event"] == "trial_failure")
    raised = (10 * GiB * MARGIN + HEADROOM) * OOM_GROWTH
    later = [e for e in journal[first_oom:] if e["event"] == "trial_start"]
    assert later and all(e["gpu_memory_auto"]["bytes"] == "whole device" or e["gpu_memory_auto"]["bytes"] >= raised
                         for e in later), later
    assert any("out-of-memory" in e["gpu_memory_auto"]["why"] for e in later), later


def test_gpu_requests_need_virtual_gpus_that_fit(storage):
    with pytest.raises(ValueError, match="cannot hold them all"):
        _fit(storage, hold, {"gib": 1}, VirtualTimeExecutor(gpus=1, gpu_memory="8GiB"), resources={"GPU": 2})
    with pytest.raises(ValueError, match="no GPU whose memory is known"):
        _fit(storage, hold, {"gib": 1}, VirtualTimeExecutor(gpus=1), resources={"GPU_memory": "2GiB"})
    with pytest.raises(ValueError, match=r"VirtualTimeExecutor\(gpus=-1\)"):
        VirtualTimeExecutor(gpus=-1)
    with pytest.raises(ValueError, match="'auto'"):
        tune.ScalingConfig(resources_per_worker={"GPU_memory": "lots"})


def test_auto_learns_again_from_restored_trials(storage):
    # the time budget ends the first run while its first trial (alone on the device) has reported twice
    ex = VirtualTimeExecutor(num_slots=16, gpus=1, gpu_memory="80GiB")
    space = {"gib": 10}
    tc = tune.TuneConfig(metric="loss", mode="min", num_samples=4, time_budget_s=2.5)
    sc = tune.ScalingConfig(resources_per_worker={"GPU_memory": "auto"})
    first = tune.Tuner(hold, param_space=space, tune_config=tc, scaling_config=sc, executor=ex,
                       run_config=tune.RunConfig(name="auto", storage_path=storage, verbose=0, mlflow=False)).fit()
    starts = _events(first, "trial_start")
    assert [e["gpu_memory_auto"]["bytes"] for e in starts] == ["whole device"]
    grid = tune.Tuner.restore(first.experiment_path, hold, executor=VirtualTimeExecutor(
        num_slots=16, gpus=1, gpu_memory="80GiB")).fit()
    assert all(r.error is None for r in grid), [r.error for r in grid]
    later = _events(grid, "trial_start")[1:]
    assert later and {e["gpu_memory_auto"]["bytes"] for e in later} == {int(10 * GiB * MARGIN + HEADROOM)}


@pytest.mark.parametrize(("gib", "fails"), [(30, False), (50, True)])
def test_each_rank_of_a_group_holds_memory_on_its_device(storage, gib, fails):
    def curve(config):
        for step in range(1, 3):
            yield {"loss": 1.0 / step, "gpu_memory_peak_bytes": config["gib"] * GiB}

    ex = VirtualTimeExecutor(num_slots=4, gpus=1, gpu_memory="80GiB")
    grid = tune.Tuner(curve, param_space={"gib": gib},
                      scaling_config=tune.ScalingConfig(num_workers=2, resources_per_worker={"GPU": 0.5}),
                      run_config=tune.RunConfig(name="group", storage_path=storage, verbose=0, mlflow=False,
                                                failure_config=tune.FailureConfig(max_failures=0)),
                      executor=ex).fit()
    (start,) = _events(grid, "trial_start")
    assert [w.rsplit(":", 1)[1] for w in start["workers"]] == ["gpu0", "gpu0"]  # both halves of one device
    assert (grid[0].error is not None) is fails
    if fails:
        assert str(grid[0].error).startswith("out of memory (OOM): rank 0: OutOfMemoryError: CUDA out of memory")


def test_auto_values_parse_and_travel():
    import pickle

    from tuneplat.core._journal import to_jsonable
    from tuneplat.execution._gpu_memory import as_gpu_share, is_auto, parse_memory

    auto, start = parse_memory("auto"), parse_memory("auto:10GiB")
    assert is_auto(auto) and auto.start is None and start.start == 10 * GiB
    assert pickle.loads(pickle.dumps(start)) == start and repr(start) == "'auto:10GiB'"
    assert to_jsonable({"GPU_memory": auto, "x": start}) == {"GPU_memory": "auto", "x": "auto:10GiB"}
    assert as_gpu_share({"CPU": 1, "GPU_memory": auto}, 80 * GiB) == {"CPU": 1, "GPU": 1.0}  # a device until measured
    assert as_gpu_share({"GPU_memory": start}, 80 * GiB) == {"GPU": 0.125}
    with pytest.raises(ValueError, match="'auto:' followed by a starting figure"):
        parse_memory("auto:")
    assert tune.ScalingConfig(resources_per_worker={"GPU_memory": "auto"}).backend == "nccl"
