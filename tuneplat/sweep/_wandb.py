"""Weights & Biases sweep files, translated into tuneplat's sweep-file form.

A W&B sweep file (``method``, ``metric: {name, goal}``, ``parameters``,
``early_terminate``, ``run_cap``) runs unchanged once it names the function to
run: ``trainable: module:function`` (or ``program: train.py:main``). The
translation table is in ``docs/sweep-files.md``; what has no equivalent is
refused with the alternative, never silently approximated.
"""

from __future__ import annotations

import math
from typing import Any

from ._sweepfile import Doc

__all__ = ["is_wandb", "translate"]

Path = tuple[Any, ...]

_WANDB_KEYS = {
    "method",
    "metric",
    "parameters",
    "early_terminate",
    "run_cap",
    "program",
    "command",
    "name",
    "description",
    "project",
    "entity",
    "apiVersion",
    "kind",
    "controller",
    "job",
    "image_uri",
}
#: tuneplat keys a W&B file may add
_EXTRA_KEYS = {"trainable", "run", "scaling", "mlflow", "seed", "num_samples", "max_concurrent_trials", "time_budget_s"}
_IGNORED = {"command", "entity", "apiVersion", "kind", "controller", "job", "image_uri"}
_PARAM_KEYS = {
    "value",
    "values",
    "distribution",
    "min",
    "max",
    "mu",
    "sigma",
    "q",
    "probabilities",
    "parameters",
    "a",
    "b",
}
_DISTRIBUTIONS = (
    "constant",
    "categorical",
    "int_uniform",
    "uniform",
    "q_uniform",
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform",
    "q_log_uniform_values",
    "normal",
    "q_normal",
)
_UNSUPPORTED = {
    "categorical_w_probabilities": "weighted choices have no tuneplat domain; repeat values in `values` to weight them",
    "inv_log_uniform": "no tuneplat domain; sample 1/x with log_uniform_values and invert it in the trainable",
    "inv_log_uniform_values": "no tuneplat domain; sample 1/x with log_uniform_values and invert it in the trainable",
    "log_normal": "no tuneplat domain; sample normal (mu, sigma) and take exp() in the trainable",
    "q_log_normal": "no tuneplat domain; sample normal (mu, sigma) and take exp() in the trainable",
    "beta": "no tuneplat domain; use uniform or write a tuneplat sweep file with sample_from",
    "q_beta": "no tuneplat domain; use uniform or write a tuneplat sweep file with sample_from",
}
DEFAULT_RUN_CAP = 10


def is_wandb(data: Any) -> bool:
    """A W&B sweep file has ``method`` and ``parameters`` and no ``param_space``."""
    return isinstance(data, dict) and "method" in data and "parameters" in data and "param_space" not in data


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def translate(data: dict[str, Any], doc: Doc) -> tuple[dict[str, Any], list[str]]:
    """The tuneplat form of a W&B sweep, and notes on what was ignored or defaulted.

    Errors point into the W&B file; ``doc.aliases`` maps translated keys back
    to where they were written.

    Raises:
        SweepFileError: unknown keys, bad values, distributions without an equivalent.
    """
    notes: list[str] = []
    for key in data:
        if key not in _WANDB_KEYS | _EXTRA_KEYS:
            raise doc.error(
                (key,),
                f"unknown key in a W&B sweep file; expected one of: {', '.join(sorted(_WANDB_KEYS | _EXTRA_KEYS))}",
                key=True,
            )
    out: dict[str, Any] = {}
    method = data.get("method")
    if method not in ("random", "grid", "bayes"):
        hint = (
            " ('custom' needs W&B's scheduler service; use search: in a tuneplat sweep file)"
            if method == "custom"
            else ""
        )
        raise doc.error(("method",), f"got {method!r}; expected 'random', 'grid' or 'bayes'{hint}")
    # trainable
    program = data.get("program")
    if "trainable" in data:
        out["trainable"] = data["trainable"]
        if program is not None:
            notes.append(f"program {program!r} ignored: trainable {data['trainable']!r} is run")
    elif isinstance(program, str) and ":" in program:
        out["trainable"] = program
        doc.aliases[("trainable",)] = ("program",)
    else:
        what = f"program: {program!r} is a script W&B runs as a process; " if program is not None else ""
        raise doc.error(
            (),
            f"missing required key 'trainable'; {what}expected trainable: 'module:function' or "
            "'path/to/file.py:function' naming a function that calls tuneplat.report()",
        )
    for key in _IGNORED:
        if key in data:
            notes.append(f"{key} ignored (W&B agent setting)")
    for key in ("name", "description"):
        if key in data:
            out[key] = data[key]
    for key in ("run", "scaling", "mlflow", "seed", "max_concurrent_trials", "time_budget_s"):
        if key in data:
            out[key] = data[key]
    if "project" in data and "mlflow" not in data:
        if not isinstance(data["project"], str):
            raise doc.error(("project",), f"got {data['project']!r}; expected a string")
        out["mlflow"] = {"experiment_name": data["project"]}
        doc.aliases[("mlflow",)] = ("project",)
        doc.leaf_aliases.add(("mlflow",))
    # metric
    metric = data.get("metric")
    if metric is not None:
        if not isinstance(metric, dict):
            raise doc.error(("metric",), f"got {metric!r}; expected a mapping {{name: val_loss, goal: minimize}}")
        for key in metric:
            if key not in ("name", "goal", "target", "impute", "impute_while_running"):
                raise doc.error(
                    ("metric", key),
                    "unknown key; expected one of: goal, impute, impute_while_running, name, target",
                    key=True,
                )
        if not isinstance(metric.get("name"), str) or not metric.get("name"):
            raise doc.error(("metric", "name"), f"got {metric.get('name')!r}; expected the metric's name")
        goal = metric.get("goal", "minimize")
        if goal not in ("minimize", "maximize"):
            raise doc.error(("metric", "goal"), f"got {goal!r}; expected 'minimize' or 'maximize'")
        out["metric"] = metric["name"]
        out["mode"] = "min" if goal == "minimize" else "max"
        doc.aliases[("metric",)] = ("metric", "name")
        doc.aliases[("mode",)] = ("metric", "goal")
        for key in ("target", "impute", "impute_while_running"):
            if key in metric:
                notes.append(f"metric.{key} ignored (no tuneplat equivalent; use run.stop to end trials early)")
    # search
    out["search"] = {"algorithm": {"random": "random", "grid": "grid", "bayes": "tpe"}[method]}
    doc.aliases[("search",)] = ("method",)
    doc.leaf_aliases.add(("search",))
    if "run_cap" in data:
        cap = data["run_cap"]
        if not _int(cap) or cap < 1:
            raise doc.error(("run_cap",), f"got {cap!r}; expected an int >= 1")
        if "num_samples" in data:
            raise doc.error(("num_samples",), "given together with run_cap; write one of them", key=True)
        out["num_samples"] = cap
        doc.aliases[("num_samples",)] = ("run_cap",)
    elif "num_samples" in data:
        out["num_samples"] = data["num_samples"]
    elif method != "grid":
        out["num_samples"] = DEFAULT_RUN_CAP
        notes.append(f"no run_cap: running {DEFAULT_RUN_CAP} trials (W&B would run until stopped)")
    # parameters
    params = data.get("parameters")
    out["param_space"] = _parameters(params, ("parameters",), ("param_space",), doc, method)
    # early termination
    et = data.get("early_terminate")
    if et is not None:
        out["scheduler"] = _early_terminate(et, doc)
    return out, notes


