"""Every public scheduler, searcher, config, callback, stopper and trainer class against the installed Ray's:
parameter names, defaults, required-ness. Deliberate differences are listed here with the reason, and in
docs/porting-from-ray.md ("Signatures that differ from Ray's")."""

from __future__ import annotations

import importlib
import inspect
import os
import warnings

import pytest

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # (Ray 2.60's default; the V2 API is the one compared)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ray = pytest.importorskip("ray", reason="Ray is the reference; install the bench extra (CI does)")

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "porting-from-ray.md")

#: (Ray module, class names) compared; the tuneplat class is the same path with ray -> tuneplat
CLASSES = {
    "ray.tune.schedulers": ["ASHAScheduler", "AsyncHyperBandScheduler", "HyperBandScheduler", "MedianStoppingRule",
                            "PopulationBasedTraining", "FIFOScheduler", "TrialScheduler", "ResourceChangingScheduler"],
    "ray.tune.schedulers.resource_changing_scheduler": ["DistributeResources", "DistributeResourcesToTopJob"],
    "ray.tune.execution.placement_groups": ["PlacementGroupFactory"],
    "ray.tune.stopper": ["Stopper", "CombinedStopper", "ExperimentPlateauStopper", "FunctionStopper",
                         "MaximumIterationStopper", "NoopStopper", "TimeoutStopper", "TrialPlateauStopper"],
    "ray.tune.search": ["Searcher", "ConcurrencyLimiter", "Repeater", "BasicVariantGenerator"],
    "ray.tune.search.optuna": ["OptunaSearch"],
    "ray.tune.logger": ["LoggerCallback", "CSVLoggerCallback", "JsonLoggerCallback", "TBXLoggerCallback"],
    "ray.air.integrations.mlflow": ["MLflowLoggerCallback"],
    "ray.tune": ["TuneConfig", "RunConfig", "CheckpointConfig", "FailureConfig", "SyncConfig", "Callback", "Tuner",
                 "CLIReporter", "JupyterNotebookReporter", "PlacementGroupFactory", "Trainable"],
    "ray.train": ["RunConfig", "CheckpointConfig", "FailureConfig", "ScalingConfig", "DataConfig", "UserCallback",
                  "WorkerGroupError", "ControllerError", "PreemptionError", "PreemptionInfo", "ReportedCheckpoint",
                  "Checkpoint", "Result"],
    "ray.train.v2.api.data_parallel_trainer": ["DataParallelTrainer"],
    "ray.train.torch": ["TorchTrainer", "TorchConfig"],
    # the other frameworks (each compared only where its library is installed: see _FRAMEWORK)
    "ray.train.tensorflow": ["TensorflowTrainer", "TensorflowConfig", "prepare_dataset_shard"],
    "ray.train.tensorflow.keras": ["ReportCheckpointCallback"],
    "ray.air.integrations.keras": ["ReportCheckpointCallback"],
    "ray.tune.integration.keras": ["TuneReportCheckpointCallback"],
    "ray.train.v2.jax": ["JaxTrainer", "JaxConfig"],
    "ray.train.lightning": ["RayDDPStrategy", "RayFSDPStrategy", "RayDeepSpeedStrategy", "RayLightningEnvironment",
                            "RayTrainReportCallback", "prepare_trainer"],
}

#: Ray module prefix -> the library it needs (the comparison skips, with the reason, where it is not installed)
_FRAMEWORK = {"ray.train.tensorflow": "tensorflow", "ray.air.integrations.keras": "tensorflow",
              "ray.tune.integration.keras": "tensorflow", "ray.train.v2.jax": "jax", "ray.train.lightning": "lightning"}

#: ("module.Class", "parameter") -> why tuneplat's differs (name missing, default or required-ness)
DIFFERENT = {
    # one RunConfig/CheckpointConfig/FailureConfig serves Tune and Train: Ray V2's train.* versions mark Tune's
    # options "DEPRECATED"; here they keep working (Tune's defaults)
    **{("ray.train.RunConfig", p): "one RunConfig for Tune and Train: Tune's options keep Tune's defaults"
       for p in ("sync_config", "verbose", "stop", "progress_reporter", "log_to_file")},
    **{("ray.train.CheckpointConfig", p): "one CheckpointConfig for Tune and Train: the class API's options work"
       for p in ("checkpoint_frequency", "checkpoint_at_end")},
    ("ray.train.FailureConfig", "fail_fast"): "one FailureConfig for Tune and Train: fail_fast keeps Tune's default",
    ("ray.train.ScalingConfig", "elastic_resize_monitor_interval_s"):
        "None: an elastic group grows at its next checkpoint once workers are free (no step lost); a number is "
        "a minimum wait, Ray's 60 s polling is not needed",
    ("ray.train.torch.TorchConfig", "timeout_s"):
        "60 s, not Ray's 1800: a rank blocked on a lost peer fails (and is retried) within a minute",
    ("ray.train.Result", "metrics_dataframe"): "a property computed from the history",
    ("ray.train.Result", "best_checkpoints"): "an empty list by default, not None",
    ("ray.train.Result", "checkpoint"): "None by default (a trial without checkpoints), not required",
    ("ray.train.Result", "error"): "None by default (a trial that did not fail), not required",
    ("ray.train.Result", "config"): "tuneplat.Result is Tune's and Train's: the trial's config is its first field",
    ("ray.tune.schedulers.ResourceChangingScheduler", "resources_allocation_function"):
        "the default is DistributeResources(add_bundles=False) as Ray's (tuneplat's class: two objects, never equal "
        "by repr); tests/core/test_resource_changing.py checks it",
}


