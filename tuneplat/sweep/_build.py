"""Building the Python API's objects from a checked sweep document (:class:`_Builder`)."""

from __future__ import annotations

import difflib
import inspect
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._config import CheckpointConfig, FailureConfig, MLflowConfig, RunConfig, ScalingConfig, TuneConfig
from ..search import _domains as D
from ._imports import import_object
from ._schema import (
    _CHECKPOINT_FIELDS,
    _FAILURE_FIELDS,
    _MLFLOW_FIELDS,
    _OPTUNA_ALGOS,
    _OPTUNA_SAMPLERS,
    _POINTS,
    _PRUNERS,
    _RUN_FIELDS,
    _SCALING_FIELDS,
    _TLS_FIELDS,
    _TOP_ALIASES,
    DOMAINS,
    INT_GE1,
    MODE,
    NUM_GT0,
    OPT_INT,
    REF,
    SCHEDULERS,
    SEARCH_ALGORITHMS,
    STR,
    Field,
    Path,
    _describe,
    _f,
    _is_int,
    _is_num,
)
from ._sweepfile import Doc, SweepFileError

__all__ = ["_Builder"]

logger = logging.getLogger("tuneplat")


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
            from ..search import Searcher

            if not isinstance(searcher, Searcher):
                raise self.err(
                    path + ("algorithm",),
                    f"{algo} did not build a tuneplat.search.Searcher "
                    f"(got {type(searcher).__name__}); expected a Searcher subclass",
                )
        elif algo in ("random", "grid", "basic"):
            fields = {"algorithm": None, "seed": OPT_INT, "points_to_evaluate": _POINTS, "max_concurrent": INT_GE1}
            self.section(path, value, fields, "search settings")
            from ..search import BasicVariantGenerator

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
            from ..search.optuna import OptunaSearch

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
            from ..search import ConcurrencyLimiter

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
            from ..search.optuna import OptunaPrunerScheduler

            return self.construct(OptunaPrunerScheduler, kwargs, path)
        from .. import schedulers

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

        from ..storage._storage import is_remote

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
