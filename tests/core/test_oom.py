"""Out-of-memory as an outcome of its own (virtual time): recorded, told to Optuna, retried smaller on request."""

from __future__ import annotations

import os

import optuna
import pytest
import torch

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core._oom import shrink_config
from tuneplat.execution._failure import Failure, exception_types
from tuneplat.search.optuna import OOM_ATTR, OptunaSearch, oom_constraints
from tuneplat.testing import VirtualTimeExecutor


def needs_memory(config):
    """A trainable whose memory grows with the micro-batch: above 16 it runs out of GPU memory at step 2."""
    for step in range(1, 6):
        if config["micro_batch"] > 16 and step == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        yield {"loss": 1.0 / (step * config["micro_batch"] * config["accum"]),
               "gpu_memory_peak_bytes": config["micro_batch"] * 2**28}


def _fit(storage, space, *, failure=None, search=None, name="oom"):
    return tune.Tuner(needs_memory, param_space=space,
                      tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=search,
                                                  num_samples=1 if search is None else 6),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                failure_config=failure),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()


def _events(grid):
    return read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))


def test_an_oom_is_its_own_error_kind(storage):
    grid = _fit(storage, {"micro_batch": tune.grid_search([8, 64]), "accum": 1})
    errors = {r.config["micro_batch"]: r.error for r in grid}
    assert errors[8] is None
    assert str(errors[64]).startswith("out of memory (OOM): ")
    ends = [e for e in _events(grid) if e["event"] == "trial_end" and e["status"] == "ERROR"]
    assert [e["error_kind"] for e in ends] == ["oom"]
    failure = next(e for e in _events(grid) if e["event"] == "trial_failure")
    assert failure["kind"] == "oom" and failure["retry"] is False
    ok = next(r for r in grid if r.config["micro_batch"] == 8)
    assert ok.metrics["gpu_memory_peak_bytes"] == 8 * 2**28  # a trial's reported memory reaches the results


def test_opt_in_retry_halves_the_key_and_doubles_the_other(storage):
    failure = tune.FailureConfig(oom_halve="micro_batch", oom_double="accum", max_oom_retries=3)
    grid = _fit(storage, {"micro_batch": 64, "accum": 1}, failure=failure)
    (result,) = list(grid)
    assert result.error is None
    assert result.config == {"micro_batch": 16, "accum": 4}  # 64 -> 32 -> 16; the effective batch kept
    retries = [e for e in _events(grid) if e["event"] == "oom_retry"]
    assert [e["change"] for e in retries] == [{"micro_batch": [64, 32], "accum": [1, 2]},
                                               {"micro_batch": [32, 16], "accum": [2, 4]}]
    # restore reads the shrunk config back
    restored = tune.Tuner.restore(grid.experiment_path, needs_memory, executor=VirtualTimeExecutor(num_slots=2))
    assert restored.fit()[0].config == {"micro_batch": 16, "accum": 4}


def test_oom_retries_are_never_endless(storage):
    failure = tune.FailureConfig(oom_halve="micro_batch", max_oom_retries=1)
    grid = _fit(storage, {"micro_batch": 128, "accum": 1}, failure=failure, name="capped")
    (result,) = list(grid)
    assert "out of memory (OOM)" in str(result.error) and result.config["micro_batch"] == 64
    assert len([e for e in _events(grid) if e["event"] == "oom_retry"]) == 1


def test_oom_is_a_constraint_violation_for_optuna(storage):
    search = OptunaSearch(sampler="nsgaii", seed=0)
    grid = _fit(storage, {"micro_batch": tune.choice([8, 64]), "accum": 1}, search=search, name="optuna")
    study = search.study
    oom = [t for t in study.trials if t.user_attrs.get(OOM_ATTR)]
    assert oom and len(oom) == sum(1 for r in grid if r.error)
    for t in oom:  # told with its last values, as infeasible (Optuna 5's trial.set_constraint)
        assert t.state == optuna.trial.TrialState.COMPLETE and t.constraints == {"oom": 1.0}
    assert all(not t.constraints for t in study.trials if not t.user_attrs.get(OOM_ATTR))
    assert oom_constraints(oom[0]) == [1.0]  # (for a sampler's constraints_func on Optuna < 5)


def test_oom_is_read_from_the_exception_types_never_from_words():
    assert Failure.of_exception(torch.cuda.OutOfMemoryError("CUDA out of memory."), "m").kind == "oom"
    assert Failure.of_exception(MemoryError(), "m").kind == "oom"

    class MyOOM(torch.OutOfMemoryError):  # a subclass is an OOM too (its MRO is read)
        pass

    assert Failure.of_exception(MyOOM("x"), "m").kind == "oom"
    # words that look like an OOM are not one: a KeyError naming a counter, a message quoting CUDA's
    key_error = KeyError("OutOfMemoryErrorCount")
    assert exception_types(key_error)[:2] == ("builtins.KeyError", "builtins.LookupError")
    assert Failure.of_exception(key_error, "rank 0: KeyError: 'OutOfMemoryErrorCount'").kind == "error"
    assert Failure.of_exception(ValueError("CUDA out of memory"), "rank 0: ValueError: CUDA out of memory").kind == "error"