def _parameters(params: Any, wpath: Path, npath: Path, doc: Doc, method: str) -> dict[str, Any]:
    if not isinstance(params, dict) or not params:
        raise doc.error(
            wpath,
            f"got {params!r}; expected a mapping of parameter names to "
            "{values: [...]}, {value: x}, {min: a, max: b} or {distribution: ..., ...}",
        )
    space: dict[str, Any] = {}
    for name, spec in params.items():
        wp, np_ = wpath + (name,), npath + (name,)
        doc.aliases[np_] = wp
        if not isinstance(spec, dict):
            raise doc.error(wp, f"got {spec!r}; expected a mapping such as {{values: [...]}} or {{min: 0, max: 1}}")
        for key in spec:
            if key not in _PARAM_KEYS:
                raise doc.error(
                    wp + (key,), f"unknown key; expected one of: {', '.join(sorted(_PARAM_KEYS))}", key=True
                )
        if "parameters" in spec:
            if len(spec) > 1:
                other = next(k for k in spec if k != "parameters")
                raise doc.error(wp + (other,), "not allowed beside `parameters` (a nested group)", key=True)
            space[name] = _parameters(spec["parameters"], wp + ("parameters",), np_, doc, method)
            continue
        doc.leaf_aliases.add(np_)
        space[name] = _param(spec, wp, doc, method)
    return space


