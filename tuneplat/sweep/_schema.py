"""The sweep file's schema: checkers of values, and the tables of sections, schedulers, searchers and domains."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..search import _domains as D

__all__ = ["BOOL", "DOMAINS", "Field", "INT_GE0", "INT_GE1", "MODE", "NUM", "NUM_GE0", "NUM_GT0", "NUM_MAP", "OPT_BOOL", "OPT_INT", "OPT_STR", "Path", "REF", "SCHEDULERS", "SEARCH_ALGORITHMS", "STR", "STR_MAP", "_ASHA", "_CHECKPOINT_FIELDS", "_COMMON", "_FAILURE_FIELDS", "_MLFLOW_FIELDS", "_MO_COMMON", "_OPTUNA_ALGOS", "_OPTUNA_SAMPLERS", "_POINTS", "_PRUNERS", "_RUNGS", "_RUN_FIELDS", "_SCALING_FIELDS", "_TIEBREAK", "_TIME_ATTR", "_TLS_FIELDS", "_TOP_ALIASES", "_TOP_FIELDS", "_describe", "_f", "_is_int", "_is_memory", "_is_num", "_one_of"]

logger = logging.getLogger("tuneplat")


Path = tuple[Any, ...]

# --------------------------------------------------------------------------- small checkers
# A checker is f(value) -> problem text or None; FORM is the "expected ..." text.


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _describe(v: Any) -> str:
    kinds = {
        str: "a string",
        bool: "a boolean",
        int: "an int",
        float: "a number",
        list: "a list",
        dict: "a mapping",
        type(None): "null",
    }
    text = repr(v)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({kinds.get(type(v), type(v).__name__)})"


@dataclass(frozen=True)
class Field:
    """One key of a section: how to check it, and the expected form in words."""

    check: Callable[[Any], bool]
    form: str


def _f(check: Callable[[Any], bool], form: str) -> Field:
    return Field(check, form)


INT_GE1 = _f(lambda v: _is_int(v) and v >= 1, "an int >= 1")
INT_GE0 = _f(lambda v: _is_int(v) and v >= 0, "an int >= 0")
OPT_INT = _f(lambda v: v is None or _is_int(v), "an int or null")
NUM_GT0 = _f(lambda v: _is_num(v) and v > 0, "a number > 0")
NUM_GE0 = _f(lambda v: _is_num(v) and v >= 0, "a number >= 0")
NUM = _f(_is_num, "a number")
BOOL = _f(lambda v: isinstance(v, bool), "true or false")
OPT_BOOL = _f(lambda v: v is None or isinstance(v, bool), "true, false or null")
STR = _f(lambda v: isinstance(v, str) and v != "", "a non-empty string")
OPT_STR = _f(lambda v: v is None or (isinstance(v, str) and v != ""), "a non-empty string or null")
MODE = _f(lambda v: v in ("min", "max"), "'min' or 'max'")
REF = _f(lambda v: isinstance(v, str) and ":" in v, "'module:function' or 'path/to/file.py:function'")
STR_MAP = _f(
    lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()), "a mapping of strings to strings"
)
NUM_MAP = _f(
    lambda v: isinstance(v, dict) and all(_is_num(x) and x >= 0 for x in v.values()),
    "a mapping of resource names to numbers >= 0, e.g. {CPU: 1, GPU: 0.5}",
)


def _is_memory(value: Any) -> bool:
    from ..execution._gpu_memory import parse_memory

    try:
        parse_memory(value)
    except ValueError:
        return False
    return True


def _one_of(*choices: Any) -> Field:
    return _f(lambda v: v in choices, " or ".join(repr(c) for c in choices))




DOMAINS: dict[str, tuple[Callable[..., Any], tuple[str, ...], dict[str, str]]] = {
    "uniform": (D.uniform, ("[lower, upper]",), {}),
    "quniform": (D.quniform, ("[lower, upper, q]",), {}),
    "loguniform": (D.loguniform, ("[lower, upper]", "[lower, upper, base]"), {}),
    "qloguniform": (D.qloguniform, ("[lower, upper, q]", "[lower, upper, q, base]"), {}),
    "randint": (D.randint, ("[lower, upper]",), {"lower": "int", "upper": "int"}),
    "qrandint": (D.qrandint, ("[lower, upper]", "[lower, upper, q]"), {"lower": "int", "upper": "int", "q": "int"}),
    "lograndint": (D.lograndint, ("[lower, upper]", "[lower, upper, base]"), {"lower": "int", "upper": "int"}),
    "qlograndint": (
        D.qlograndint,
        ("[lower, upper, q]", "[lower, upper, q, base]"),
        {"lower": "int", "upper": "int", "q": "int"},
    ),
    "randn": (D.randn, ("[]", "[mean, sd]"), {}),
    "qrandn": (D.qrandn, ("[mean, sd, q]",), {}),
    "choice": (D.choice, ("[value, ...]",), {}),
}

_POINTS = _f(lambda v: isinstance(v, list) and all(isinstance(p, dict) for p in v), "a list of (partial) configs")
_OPTUNA_SAMPLERS = ("tpe", "cmaes", "gp", "qmc", "random", "nsgaii")
_OPTUNA_ALGOS = ("optuna", "tpe", "cmaes", "gp", "qmc", "nsgaii")
#: search.algorithm values (plus 'module:Class' of a Searcher)
SEARCH_ALGORITHMS = ("random", "grid", "basic", *_OPTUNA_ALGOS)

_TIME_ATTR = _f(lambda v: isinstance(v, str) and v != "", "a result key such as 'training_iteration'")
_COMMON: dict[str, Field | None] = {
    "metric": OPT_STR,
    "mode": _f(lambda v: v is None or v in ("min", "max"), "'min', 'max' or null"),
    "time_attr": _TIME_ATTR,
}
_PRUNERS = {
    "median": "MedianPruner",
    "hyperband": "HyperbandPruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "percentile": "PercentilePruner",
    "threshold": "ThresholdPruner",
    "patient": "PatientPruner",
    "wilcoxon": "WilcoxonPruner",
    "nop": "NopPruner",
}
#: metric/mode of schedulers that decide on several objectives (MO-ASHA, multi-objective HyperBand)
_MO_COMMON: dict[str, Field | None] = {
    "metric": _f(lambda v: v is None or (isinstance(v, str) and v != "")
                 or (isinstance(v, list) and bool(v) and all(isinstance(m, str) and m for m in v)),
                 "a metric name, a list of metric names, or null"),
    "mode": _f(lambda v: v is None or v in ("min", "max")
               or (isinstance(v, list) and bool(v) and all(m in ("min", "max") for m in v)),
               "'min', 'max', a list of them (one per metric), or null"),
    "time_attr": _TIME_ATTR,
}
_RUNGS = _f(lambda v: isinstance(v, list) and bool(v) and all(_is_num(x) and x > 0 for x in v)
            and all(b > a for a, b in zip(v, v[1:])), "a strictly increasing list of numbers > 0")
_TIEBREAK = _f(lambda v: v in ("crowding", "epsnet"), "'crowding' or 'epsnet'")
_ASHA: dict[str, Field | None] = {
    **_MO_COMMON,
    "max_t": NUM_GT0,
    "grace_period": NUM_GT0,
    "reduction_factor": _f(lambda v: _is_num(v) and v >= 2, "a number >= 2"),
    "brackets": INT_GE1,
    "stop_last_trials": BOOL,
    "seed": OPT_INT,
    "rung_levels": _RUNGS,
    "mo_tiebreak": _TIEBREAK,
    "cost_attr": OPT_STR,
}
#: scheduler.type -> (class name in tuneplat.schedulers, accepted keys)
SCHEDULERS: dict[str, tuple[str, dict[str, Field | None]]] = {
    "fifo": ("FIFOScheduler", {}),
    "asha": ("ASHAScheduler", _ASHA),
    "async_hyperband": ("AsyncHyperBandScheduler", _ASHA),
    "hyperband": (
        "HyperBandScheduler",
        {
            **_MO_COMMON,
            "max_t": NUM_GT0,
            "reduction_factor": _f(lambda v: _is_num(v) and v >= 2, "a number >= 2"),
            "stop_last_trials": BOOL,
            "mo_tiebreak": _TIEBREAK,
        },
    ),
    "pasha": (
        "PASHAScheduler",
        {
            **_COMMON,
            "max_t": NUM_GT0,
            "grace_period": NUM_GT0,
            "reduction_factor": _f(lambda v: _is_num(v) and v >= 2, "a number >= 2"),
            "stop_last_trials": BOOL,
            "seed": OPT_INT,
            "rung_levels": _RUNGS,
            "epsilon": _f(lambda v: v == "auto" or (_is_num(v) and v >= 0), "a number >= 0 or 'auto'"),
            "epsilon_percentile": _f(lambda v: _is_num(v) and 0 <= v <= 100, "a number in [0, 100]"),
        },
    ),
    "median_stopping_rule": (
        "MedianStoppingRule",
        {
            **_COMMON,
            "grace_period": NUM_GE0,
            "min_samples_required": INT_GE1,
            "min_time_slice": NUM_GE0,
            "hard_stop": BOOL,
        },
    ),
    "pbt": (
        "PopulationBasedTraining",
        {
            **_COMMON,
            "perturbation_interval": NUM_GT0,
            "burn_in_period": NUM_GE0,
            "hyperparam_mutations": None,
            "quantile_fraction": _f(lambda v: _is_num(v) and 0 < v <= 0.5, "a number in (0, 0.5]"),
            "resample_probability": _f(lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
            "perturbation_factors": _f(
                lambda v: isinstance(v, list) and bool(v) and all(_is_num(x) for x in v), "a list of numbers"
            ),
            "custom_explore_fn": REF,
            "log_config": BOOL,
            "require_attrs": BOOL,
            "synch": BOOL,
            "seed": OPT_INT,
        },
    ),
    "optuna_pruner": (
        "OptunaPrunerScheduler",
        {
            "metric": OPT_STR,
            "mode": _COMMON["mode"],
            "time_attr": _TIME_ATTR,
            "pruner": _f(lambda v: v in _PRUNERS, " or ".join(repr(p) for p in _PRUNERS)),
            "pruner_args": _f(lambda v: isinstance(v, dict), "a mapping of the Optuna pruner's arguments"),
        },
    ),
}
SCHEDULERS["fifo"][1].update({"metric": OPT_STR, "mode": _COMMON["mode"]})

_FAILURE_FIELDS: dict[str, Field | None] = {
    "max_failures": _f(lambda v: _is_int(v) and v >= -1, "an int >= 0, or -1 for unlimited"),
    "fail_fast": _f(lambda v: isinstance(v, bool) or v == "raise", "true, false or 'raise'"),
    "max_preemption_failures": _f(lambda v: _is_int(v) and v >= -1, "an int >= 0, or -1 for unlimited"),
    "oom_halve": OPT_STR,
    "oom_double": OPT_STR,
    "max_oom_retries": _f(lambda v: _is_int(v) and v >= 0, "an int >= 0"),
}
_CHECKPOINT_FIELDS: dict[str, Field | None] = {
    "num_to_keep": _f(lambda v: v is None or (_is_int(v) and v >= 1), "an int >= 1 or null (keep all)"),
    "checkpoint_score_attribute": OPT_STR,
    "checkpoint_score_order": MODE,
    "checkpoint_frequency": INT_GE0,
    "checkpoint_at_end": OPT_BOOL,
}
_RUN_FIELDS: dict[str, Field | None] = {
    "storage_path": STR,
    "storage_options": _f(lambda v: isinstance(v, dict), "a mapping of the fsspec filesystem's keyword arguments"),
    "stop": None,
    "failure": None,
    "checkpoint": None,
    "callbacks": None,
    "max_failures": _FAILURE_FIELDS["max_failures"],
    "fail_fast": _FAILURE_FIELDS["fail_fast"],
    "verbose": _f(lambda v: v in (0, 1, 2, 3) and not isinstance(v, bool), "0, 1, 2 or 3"),
    "address": _f(
        lambda v: v is None or (isinstance(v, str) and "://" in v),
        "a Dask scheduler address like 'tcp://10.0.0.5:8786'",
    ),
    "progress_interval_s": NUM_GT0,
    "log_to_file": _f(lambda v: isinstance(v, bool) or (isinstance(v, str) and v.strip() != "") or (
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) and x.strip() for x in v)),
        "true/false, a file name (stdout and stderr together) or a list [stdout_file, stderr_file]"),
    "tls": None,
    "tuner_host": OPT_STR,
    "tuner_port": _f(lambda v: v is None or (_is_int(v) and 0 < v < 65536)
                     or (isinstance(v, str) and v.replace("-", "", 1).isdigit()), "a port (8790) or a range '8790-8799'"),
}
_TLS_FIELDS: dict[str, Field | None] = {"ca_file": STR, "cert": STR, "key": STR}
_MLFLOW_FIELDS: dict[str, Field | None] = {
    "tracking_uri": OPT_STR,
    "experiment_name": OPT_STR,
    "log_checkpoints": BOOL,
    "log_plots": BOOL,
    "register_best_model": OPT_STR,
    "tags": STR_MAP,
}
_SCALING_FIELDS: dict[str, Field | None] = {
    "num_workers": _f(lambda v: (_is_int(v) and v >= 1) or (isinstance(v, (list, tuple)) and len(v) == 2
                                                            and all(_is_int(x) and x >= 1 for x in v)
                                                            and v[0] <= v[1]),
                      "an int >= 1, or [min_workers, max_workers] (an elastic group, min <= max)"),
    "elastic_resize_monitor_interval_s": _f(lambda v: v is None or (isinstance(v, (int, float))
                                                                    and not isinstance(v, bool) and v >= 0),
                                            "a number of seconds >= 0, or null"),
    "use_gpu": BOOL,
    "accelerator_type": OPT_STR,
    "resources_per_worker": _f(
        lambda v: isinstance(v, dict) and all((_is_num(x) and x >= 0) or (str(k).lower() == "gpu_memory"
                                                                          and _is_memory(x)) for k, x in v.items()),
        "a mapping of resource names to numbers >= 0, e.g. {CPU: 1, GPU: 0.5}; GPU_memory may be an amount "
        "('10GiB') or 'auto'"),
    "placement_strategy": _one_of("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
    "trainer_resources": NUM_MAP,
}
_TOP_FIELDS: dict[str, Field | None] = {
    "name": STR,
    "description": _f(lambda v: isinstance(v, str), "a string"),
    "trainable": REF,
    "param_space": _f(lambda v: isinstance(v, dict), "a mapping of parameter names to values or domains"),
    "metric": None,
    "mode": None,
    "num_samples": None,
    "max_concurrent_trials": _f(lambda v: v is None or (_is_int(v) and v >= 1), "an int >= 1 or null"),
    "time_budget_s": None,
    "seed": OPT_INT,
    "reuse_actors": OPT_BOOL,
    "trial_name_creator": _f(lambda v: v is None or REF.check(v), REF.form),
    "trial_dirname_creator": _f(lambda v: v is None or REF.check(v), REF.form),
    "search": None,
    "scheduler": None,
    "scaling": None,
    "run": None,
    "mlflow": None,
}
_TOP_ALIASES: dict[str, Path] = {
    "num_samples": ("num_samples",),
    "max_concurrent_trials": ("max_concurrent_trials",),
    "time_budget_s": ("time_budget_s",),
    "mode": ("mode",),
    "metric": ("metric",),
}
