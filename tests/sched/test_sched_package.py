"""The schedulers package: standard library only, sorted and complete exports."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import schedulers
from schedulers import _asha, _base, _fifo, _hyperband, _median, _pbt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_imports_only_the_standard_library():
    code = ("import sys; before = set(sys.modules); import schedulers, schedulers.testing; "
            "print('\\n'.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": ROOT}).stdout.split()
    third_party = {name.split(".")[0] for name in out} - set(sys.stdlib_module_names) - {
        "schedulers"}
    assert not third_party, third_party
    for banned in ("numpy", "torch", "dask", "distributed", "mlflow", "optuna", "pandas",
                   "tuneplat"):
        assert banned not in {name.split(".")[0] for name in out}


def test_all_is_sorted_and_complete():
    assert schedulers.__all__ == sorted(schedulers.__all__)
    exported = set(schedulers.__all__)
    for module in (_asha, _fifo, _hyperband, _median, _pbt):
        assert set(getattr(module, "__all__", ())) <= exported, module.__name__
    assert set(_base.__all__) - {"require_argument", "validate_mode"} <= exported
    for name in schedulers.__all__:
        assert getattr(schedulers, name) is not None
    schedulers_classes = {name for name, obj in vars(schedulers).items()
                          if inspect.isclass(obj) and issubclass(obj, schedulers.TrialScheduler)}
    assert schedulers_classes <= exported


def test_constructor_signatures_match_ray():
    def params(cls):
        return [(p.name, p.default) for p in inspect.signature(cls).parameters.values()]

    ray_asha = [
        ("time_attr", "training_iteration"), ("metric", None), ("mode", None), ("max_t", 100),
        ("grace_period", 1), ("reduction_factor", 4), ("brackets", 1),
        ("stop_last_trials", True), ("seed", None)]
    # Ray's arguments in Ray's order, then ours (keyword use only): chosen rungs, MO tie-break, cost-aware promotion
    assert params(schedulers.ASHAScheduler) == ray_asha + [
        ("rung_levels", None), ("mo_tiebreak", "crowding"), ("cost_attr", None)]
    assert params(schedulers.HyperBandScheduler) == [
        ("time_attr", "training_iteration"), ("metric", None), ("mode", None), ("max_t", 81),
        ("reduction_factor", 3), ("stop_last_trials", True), ("mo_tiebreak", "crowding")]
    assert params(schedulers.MedianStoppingRule) == [
        ("time_attr", "time_total_s"), ("metric", None), ("mode", None), ("grace_period", 60.0),
        ("min_samples_required", 3), ("min_time_slice", 0), ("hard_stop", True)]
    assert [name for name, _ in params(schedulers.PopulationBasedTraining)] == [
        "time_attr", "metric", "mode", "perturbation_interval", "burn_in_period",
        "hyperparam_mutations", "quantile_fraction", "resample_probability",
        "perturbation_factors", "custom_explore_fn", "log_config", "require_attrs", "synch",
        "seed"]


def test_describe_is_flat_and_named():
    for scheduler in (schedulers.ASHAScheduler(), schedulers.HyperBandScheduler(),
                      schedulers.MedianStoppingRule(),
                      schedulers.PopulationBasedTraining(hyperparam_mutations={"lr": [1, 2]})):
        described = scheduler.describe()
        assert described["scheduler"] == scheduler.name
        assert all(isinstance(v, (str, int, float, bool, list, type(None)))
                   for v in described.values())