def _param(spec: dict[str, Any], wp: Path, doc: Doc, method: str) -> Any:
    dist = spec.get("distribution")
    if dist is None:
        if "value" in spec:
            dist = "constant"
        elif "values" in spec:
            dist = "categorical"
        elif "min" in spec and "max" in spec:
            dist = "int_uniform" if _int(spec["min"]) and _int(spec["max"]) else "uniform"
        else:
            raise doc.error(
                wp, "no distribution; expected {values: [...]}, {value: x}, {min: a, max: b} or a `distribution` key"
            )
    if dist in _UNSUPPORTED:
        raise doc.error(wp + ("distribution",), f"distribution {dist!r} is not supported: {_UNSUPPORTED[dist]}")
    if dist not in _DISTRIBUTIONS:
        raise doc.error(
            wp + ("distribution",), f"unknown distribution {dist!r}; expected one of: {', '.join(_DISTRIBUTIONS)}"
        )
    allowed = {
        "constant": {"value"},
        "categorical": {"values"},
        "int_uniform": {"min", "max"},
        "uniform": {"min", "max"},
        "q_uniform": {"min", "max", "q"},
        "log_uniform": {"min", "max"},
        "log_uniform_values": {"min", "max"},
        "q_log_uniform": {"min", "max", "q"},
        "q_log_uniform_values": {"min", "max", "q"},
        "normal": {"mu", "sigma"},
        "q_normal": {"mu", "sigma", "q"},
    }[dist] | {"distribution"}
    for key in spec:
        if key not in allowed:
            raise doc.error(
                wp + (key,), f"not used by distribution {dist!r}; expected only: {', '.join(sorted(allowed))}", key=True
            )

    def need(key: str, check: Any = _num, form: str = "a finite number", default: Any = None) -> Any:
        if key not in spec:
            if default is not None:
                return default
            raise doc.error(wp, f"missing `{key}` for distribution {dist!r}; expected {form}")
        if not check(spec[key]):
            raise doc.error(wp + (key,), f"got {spec[key]!r}; expected {form}")
        return spec[key]

    if dist == "constant":
        return {"const": spec["value"]}
    if dist == "categorical":
        values = need("values", lambda v: isinstance(v, list) and bool(v), "a non-empty list")
        return {"grid_search": values} if method == "grid" else {"choice": values}
    if method == "grid" and dist != "int_uniform":
        raise doc.error(
            wp,
            f"method 'grid' needs `values`, `value` or int_uniform, got distribution {dist!r}; "
            "expected a discrete parameter",
        )
    if dist == "int_uniform":
        lo = need("min", _int, "an int")
        hi = need("max", _int, "an int")
        if lo > hi:
            raise doc.error(wp + ("max",), f"max={hi} is below min={lo}; expected max >= min")
        if method == "grid":
            return {"grid_search": list(range(lo, hi + 1))}
        return {"randint": [lo, hi + 1]}  # W&B's max is inclusive
    if dist in ("normal", "q_normal"):
        mu = need("mu", default=0.0)
        sigma = need("sigma", lambda v: _num(v) and v > 0, "a number > 0", default=1.0)
        if dist == "q_normal":
            return {"qrandn": [mu, sigma, need("q", lambda v: _num(v) and v > 0, "a number > 0", default=1.0)]}
        return {"randn": [mu, sigma]}
    lo, hi = need("min"), need("max")
    if dist in ("log_uniform", "q_log_uniform"):  # min/max are natural-log exponents
        lo, hi = math.exp(lo), math.exp(hi)
    if dist == "uniform":
        return {"uniform": [lo, hi]}
    q = need("q", lambda v: _num(v) and v > 0, "a number > 0", default=1.0) if dist.startswith("q_") else None
    if dist == "q_uniform":
        return {"quniform": [lo, hi, q]}
    if dist in ("log_uniform", "log_uniform_values"):
        return {"loguniform": [lo, hi]}
    return {"qloguniform": [lo, hi, q]}


def _early_terminate(et: Any, doc: Doc) -> dict[str, Any]:
    p: Path = ("early_terminate",)
    doc.aliases[("scheduler",)] = p
    doc.leaf_aliases.add(("scheduler",))
    if not isinstance(et, dict):
        raise doc.error(p, f"got {et!r}; expected {{type: hyperband, min_iter: 3, eta: 3}}")
    for key in et:
        if key not in ("type", "min_iter", "max_iter", "s", "eta", "strict"):
            raise doc.error(
                p + (key,), "unknown key; expected one of: eta, max_iter, min_iter, s, strict, type", key=True
            )
    if et.get("type") != "hyperband":
        raise doc.error(p + ("type",), f"got {et.get('type')!r}; expected 'hyperband'")
    eta = et.get("eta", 3)
    if not (_num(eta) and eta > 1):
        raise doc.error(p + ("eta",), f"got {eta!r}; expected a number > 1")
    if eta < 2:
        raise doc.error(p + ("eta",), f"got {eta!r}; expected eta >= 2 (tuneplat's ASHA reduction_factor)")
    out: dict[str, Any] = {"type": "asha", "reduction_factor": eta}
    if "min_iter" in et:
        mi = et["min_iter"]
        if not (_int(mi) and mi >= 1):
            raise doc.error(p + ("min_iter",), f"got {mi!r}; expected an int >= 1")
        out["grace_period"] = mi
        if "max_iter" in et:
            out["max_t"] = et["max_iter"]
        else:
            out["max_t"] = mi * eta**8  # W&B sets no upper bound
    elif "max_iter" in et:
        mx, s = et["max_iter"], et.get("s", -1)
        if not (_int(mx) and mx >= 1):
            raise doc.error(p + ("max_iter",), f"got {mx!r}; expected an int >= 1")
        if not (_num(s) and s >= 0):
            raise doc.error(
                p, "max_iter needs `s` (how many brackets below max_iter); expected e.g. {max_iter: 27, s: 2}"
            )
        out["max_t"] = mx
        out["grace_period"] = max(1, int(mx / eta**s))
    else:
        raise doc.error(p, "missing min_iter (or max_iter with s); expected e.g. {type: hyperband, min_iter: 3}")
    if not (_num(out["max_t"]) and out["max_t"] >= out["grace_period"]):
        raise doc.error(p + ("max_iter",), f"got {out['max_t']!r}; expected an int >= min_iter")
    return out