def _ours(module: str, name: str):
    path = module.replace("ray.air.integrations", "tuneplat.air.integrations", 1).replace("ray.", "tuneplat.", 1)
    mod = importlib.import_module(path)
    return getattr(mod, name, None)


def _params(cls):
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return None
    return {k: v for k, v in sig.parameters.items()
            if not k.startswith("_") and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)}


CASES = [(m, n) for m, names in CLASSES.items() for n in names]


@pytest.mark.parametrize(("module", "name"), CASES, ids=[f"{m}.{n}" for m, n in CASES])
def test_signature_matches_rays(module, name):
    needs = next((lib for prefix, lib in _FRAMEWORK.items() if module.startswith(prefix)), None)
    if needs is not None:
        pytest.importorskip(needs, reason=f"{needs} is not installed (its tuneplat extra)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = getattr(importlib.import_module(module), name)
    ours = _ours(module, name)
    assert ours is not None, f"{module}.{name} has no tuneplat counterpart"
    rp, tp = _params(theirs), _params(ours)
    if rp is None or tp is None:
        return
    empty = inspect.Parameter.empty
    problems = []
    for p, rpar in rp.items():
        key = (f"{module}.{name}", p)
        if key in DIFFERENT:
            continue
        if p not in tp:
            problems.append(f"missing parameter {p}={rpar.default!r}")
            continue
        tpar = tp[p]
        if (rpar.default is empty) != (tpar.default is empty):
            problems.append(f"{p}: required in Ray={rpar.default is empty}, here={tpar.default is empty}")
        elif rpar.default is not empty and repr(rpar.default) != repr(tpar.default):
            problems.append(f"{p}: default Ray={rpar.default!r}, here={tpar.default!r}")
    for p, tpar in tp.items():
        if p not in rp and tpar.default is empty and (f"{module}.{name}", p) not in DIFFERENT:
            problems.append(f"{p} is required here and not a parameter of Ray's")
    assert not problems, f"{module}.{name}: " + "; ".join(problems)


def test_each_deliberate_difference_is_in_the_porting_page():
    text = open(DOC, encoding="utf-8").read()
    section = text.split("## Signatures that differ from Ray's", 1)
    assert len(section) == 2, "docs/porting-from-ray.md lacks its section 'Signatures that differ from Ray's'"
    missing = [f"{cls}({param})" for cls, param in DIFFERENT if f"`{param}`" not in section[1]]
    assert not missing, f"not explained in docs/porting-from-ray.md: {missing}"


def _api_section() -> str:
    text = open(DOC, encoding="utf-8").read()
    parts = text.split("## Ray Train V2's public API, name by name", 1)
    assert len(parts) == 2, "docs/porting-from-ray.md lacks its section 'Ray Train V2's public API, name by name'"
    return parts[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("namespace", ["ray.train", "ray.train.torch", "ray.train.tensorflow", "ray.train.v2.jax",
                                       "ray.train.lightning"])
def test_every_ray_train_v2_name_has_a_status_in_the_porting_page(namespace):
    """Each public name of the installed Ray's namespace is in the table, and exists here unless marked not ported."""
    needs = next((lib for prefix, lib in _FRAMEWORK.items() if namespace.startswith(prefix)), None)
    if needs is not None:
        pytest.importorskip(needs, reason=f"{needs} is not installed (its tuneplat extra)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = list(importlib.import_module(namespace).__all__)
    ours = importlib.import_module(namespace.replace("ray.", "tuneplat.", 1))
    section = _api_section()
    rows = {line.split("|")[1]: line for line in section.splitlines() if line.startswith("| `")}
    row_of = {name: row for cell, row in rows.items() for name in cell.replace("`", " ").replace(",", " ").split()}
    missing = [n for n in names if n not in row_of]
    assert not missing, f"{namespace} names without a status in docs/porting-from-ray.md: {missing}"
    absent = [n for n in names if not hasattr(ours, n) and "not ported" not in row_of[n]]
    assert not absent, f"{namespace} names the page calls supported but tuneplat lacks: {absent}"


def test_tensorflow_checkpoint_methods_match_rays():
    """``TensorflowCheckpoint``'s constructors and ``get_model`` (Ray's class takes ``*args`` in ``__init__``)."""
    pytest.importorskip("tensorflow", reason="tensorflow is not installed (its tuneplat extra)")
    from ray.train.tensorflow import TensorflowCheckpoint as Theirs

    from tuneplat.train.tensorflow import TensorflowCheckpoint as Ours

    public = sorted(m for m in vars(Theirs) if not m.startswith("_") and callable(getattr(Theirs, m)))
    assert public == ["from_h5", "from_model", "from_saved_model", "get_model"], public
    for name in public:
        theirs, ours = inspect.signature(getattr(Theirs, name)), inspect.signature(getattr(Ours, name))
        assert [(p.name, p.kind, repr(p.default)) for p in theirs.parameters.values()] == [
            (p.name, p.kind, repr(p.default)) for p in ours.parameters.values()], name
