"""Sweep files: YAML/TOML experiment descriptions that map one-to-one onto the Python API.

This is the only module where strings from a sweep file become objects:
``trainable: module:function`` is imported (never evaluated), domains like
``{loguniform: [1.0e-4, 0.1]}`` become :mod:`tuneplat.search` domains,
``scheduler: {type: asha, ...}`` becomes an :class:`~tuneplat.schedulers.ASHAScheduler`,
and so on. Every key is checked against a strict schema; errors name the
file, line and column, the key path and the expected form. See
``docs/sweep-files.md`` for the full mapping.

Example:
    >>> from tuneplat.config import load_sweep
    >>> sweep = load_sweep("examples/toy_asha.yaml", overrides=["num_samples=4"])  # doctest: +SKIP
    >>> results = sweep.tuner().fit()  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ._config import CheckpointConfig, FailureConfig, MLflowConfig, RunConfig, ScalingConfig, TuneConfig
from .search import _domains as D
from .sweep._sweepfile import Doc, Loc, SweepFileError, format_path, parse_scalar, read_document

__all__ = [
    "DOMAINS",
    "SCHEDULERS",
    "SEARCH_ALGORITHMS",
    "Sweep",
    "SweepFileError",
    "apply_overrides",
    "build_sweep",
    "import_object",
    "interpolate_env",
    "load_sweep",
    "portable_data",
    "read_sweep_document",
]

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
    from .execution._gpu_memory import parse_memory

    try:
        parse_memory(value)
    except ValueError:
        return False
    return True


def _one_of(*choices: Any) -> Field:
    return _f(lambda v: v in choices, " or ".join(repr(c) for c in choices))


class _Builder:
    """Validates a :class:`Doc` section by section and builds the Python objects."""

    def __init__(self, doc: Doc, base_dir: str) -> None:
        self.doc = doc
        self.base_dir = base_dir

    # -- errors ---------------------------------------------------------------
    def err(self, path: Path, problem: str, key: bool = False) -> SweepFileError:
        return self.doc.error(path, problem, key)

    def expect(self, path: Path, value: Any, form: str, problem: str | None = None) -> SweepFileError:
        return self.err(path, f"{problem or 'got ' + _describe(value)}; expected {form}")

    def section(
        self, path: Path, value: Any, fields: Mapping[str, Field | None], what: str, required: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Check a mapping against ``fields`` (None: checked by the caller); unknown keys are errors."""
        if not isinstance(value, dict):
            raise self.expect(path, value, f"a mapping ({what})")
        for key in value:
            if key not in fields:
                hint = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
                allowed = ", ".join(sorted(fields))
                raise self.err(
                    path + (key,),
                    f"unknown key{f' (did you mean {hint[0]!r}?)' if hint else ''}; expected one of: {allowed}",
                    key=True,
                )
        for key in required:
            if key not in value:
                spec = fields[key]
                raise self.err(path, f"missing required key '{key}'; expected {spec.form if spec else key}")
        for key, spec in fields.items():
            if spec is not None and key in value and not spec.check(value[key]):
                raise self.expect(path + (key,), value[key], spec.form)
        return value

    # -- imports --------------------------------------------------------------
    def ref(self, path: Path, value: Any, what: str = "function") -> Any:
        if not REF.check(value):
            raise self.expect(path, value, REF.form)
        try:
            return import_object(value, self.base_dir, what=what)
        except ImportError as exc:
            raise self.err(path, str(exc)) from None

    # -- param_space ----------------------------------------------------------
    def space(self, path: Path, value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1:
                ((name, arg),) = value.items()
                if name in DOMAINS:
                    return self.domain(path + (name,), name, arg)
                if name == "grid_search":
                    if not isinstance(arg, list) or not arg:
                        raise self.expect(
                            path + (name,), arg, "a non-empty list of values, e.g. {grid_search: [1, 2, 3]}"
                        )
                    return {"grid_search": list(arg)}
                if name == "const":
                    return arg
                if name == "sample_from":
                    return D.sample_from(self.ref(path + (name,), arg))
                close = difflib.get_close_matches(str(name), [*DOMAINS, "grid_search", "sample_from"], n=1, cutoff=0.75)
                if close and isinstance(arg, (list, dict)):
                    raise self.err(
                        path + (name,),
                        f"unknown domain {name!r} (did you mean {close[0]!r}?); "
                        f"expected one of: {', '.join(sorted([*DOMAINS, 'grid_search', 'sample_from', 'const']))} "
                        "(write {const: {...}} for a literal mapping)",
                        key=True,
                    )
            return {k: self.space(path + (k,), v) for k, v in value.items()}
        return value

    def domain(self, path: Path, name: str, arg: Any) -> D.Domain:
        fn, forms, kinds = DOMAINS[name]
        form = " or ".join(f"{{{name}: {f}}}" for f in forms)
        params = list(inspect.signature(fn).parameters)
        if name == "choice" and isinstance(arg, list):
            if not arg:
                raise self.expect(path, arg, form, "got an empty list")
            return D.choice(arg)
        if isinstance(arg, dict):
            unknown = [k for k in arg if k not in params]
            if unknown:
                raise self.err(
                    path + (unknown[0],), f"unknown argument of {name}; expected one of: {', '.join(params)}", key=True
                )
            args, kwargs = [], dict(arg)
        elif isinstance(arg, list):
            args, kwargs = list(arg), {}
        else:
            raise self.expect(path, arg, form)
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError:
            raise self.expect(path, arg, form, f"got {len(args) + len(kwargs)} argument(s) {arg!r}") from None
        if name == "choice":
            cats = bound.arguments.get("categories")
            if not isinstance(cats, list) or not cats:
                raise self.expect(path, arg, form, "got an empty list")
            return D.choice(cats)
        for pname, value in bound.arguments.items():
            want = kinds.get(pname, "number")
            ok = _is_int(value) if want == "int" else _is_num(value) and math.isfinite(value)
            if not ok:
                where = path + ((params.index(pname) if isinstance(arg, list) else pname),)
                raise self.expect(
                    where, value, f"{'an int' if want == 'int' else 'a finite number'} for {pname} in {form}"
                )
        dom = fn(*args, **kwargs)
        problems = dom.problems() if hasattr(dom, "problems") else []
        if problems:
            raise self.err(path, f"bad domain: {'; '.join(problems)}; expected {form}")
        return dom

    # -- sections -------------------------------------------------------------
    def tune_config(self, data: dict[str, Any], search_alg: Any, scheduler: Any) -> TuneConfig:
        metric, mode = data.get("metric"), data.get("mode")
        if isinstance(metric, list):
            if not metric or not all(isinstance(m, str) and m for m in metric):
                raise self.expect(("metric",), metric, "a metric name or a list of names")
            if not isinstance(mode, list) or len(mode) != len(metric) or not all(m in ("min", "max") for m in mode):
                raise self.expect(("mode",), mode, f"a list of 'min'/'max', one per metric ({len(metric)})")
        else:
            if metric is not None and not STR.check(metric):
                raise self.expect(("metric",), metric, "a metric name or a list of names")
            if mode is not None and not MODE.check(mode):
                raise self.expect(("mode",), mode, "'min' or 'max'")
        if "time_budget_s" in data and data["time_budget_s"] is not None and not NUM_GT0.check(data["time_budget_s"]):
            raise self.expect(("time_budget_s",), data["time_budget_s"], "a number of seconds > 0 or null")
        ns = data.get("num_samples", 1)
        if not (_is_int(ns) and (ns >= 1 or ns == -1)):
            raise self.expect(("num_samples",), ns, "an int >= 1 (or -1 with time_budget_s)")
        kwargs: dict[str, Any] = {
            "metric": metric,
            "mode": mode,
            "search_alg": search_alg,
            "scheduler": scheduler,
            "num_samples": ns,
        }
        for key in ("max_concurrent_trials", "time_budget_s", "seed", "reuse_actors"):
            if key in data:
                kwargs[key] = data[key]
        for key in ("trial_name_creator", "trial_dirname_creator"):
            if data.get(key) is not None:
                kwargs[key] = self.ref((key,), data[key])
        return self.construct(TuneConfig, kwargs, ())

    def construct(self, cls: Callable[..., Any], kwargs: dict[str, Any], path: Path) -> Any:
        """Call a constructor; its own ValueError/TypeError becomes a located error."""
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:
            text = str(exc)
            where = path
            m = re.search(r"`(?:\w+\.)?(\w+)(?:\[[^\]]*\])?`", text)
            if m and m.group(1) in kwargs:
                where = path + (m.group(1),)
            elif m and path == () and m.group(1) in _TOP_ALIASES:
                where = _TOP_ALIASES[m.group(1)]
            raise self.err(where, text.rstrip(".")) from None

    def search(self, value: Any) -> Any:
        path: Path = ("search",)
        if not isinstance(value, dict):
            raise self.expect(path, value, "a mapping like {algorithm: tpe, seed: 0}")
        algo = value.get("algorithm", "random")
        if not isinstance(algo, str):
            raise self.expect(path + ("algorithm",), algo, f"one of: {', '.join(SEARCH_ALGORITHMS)} or 'module:Class'")
        if ":" in algo and algo not in SEARCH_ALGORITHMS:
            fields: dict[str, Field | None] = {
                "algorithm": None,
                "args": _f(lambda v: isinstance(v, dict), "a mapping of constructor arguments"),
                "max_concurrent": INT_GE1,
            }
            self.section(path, value, fields, "search settings")
            cls = self.ref(path + ("algorithm",), algo, what="class")
            searcher = self.construct(cls, dict(value.get("args") or {}), path + ("args",))
            from .search import Searcher

            if not isinstance(searcher, Searcher):
                raise self.err(
                    path + ("algorithm",),
                    f"{algo} did not build a tuneplat.search.Searcher "
                    f"(got {type(searcher).__name__}); expected a Searcher subclass",
                )
        elif algo in ("random", "grid", "basic"):
            fields = {"algorithm": None, "seed": OPT_INT, "points_to_evaluate": _POINTS, "max_concurrent": INT_GE1}
            self.section(path, value, fields, "search settings")
            from .search import BasicVariantGenerator

            searcher = self.construct(
                BasicVariantGenerator,
                {
                    "points_to_evaluate": value.get("points_to_evaluate"),
                    "random_state": value.get("seed"),
                },
                path,
            )
        elif algo in _OPTUNA_ALGOS:
            fields = {
                "algorithm": None,
                "seed": OPT_INT,
                "points_to_evaluate": _POINTS,
                "max_concurrent": INT_GE1,
                "evaluated_rewards": _f(lambda v: isinstance(v, list), "a list of metric values, one per point"),
                "space": REF,
            }
            if algo == "optuna":
                fields["sampler"] = _f(lambda v: v in _OPTUNA_SAMPLERS, " or ".join(repr(s) for s in _OPTUNA_SAMPLERS))
            self.section(path, value, fields, "search settings")
            from .search.optuna import OptunaSearch

            kwargs = {
                "sampler": value.get("sampler", "tpe") if algo == "optuna" else algo,
                "seed": value.get("seed"),
                "points_to_evaluate": value.get("points_to_evaluate"),
                "evaluated_rewards": value.get("evaluated_rewards"),
            }
            if value.get("space") is not None:
                kwargs["space"] = self.ref(path + ("space",), value["space"])
            searcher = self.construct(OptunaSearch, kwargs, path)
        else:
            hint = difflib.get_close_matches(algo, SEARCH_ALGORITHMS, n=1)
            raise self.err(
                path + ("algorithm",),
                f"unknown search algorithm {algo!r}"
                f"{f' (did you mean {hint[0]!r}?)' if hint else ''}; expected one of: "
                f"{', '.join(SEARCH_ALGORITHMS)}, or 'module:Class' of a Searcher",
            )
        if value.get("max_concurrent") is not None:
            from .search import ConcurrencyLimiter

            searcher = ConcurrencyLimiter(searcher, value["max_concurrent"])
        return searcher

    def scheduler(self, value: Any) -> Any:
        path: Path = ("scheduler",)
        if not isinstance(value, dict):
            raise self.expect(path, value, "a mapping like {type: asha, max_t: 20}")
        kind = value.get("type")
        if kind is None:
            raise self.err(path, f"missing required key 'type'; expected one of: {', '.join(SCHEDULERS)}")
        if kind not in SCHEDULERS:
            hint = difflib.get_close_matches(str(kind), list(SCHEDULERS), n=1)
            raise self.err(
                path + ("type",),
                f"unknown scheduler {kind!r}{f' (did you mean {hint[0]!r}?)' if hint else ''}; "
                f"expected one of: {', '.join(SCHEDULERS)}",
            )
        cls_name, fields = SCHEDULERS[kind]
        self.section(path, value, {"type": None, **fields}, f"{kind} scheduler settings")
        kwargs = {k: v for k, v in value.items() if k != "type"}
        if kind == "pbt":
            if "hyperparam_mutations" in kwargs:
                kwargs["hyperparam_mutations"] = self.mutations(
                    path + ("hyperparam_mutations",), kwargs["hyperparam_mutations"]
                )
            if kwargs.get("custom_explore_fn") is not None:
                kwargs["custom_explore_fn"] = self.ref(path + ("custom_explore_fn",), kwargs["custom_explore_fn"])
            if "perturbation_factors" in kwargs:
                kwargs["perturbation_factors"] = tuple(kwargs["perturbation_factors"])
        if kind == "optuna_pruner":
            import optuna

            pruner_cls = getattr(optuna.pruners, _PRUNERS[kwargs.pop("pruner")])
            pargs = kwargs.pop("pruner_args", None) or {}
            kwargs["pruner"] = self.construct(pruner_cls, dict(pargs), path + ("pruner_args",))
            from .search.optuna import OptunaPrunerScheduler

            return self.construct(OptunaPrunerScheduler, kwargs, path)
        from . import schedulers

        return self.construct(getattr(schedulers, cls_name), kwargs, path)

    def mutations(self, path: Path, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict) or not value:
            raise self.expect(
                path, value, "a mapping of parameter names to lists of values, domains or mappings of those"
            )
        out: dict[str, Any] = {}
        for k, v in value.items():
            p = path + (k,)
            if isinstance(v, list):
                if not v:
                    raise self.expect(p, v, "a non-empty list of values")
                out[k] = v
            elif isinstance(v, dict) and len(v) == 1 and next(iter(v)) in DOMAINS:
                out[k] = self.space(p, v)
            elif isinstance(v, dict) and len(v) == 1 and next(iter(v)) == "sample_from":
                out[k] = self.ref(p + ("sample_from",), v["sample_from"])
            elif isinstance(v, dict):
                out[k] = self.mutations(p, v)
            else:
                raise self.expect(
                    p, v, "a list of values, a domain such as {uniform: [0.001, 0.1]}, or a mapping of those"
                )
        return out

    def stop(self, value: Any) -> Any:
        path: Path = ("run", "stop")
        if isinstance(value, str):
            return self.ref(path, value)
        if not isinstance(value, dict):
            raise self.expect(path, value, "a mapping {metric: threshold} or 'module:function'")
        for k, v in value.items():
            if not (_is_num(v) and not math.isnan(v)):
                raise self.expect(path + (k,), v, "a number (the trial stops when result[key] >= it)")
        return dict(value)

    def storage_filesystem(self, storage_path: Any, options: dict[str, Any]) -> Any:
        """``run.storage_options``: the keyword arguments of the fsspec filesystem of a remote storage_path."""
        from urllib.parse import urlparse

        from .storage._storage import is_remote

        where: Path = ("run", "storage_options")
        if not is_remote(storage_path):
            raise self.err(where, "applies to a remote run.storage_path (a URL like s3://bucket/results); "
                                  "set run.storage_path to one, or remove storage_options")
        scheme = urlparse(storage_path).scheme
        try:
            import fsspec

            return fsspec.filesystem(scheme, **options)
        except Exception as exc:  # noqa: BLE001 - any constructor error is the user's to fix
            raise self.err(where, f"fsspec could not make the {scheme}:// filesystem from these options "
                                  f"({type(exc).__name__}: {exc}); they are the keyword arguments of its "
                                  "filesystem class (e.g. s3fs.S3FileSystem: endpoint_url, key, secret)") from None

    def run_config(self, data: dict[str, Any]) -> RunConfig:
        path: Path = ("run",)
        run = self.section(path, data.get("run") or {}, _RUN_FIELDS, "run settings")
        kwargs: dict[str, Any] = {"name": data.get("name")}
        for key in ("storage_path", "verbose", "address", "progress_interval_s", "log_to_file", "tuner_host",
                    "tuner_port"):
            if key in run:
                kwargs[key] = run[key]
        if run.get("tls") is not None:
            tls = self.section(path + ("tls",), run["tls"], _TLS_FIELDS, "TLS settings")
            missing = [k for k in ("ca_file", "cert", "key") if not tls.get(k)]
            if missing:
                raise self.err(path + ("tls",), f"needs ca_file, cert and key (the cluster's CA and this client's "
                                                f"certificate and key files); missing {missing}")
            kwargs["security"] = {"tls_ca_file": tls["ca_file"], "tls_client_cert": tls["cert"],
                                  "tls_client_key": tls["key"], "require_encryption": True}
        if run.get("storage_options") is not None:
            kwargs["storage_filesystem"] = self.storage_filesystem(run.get("storage_path"), run["storage_options"])
        if run.get("stop") is not None:
            kwargs["stop"] = self.stop(run["stop"])
        failure = self.section(path + ("failure",), run.get("failure") or {}, _FAILURE_FIELDS, "failure settings")
        for key in ("max_failures", "fail_fast"):
            if key in run:
                if key in failure:
                    raise self.err(path + (key,), f"given twice (also as run.failure.{key}); write it once", key=True)
                failure = {**failure, key: run[key]}
        kwargs["failure_config"] = self.construct(FailureConfig, dict(failure), path + ("failure",))
        ckpt = self.section(
            path + ("checkpoint",), run.get("checkpoint") or {}, _CHECKPOINT_FIELDS, "checkpoint settings"
        )
        kwargs["checkpoint_config"] = self.construct(CheckpointConfig, dict(ckpt), path + ("checkpoint",))
        if "mlflow" in data:
            ml = data["mlflow"]
            if isinstance(ml, bool):
                kwargs["mlflow"] = MLflowConfig() if ml else False
            elif ml is not None:
                self.section(("mlflow",), ml, _MLFLOW_FIELDS, "MLflow settings")
                kwargs["mlflow"] = self.construct(MLflowConfig, dict(ml), ("mlflow",))
        if run.get("callbacks"):
            kwargs["callbacks"] = self.callbacks(path + ("callbacks",), run["callbacks"])
        return self.construct(RunConfig, kwargs, path)

    def callbacks(self, path: Path, value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise self.expect(path, value, "a list of 'module:Class' or {class: 'module:Class', args: {...}}")
        out = []
        for i, item in enumerate(value):
            p = path + (i,)
            if isinstance(item, str):
                cls, args = self.ref(p, item, what="class"), {}
            else:
                self.section(
                    p,
                    item,
                    {"class": REF, "args": _f(lambda v: isinstance(v, dict), "a mapping")},
                    "callback",
                    required=["class"],
                )
                cls, args = self.ref(p + ("class",), item["class"], what="class"), dict(item.get("args") or {})
            out.append(self.construct(cls, args, p))
        return out

    def scaling(self, value: Any) -> ScalingConfig | None:
        if value is None:
            return None
        self.section(("scaling",), value, _SCALING_FIELDS, "scaling settings")
        return self.construct(ScalingConfig, dict(value), ("scaling",))


# --------------------------------------------------------------------------- tables (documented in docs/sweep-files.md)

#: domain name -> (function, accepted list forms, argument kinds)
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


# --------------------------------------------------------------------------- imports


def import_object(ref: str, base_dir: str | None = None, what: str = "function") -> Any:
    """Import ``module:attr`` or ``path/to/file.py:attr`` (attr may be dotted); nothing is evaluated.

    Module names are looked up on ``sys.path`` after the current directory and
    ``base_dir`` (the sweep file's folder) are added to it. A file path is
    resolved against ``base_dir`` first, then the current directory; its
    module is registered with cloudpickle to travel *by value* to Dask
    workers, which therefore need not have the file.

    Raises:
        ImportError: with a message naming what was looked for and where.
    """
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise ImportError(f"{ref!r} is not 'module:{what}' or 'path/to/file.py:{what}'")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise ImportError(f"{attr!r} in {ref!r} is not a Python name")
    is_file = target.endswith(".py") or "/" in target or os.sep in target
    if is_file:
        candidates = (
            [target]
            if os.path.isabs(target)
            else [os.path.join(base_dir or os.getcwd(), target), os.path.join(os.getcwd(), target)]
        )
        found = next((os.path.abspath(c) for c in candidates if os.path.isfile(c)), None)
        if found is None:
            raise ImportError(
                f"cannot import {ref!r}: no file {target!r} (looked in "
                f"{', '.join(sorted({os.path.dirname(os.path.abspath(c)) for c in candidates}))})"
            )
        module = _import_file(found)
    else:
        for d in (base_dir, os.getcwd()):
            if d and os.path.abspath(d) not in [os.path.abspath(p) for p in sys.path if p]:
                sys.path.insert(0, os.path.abspath(d))
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
                raise ImportError(
                    f"cannot import module {target!r} (No module named {exc.name!r}); expected "
                    "an installed module or one importable from the current directory"
                ) from None
            raise ImportError(f"importing module {target!r} failed: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
            raise ImportError(f"importing module {target!r} failed: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportError(f"module {module.__name__!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImportError(f"{ref!r} is a {type(obj).__name__}, not a {what}")
    if is_file and what == "function" and inspect.isfunction(obj):
        return ShippedFunction(obj, ref)
    return obj


class ShippedFunction:
    """A function from a file workers may not have, carried *by value* (cloudpickle bytes).

    Dask pickles task arguments with the standard pickle first, which refers
    to functions by module name; a function loaded from a file path lives in
    a module the workers cannot import. This wrapper holds the function's
    cloudpickle bytes and unpickles them once per worker process.
    """

    _cache: ClassVar[dict[bytes, Callable[..., Any]]] = {}

    def __init__(self, fn: Callable[..., Any], ref: str) -> None:
        import cloudpickle

        self._blob = cloudpickle.dumps(fn)
        self._key = hashlib.sha1(self._blob).digest()
        self.ref = ref
        self.__name__ = getattr(fn, "__name__", "trainable")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def _fn(self) -> Callable[..., Any]:
        fn = self._cache.get(self._key)
        if fn is None:
            import cloudpickle

            fn = self._cache[self._key] = cloudpickle.loads(self._blob)  # our own bytes
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.ref} (shipped by value)>"


def _import_file(path: str) -> Any:
    name = (
        "tuneplat_sweep_"
        + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        + "_"
        + hashlib.sha1(path.encode()).hexdigest()[:8]
    )
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001
        del sys.modules[name]
        raise ImportError(f"importing {path!r} failed: {type(exc).__name__}: {exc}") from None
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module


# --------------------------------------------------------------------------- overrides and ${env:VAR}


def apply_overrides(doc: Doc, overrides: Sequence[str], source_prefix: str = "--set") -> None:
    """Apply ``key.path=value`` overrides (value read as one YAML value) to ``doc`` in place.

    Intermediate mappings are created; list items are addressed by index
    (``search.points_to_evaluate.0.lr=0.1``). The overridden keys get the
    override's position, so later errors point at the ``--set`` argument.
    """
    for _i, item in enumerate(overrides):
        source = f"{source_prefix} {item}" if source_prefix == "--set" else source_prefix
        key, eq, text = item.partition("=")
        parts = [p for p in key.strip().split(".")]
        if not eq or not key.strip() or any(not p for p in parts):
            raise SweepFileError("expected key.path=value, e.g. --set scheduler.max_t=50", Loc(source, 1, 1))
        value, vdoc = parse_scalar(text, source, col=len(key) + 2)
        node: Any = doc.data
        path: Path = ()
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            step: Any = part
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise SweepFileError(
                        f"{format_path(path)} is a list of {len(node)} item(s); expected an index "
                        f"0..{len(node) - 1}, got {part!r}",
                        Loc(source, 1, 1),
                        format_path(path),
                    )
                step = int(part)
            elif not isinstance(node, dict):
                raise SweepFileError(
                    f"{format_path(path)} holds {_describe(node)}, not a mapping; cannot set a key inside it",
                    Loc(source, 1, 1),
                    format_path(path),
                )
            if last:
                node[step] = value
            else:
                if isinstance(node, dict) and not isinstance(node.get(step), (dict, list)):
                    node[step] = {}
                node = node[step]
            path = path + (step,)
        for table in (doc.locs, doc.key_locs):
            for p in [p for p in table if p[: len(path)] == path]:
                del table[p]
        doc.key_locs[path] = Loc(source, 1, 1)
        for sub, loc in vdoc.locs.items():
            doc.locs[path + sub] = loc
        for sub, loc in vdoc.key_locs.items():
            doc.key_locs[path + sub] = loc


_ENV = re.compile(r"\$(\$?)\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def interpolate_env(doc: Doc, environ: Mapping[str, str] | None = None) -> Any:
    """A copy of ``doc.data`` with ``${env:VAR}`` replaced (``$${env:VAR}`` stays literal).

    A string that is exactly ``${env:VAR}`` takes the variable's value read as
    a YAML value (so ``num_samples: ${env:N}`` gives an int); inside a longer
    string the text is substituted. Nothing else is interpolated or evaluated.
    """
    env = os.environ if environ is None else environ

    def walk(value: Any, path: Path) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, path + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, path + (i,)) for i, v in enumerate(value)]
        if not isinstance(value, str) or "{env:" not in value:
            return value
        for m in _ENV.finditer(value):
            if not m.group(1) and m.group(2) not in env:
                raise doc.error(
                    path,
                    f"environment variable {m.group(2)} is not set (written as ${{env:{m.group(2)}}}); "
                    "expected it to be exported, e.g. `export " + m.group(2) + "=...`",
                )
        whole = _ENV.fullmatch(value)
        if whole and not whole.group(1):
            parsed, _ = parse_scalar(env[whole.group(2)], f"${{env:{whole.group(2)}}}")
            return parsed
        return _ENV.sub(lambda m: "${env:" + m.group(2) + "}" if m.group(1) else env[m.group(2)], value)

    return walk(doc.data, ())


# --------------------------------------------------------------------------- the sweep


@dataclass
class Sweep:
    """A validated sweep file: the objects to give :class:`tuneplat.Tuner`.

    Attributes:
        trainable: the imported function.
        trainable_ref: how the sweep file named it.
        param_space, tune_config, run_config, scaling_config: Tuner arguments.
        data: the effective document (after overrides, before ``${env:...}``),
            as saved into the experiment folder as ``sweep.yaml``.
        source: the file it came from.
        translated_from: "wandb" when the file was a Weights & Biases sweep.
    """

    trainable: Callable[..., Any]
    trainable_ref: str
    param_space: dict[str, Any]
    tune_config: TuneConfig
    run_config: RunConfig
    scaling_config: ScalingConfig | None
    data: dict[str, Any]
    source: str
    translated_from: str | None = None
    notes: list[str] = field(default_factory=list)

    def tuner(self, client: Any = None) -> Any:
        """A :class:`tuneplat.Tuner` for this sweep."""
        from ._tuner import Tuner

        return Tuner(
            self.trainable,
            param_space=self.param_space,
            tune_config=self.tune_config,
            run_config=self.run_config,
            scaling_config=self.scaling_config,
            client=client,
        )


def portable_data(sweep: Sweep) -> dict[str, Any]:
    """``sweep.data`` with a relative ``path/to/file.py:function`` made absolute (for ``sweep.yaml`` copies)."""
    import copy

    data = copy.deepcopy(sweep.data)
    base = os.path.dirname(os.path.abspath(sweep.source))
    for key in ("trainable", "program"):
        ref = data.get(key)
        if not isinstance(ref, str) or ":" not in ref:
            continue
        target, _, attr = ref.rpartition(":")
        if (target.endswith(".py") or "/" in target or os.sep in target) and not os.path.isabs(target):
            for cand in (os.path.join(base, target), os.path.join(os.getcwd(), target)):
                if os.path.isfile(cand):
                    data[key] = f"{os.path.abspath(cand)}:{attr}"
                    break
    return data


def read_sweep_document(path: str | os.PathLike[str], overrides: Sequence[str] = (), text: str | None = None) -> Doc:
    """Read a sweep file and apply ``--set`` overrides (no validation yet)."""
    doc = read_document(path, text)
    apply_overrides(doc, overrides)
    return doc


def build_sweep(doc: Doc, base_dir: str | None = None, environ: Mapping[str, str] | None = None) -> Sweep:
    """Validate a document and build the objects (imports the trainable).

    Raises:
        SweepFileError: the first problem found, with its position.
    """
    import copy

    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(doc.source)) if os.path.isfile(doc.source) else os.getcwd()
    saved = copy.deepcopy(doc.data)
    data = interpolate_env(doc, environ)
    translated = None
    notes: list[str] = []
    from .sweep import _wandb

    if _wandb.is_wandb(data):
        data, notes = _wandb.translate(data, doc)
        translated = "wandb"
    b = _Builder(doc, base_dir)
    b.section((), data, _TOP_FIELDS, "sweep settings")
    if "trainable" not in data:
        raise doc.error(
            (), "missing required key 'trainable'; expected trainable: 'module:function' or 'path/to/file.py:function'"
        )
    trainable = b.ref(("trainable",), data["trainable"])
    space = b.space(("param_space",), data.get("param_space") or {})
    search = b.search(data["search"]) if data.get("search") is not None else None
    scheduler = b.scheduler(data["scheduler"]) if data.get("scheduler") is not None else None
    tune_config = b.tune_config(data, search, scheduler)
    run_config = b.run_config(data)
    scaling = b.scaling(data.get("scaling"))
    return Sweep(
        trainable=trainable,
        trainable_ref=data["trainable"],
        param_space=space,
        tune_config=tune_config,
        run_config=run_config,
        scaling_config=scaling,
        data=saved,
        source=doc.source,
        translated_from=translated,
        notes=notes,
    )


def load_sweep(
    path: str | os.PathLike[str], overrides: Sequence[str] = (), *, environ: Mapping[str, str] | None = None
) -> Sweep:
    """Read, override, validate and build a sweep file.

    Args:
        path: a ``.yaml``/``.yml``/``.toml`` file (a W&B sweep file is recognised
            by its ``method`` and ``parameters`` keys and translated).
        overrides: ``key.path=value`` strings, as ``tuneplat run --set``.
        environ: where ``${env:VAR}`` is looked up (default ``os.environ``).

    Raises:
        SweepFileError: ``file:line:col: key.path: problem; expected form``.

    Example:
        >>> sweep = load_sweep("examples/toy_asha.yaml", ["scheduler.max_t=5"])  # doctest: +SKIP
        >>> sweep.tune_config.scheduler.max_t  # doctest: +SKIP
        5
    """
    doc = read_sweep_document(path, overrides)
    return build_sweep(doc, environ=environ)
