"""``tuneplat best``: the best trial (or the Pareto front) of an experiment."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ._common import EXIT_OK, _Fail, _fmt, _jsonable, _load_grid, _out, _table
from ._status import _trial_json


def _cmd_best(args: argparse.Namespace) -> int:
    grid, meta = _load_grid(args.experiment_dir)
    metric, mode = args.metric or meta.get("metric"), args.mode or meta.get("mode")
    if args.metric and not args.mode and meta.get("metric") != args.metric:
        raise _Fail(
            f"--metric {args.metric} needs --mode min or --mode max (the experiment optimised {meta.get('metric')!r})"
        )
    if isinstance(metric, list):
        return _pareto(grid, metric, list(mode or []), args.json)
    try:
        best = grid.get_best_result(metric, mode, scope=args.scope)
    except ValueError as exc:
        raise _Fail(str(exc).splitlines()[0]) from None
    value = _scope_value(best, metric, mode, args.scope)
    info = {
        "experiment": meta["path"],
        "metric": metric,
        "mode": mode,
        "scope": args.scope,
        "value": _jsonable(value),
        **_trial_json(best),
    }
    if args.json:
        _out(json.dumps(info, indent=2))
        return EXIT_OK
    _out(f"best trial   {best.trial_id} ({best.status}) by {metric} ({mode}, scope {args.scope})")
    last = best.metrics.get(metric)
    detail = "" if args.scope == "last" or value == last else f"   (scope {args.scope}; its last value: {_fmt(last)})"
    _out(f"{metric:<12} {_fmt(value)}{detail}")
    _out(f"config       {json.dumps(_jsonable(best.config), sort_keys=True)}")
    shown = {k: v for k, v in best.metrics.items() if not isinstance(v, (dict, list))}
    _out(f"metrics      {json.dumps(_jsonable(shown), sort_keys=True)}")
    _out(f"checkpoint   {best.checkpoint.path if best.checkpoint is not None else '-'}")
    _out(f"mlflow run   {best.mlflow_run_id or '-'}")
    _out(f"trial folder {best.path}")
    return EXIT_OK


def _scope_value(result: Any, metric: Any, mode: Any, scope: str) -> Any:
    """The value that ranked ``result`` under ``scope``: its best ever for "all", its average for "avg"."""
    from ..results._result import _score

    if scope == "last":
        return result.metrics.get(metric)
    score = _score(result, metric, mode, scope)
    return score if mode == "min" or not math.isfinite(score) else -score


def _pareto(grid: Any, metrics: list[str], modes: list[str], as_json: bool) -> int:
    from ..search import pareto_front

    rows = [[r.metrics.get(m) for m in metrics] if r.error is None else None for r in grid]
    front = [grid[i] for i in pareto_front(rows, modes)]
    if not front:
        raise _Fail(f"no trial reported finite values for {metrics}")
    if as_json:
        _out(json.dumps({"metric": metrics, "mode": modes, "pareto_front": [_trial_json(r) for r in front]}, indent=2))
        return EXIT_OK
    _out(f"Pareto front of {', '.join(f'{m} ({o})' for m, o in zip(metrics, modes))}: {len(front)} trial(s)")
    cols = ["trial", *metrics, "config", "checkpoint"]
    _out(
        _table(
            cols,
            [
                [
                    r.trial_id,
                    *[_fmt(r.metrics.get(m)) for m in metrics],
                    json.dumps(_jsonable(r.config), sort_keys=True),
                    r.checkpoint.path if r.checkpoint is not None else "-",
                ]
                for r in front
            ],
        )
    )
    return EXIT_OK