def test_a_key_error_naming_an_oom_counter_fails_the_trial_and_is_not_retried_smaller(storage):
    def counts(config):
        yield {"loss": 1.0}
        raise KeyError("OutOfMemoryErrorCount")

    failure = tune.FailureConfig(oom_halve="micro_batch", max_oom_retries=3, max_failures=0)
    grid = tune.Tuner(counts, param_space={"micro_batch": 64},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="keyerror", storage_path=storage, verbose=0, mlflow=False,
                                                failure_config=failure),
                      executor=VirtualTimeExecutor(num_slots=1)).fit()
    (result,) = list(grid)
    assert "KeyError: 'OutOfMemoryErrorCount'" in str(result.error)
    assert "out of memory" not in str(result.error) and result.config["micro_batch"] == 64
    events = _events(grid)
    assert not [e for e in events if e["event"] == "oom_retry"]  # (before: halved to 32 and retried, uncounted)
    (fail,) = [e for e in events if e["event"] == "trial_failure"]
    assert fail["kind"] == "error" and fail["types"][0] == "builtins.KeyError" and fail["retry"] is False
    assert shrink_config({"t": {"mb": 9}}, "t.mb") == ({"t": {"mb": 4}}, {"t.mb": [9, 4]})
    assert shrink_config({"lr": 0.5}, "lr") == ({"lr": 0.25}, {"lr": [0.5, 0.25]})
    assert shrink_config({"mb": 1}, "mb") is None and shrink_config({}, "mb") is None
    with pytest.raises(ValueError, match="oom_double='acc'"):
        shrink_config({"mb": 4}, "mb", "acc")
    with pytest.raises(ValueError, match="The value of `FailureConfig.oom_double` is 'a'"):
        tune.FailureConfig(oom_double="a")
    with pytest.raises(ValueError, match="max_oom_retries"):
        tune.FailureConfig(oom_halve="mb", max_oom_retries=-1)


def test_gpu_memory_requests_become_a_share_of_a_device():
    from tuneplat.execution._gpu_memory import as_gpu_share, parse_memory

    assert parse_memory("10GiB") == 10 * 2**30 and parse_memory("512 MiB") == 2**29 and parse_memory(3) == 3.0
    with pytest.raises(ValueError, match="The value of `GPU_memory` is '10 parsecs'"):
        parse_memory("10 parsecs")
    assert tune.ScalingConfig(resources_per_worker={"GPU_memory": "20GiB"}).per_worker() == {
        "GPU_memory": 20 * 2**30, "CPU": 1.0}
    assert tune.ScalingConfig(resources_per_worker={"GPU_memory": "20GiB"}).backend == "nccl"
    with pytest.raises(ValueError, match=r"resources_per_worker\['GPU_memory'\]"):
        tune.ScalingConfig(resources_per_worker={"GPU_memory": "lots"})
    assert as_gpu_share({"CPU": 1, "GPU_memory": 20 * 2**30}, 80 * 2**30) == {"CPU": 1, "GPU": 0.25}
    assert as_gpu_share({"GPU": 0.5, "GPU_memory": 20 * 2**30}, 80 * 2**30)["GPU"] == 0.5  # the larger share
    with pytest.raises(ValueError, match="has 80 GiB"):
        as_gpu_share({"GPU_memory": 100 * 2**30}, 80 * 2**30)
    with pytest.raises(ValueError, match="no GPU whose memory is known"):
        as_gpu_share({"GPU_memory": 2**30}, None)
    from tuneplat.trainables._wrappers import resources_of

    wrapped = tune.with_resources(needs_memory, {"cpu": 1, "gpu_memory": "8GiB"})
    assert resources_of(wrapped).per_worker() == {"CPU": 1.0, "GPU_memory": 8 * 2**30}


@pytest.mark.skipif(torch.cuda.is_available(), reason="about a cluster without GPUs (the gpu tests cover GPUs)")
def test_gpu_memory_on_a_cluster_without_gpus_is_refused_at_once(dask_client, storage):
    grid = tune.Tuner(tune.with_resources(needs_memory, lambda config: {"gpu_memory": "1GiB"}),
                      param_space={"micro_batch": 8, "accum": 1},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="nogpu", storage_path=storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    assert "no GPU whose memory is known" in str(grid[0].error)
    grid = tune.Tuner(tune.with_resources(needs_memory, lambda config: {"gpu_memory": "auto"}),
                      param_space={"micro_batch": 8, "accum": 1},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="nogpu-auto", storage_path=storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    assert "GPU_memory='auto', but the cluster has no GPU whose memory is known" in str(grid[0].error)
