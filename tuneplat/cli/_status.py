"""``tuneplat status``: an experiment's (or a storage folder's) trials, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._common import EXIT_OK, _Fail, _fmt, _is_running, _jsonable, _load_grid, _out, _table


def _elastic(meta: dict[str, Any]) -> bool:
    """The experiment ran elastic groups (``ScalingConfig(num_workers=(min, max))``)."""
    return isinstance(meta.get("scaling"), dict) and "min_workers" in meta["scaling"]


def _trial_json(r: Any) -> dict[str, Any]:
    return {
        "trial_id": r.trial_id,
        "status": r.status,
        "iteration": r.metrics.get("training_iteration", 0),
        "config": _jsonable(r.config),
        "last_result": _jsonable(r.metrics),
        "checkpoint": r.checkpoint.path if r.checkpoint is not None else None,
        "error": str(r.error).splitlines()[0] if r.error else None,
        "stop_reason": r.stop_reason,
        "mlflow_run_id": r.mlflow_run_id,
        "path": r.path,
        "lineage": _jsonable(r.lineage),
    }


def _status_options(st: argparse.ArgumentParser) -> None:
    st.add_argument("--trial", metavar="ID", help="show one trial in full: config, last result, error with its "
                    "traceback, stop reason, checkpoint, MLflow run")
    st.add_argument("--workers", action="store_true",
                    help="one row per rank: host, pid, device, state, seconds since its last report, steps/s, "
                    "samples/s, data wait, CPU %%, memory, GPU (live while the experiment runs)")
    st.add_argument("--csv", nargs="?", const="-", metavar="FILE",
                    help="write the trials table (config and last result flattened) as CSV to FILE (- or no "
                    "FILE: standard output)")


def _experiments_in(storage_path: str) -> list[str]:
    """Experiment folders directly under a local storage path (those holding a journal)."""
    try:
        names = sorted(os.listdir(storage_path))
    except OSError:
        return []
    return [os.path.join(storage_path, n) for n in names
            if os.path.isfile(os.path.join(storage_path, n, "journal.jsonl"))]


def _status_storage(storage_path: str, experiments: list[str], as_json: bool) -> int:
    """``tuneplat status <storage_path>``: one line per experiment."""
    import datetime

    rows: list[dict[str, Any]] = []
    for exp in experiments:
        try:
            grid, meta = _load_grid(exp)
        except _Fail as exc:
            rows.append({"name": os.path.basename(exp), "path": exp, "status": f"unreadable: {exc}", "trials": 0,
                         "counts": {}, "metric": None, "best": None, "last_change": None})
            continue
        metric, mode = meta.get("metric"), meta.get("mode")
        best = None
        if isinstance(metric, str) and mode in ("min", "max"):
            try:
                b = grid.get_best_result(metric, mode)
                best = {"trial_id": b.trial_id, "value": _jsonable(b.metrics.get(metric))}
            except ValueError:
                pass
        mtime = max(os.path.getmtime(os.path.join(exp, f)) for f in os.listdir(exp)
                    if os.path.isfile(os.path.join(exp, f)))
        counts: dict[str, int] = {}
        for r in grid:
            counts[r.status] = counts.get(r.status, 0) + 1
        rows.append({"name": os.path.basename(exp), "path": exp, "status": meta["status"],
                     "trials": len(grid), "counts": dict(sorted(counts.items())), "metric": metric, "best": best,
                     "last_change": datetime.datetime.fromtimestamp(mtime).isoformat(timespec="seconds")})
    rows.sort(key=lambda r: r["last_change"] or "", reverse=True)
    if as_json:
        _out(json.dumps({"storage_path": storage_path, "experiments": rows}, indent=2))
        return EXIT_OK
    _out(f"== {len(rows)} experiment(s) in {storage_path} (newest first) ==")
    table = []
    for r in rows:
        counts_text = ", ".join(f"{n} {s}" for s, n in r["counts"].items())
        best_text = f"{r['metric']}={_fmt(r['best']['value'])} ({r['best']['trial_id']})" if r["best"] else "-"
        table.append([r["name"], r["status"], f"{r['trials']}" + (f" ({counts_text})" if counts_text else ""), best_text,
                      (r["last_change"] or "-").replace("T", " ")])
    _out(_table(["experiment", "status", "trials", "best", "last change"], table))
    _out(f"details: tuneplat status {rows[0]['path'] if rows else os.path.join(storage_path, 'NAME')}")
    return EXIT_OK


def _status_csv(grid: Any, target: str) -> int:
    """The trials table as CSV: id, status, iteration, note, then config/... and the last result's values."""
    import csv

    from ..search import flatten_dict

    rows = []
    for r in grid:
        row: dict[str, Any] = {"trial_id": r.trial_id, "status": r.status,
                               "iteration": r.metrics.get("training_iteration", 0),
                               "error": str(r.error).splitlines()[0] if r.error else "",
                               "stop_reason": r.stop_reason or "", "mlflow_run_id": r.mlflow_run_id or "",
                               "checkpoint": r.checkpoint.path if r.checkpoint is not None else "", "path": r.path}
        row.update({f"config/{k}": v for k, v in flatten_dict(r.config).items()})
        row.update({k: v for k, v in flatten_dict(r.metrics).items() if k not in row and not isinstance(v, list)})
        rows.append(row)
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    f = sys.stdout if target == "-" else open(target, "w", newline="", encoding="utf-8")  # noqa: SIM115
    try:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    finally:
        if f is not sys.stdout:
            f.close()
    if target != "-":
        print(f"tuneplat: wrote {len(rows)} trials to {target}", file=sys.stderr)
    return EXIT_OK


def _status_trial(grid: Any, meta: dict[str, Any], trial_id: str, as_json: bool) -> int:
    """One trial in full: nothing cut (the error with its traceback, the stop reason, every metric)."""
    found = [r for r in grid if r.trial_id == trial_id or os.path.basename(r.path) == trial_id]
    if not found:
        ids = ", ".join(r.trial_id for r in list(grid)[:8])
        raise _Fail(f"--trial {trial_id}: no such trial in {meta['path']} (trials: {ids}"
                    f"{', …' if len(grid) > 8 else ''})")
    r = found[0]
    resizes = (meta.get("resizes") or {}).get(r.trial_id, [])
    changes = (meta.get("resource_changes") or {}).get(r.trial_id, [])
    if as_json:
        info = _trial_json(r)
        info["error"] = str(r.error) if r.error else None
        info["history"] = _jsonable(r._history)
        if _elastic(meta):
            info["world_size"] = (meta.get("world_size") or {}).get(r.trial_id)
            info["resizes"] = resizes
        if changes:  # (ResourceChangingScheduler)
            info["resource_changes"] = [{"iteration": it, "resources": req, **({"num_workers": n} if n else {})}
                                        for it, req, n in changes]
        _out(json.dumps(info, indent=2))
        return EXIT_OK
    _out(f"trial        {r.trial_id} ({r.status}) of {meta.get('name') or meta['path']}")
    _out(f"iterations   {r.metrics.get('training_iteration', 0)} ({len(r._history)} results)")
    _out(f"config       {json.dumps(_jsonable(r.config), sort_keys=True)}")
    shown = {k: v for k, v in r.metrics.items() if not isinstance(v, (dict, list))}
    _out(f"last result  {json.dumps(_jsonable(shown), sort_keys=True)}")
    if r.stop_reason:
        _out(f"stop reason  {r.stop_reason}")
    _out(f"checkpoint   {r.checkpoint.path if r.checkpoint is not None else '-'}")
    _out(f"mlflow run   {r.mlflow_run_id or '-'}")
    _out(f"trial folder {r.path}")
    for step in r.lineage:
        _out(f"lineage      {json.dumps(_jsonable(step), sort_keys=True)}")
    if _elastic(meta):
        _out(f"ranks        {(meta.get('world_size') or {}).get(r.trial_id) or '-'} "
             f"(elastic, {meta['scaling']['min_workers']}..{meta['scaling'].get('num_workers')})")
    for ev in resizes:
        _out(f"resize       at iteration {ev.get('iteration')}: {ev.get('message')}")
    for it, req, n in changes:
        ranks = f"{n} rank{'s' if n != 1 else ''} of " if n else ""  # (a trial of one bundle per rank)
        _out(f"resources    from iteration {it}: {ranks}{json.dumps(req, sort_keys=True)} (ResourceChangingScheduler)")
    if r.error:
        _out("error:")
        _out(str(r.error))
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from collections import Counter

    from ..search import flatten_dict

    target = args.experiment_dir
    from ..storage._storage import is_remote

    if not is_remote(target) and not os.path.exists(target):
        raise _Fail(f"{target}: no such folder; pass an experiment folder (<storage_path>/<name>) or a storage folder "
                    "holding experiments (e.g. tuneplat status ./tuneplat_results lists them)")
    if os.path.isdir(target) and not os.path.isfile(os.path.join(target, "journal.jsonl")):
        experiments = _experiments_in(target)
        if experiments:
            if args.trial or args.csv:
                raise _Fail(f"{target} is a storage path holding {len(experiments)} experiment(s); --trial and --csv "
                            f"need one of them, e.g. tuneplat status {experiments[0]} --csv")
            return _status_storage(target, experiments, args.json)
    if getattr(args, "workers", False):
        return _status_workers(target, args.trial, args.json)
    grid, meta = _load_grid(target)
    if args.trial:
        return _status_trial(grid, meta, args.trial, args.json)
    if args.csv:
        return _status_csv(grid, args.csv)
    counts = dict(sorted(Counter(r.status for r in grid).items()))
    if args.json:
        _out(
            json.dumps(
                {
                    "experiment": meta["path"],
                    "name": meta.get("name"),
                    "metric": meta.get("metric"),
                    "mode": meta.get("mode"),
                    "status": meta["status"],
                    "num_trials": len(grid),
                    "counts": counts,
                    "trials": [_trial_json(r) for r in grid],
                },
                indent=2,
            )
        )
        return EXIT_OK
    metrics = meta.get("metric")
    metrics = metrics if isinstance(metrics, list) else ([metrics] if metrics else [])
    keys: list[str] = []
    for r in grid:
        for k in flatten_dict(r.config):
            if k not in keys:
                keys.append(k)
    elastic = _elastic(meta)
    cols = ["trial", "status", "iter", *(["ranks"] if elastic else []), *metrics, *keys, "note"]
    rows = []
    for r in grid:
        flat = flatten_dict(r.config)
        note = (str(r.error).splitlines()[0] if r.error else r.stop_reason) or ""  # whole: it is the last column
        resized = (meta.get("resizes") or {}).get(r.trial_id)
        if resized and not r.error:  # an elastic group's last resize (tuneplat status --trial ID lists them all)
            note = "; ".join(x for x in (note, f"{resized[-1].get('message')} (at iteration "
                                               f"{resized[-1].get('iteration')})") if x)
        rows.append(
            [
                r.trial_id,
                r.status,
                str(r.metrics.get("training_iteration", 0)),
                *([str((meta.get("world_size") or {}).get(r.trial_id) or "-")] if elastic else []),
                *[_fmt(r.metrics.get(m, "")) for m in metrics],
                *[_fmt(flat.get(k, "")) for k in keys],
                note,
            ]
        )
    head = " | ".join(f"{n} {s}" for s, n in counts.items())
    _out(f"== {meta.get('name') or os.path.basename(meta['path'])}: {len(grid)} trials | {head} | {meta['status']} ==")
    _out(_table(cols, rows))
    return EXIT_OK


def _status_workers(target: str, trial: str | None, as_json: bool) -> int:
    """``tuneplat status EXP --workers``: the per-rank table the tuner keeps in ``workers.json``."""
    import time

    from ..execution._observe import WORKER_COLUMNS, read_workers, worker_rows

    if not os.path.isfile(os.path.join(target, "journal.jsonl")):
        raise _Fail(f"{target} is not an experiment folder (no journal.jsonl)")
    doc = read_workers(target) or {"running": {}, "finished": {}}
    if trial:
        doc = {k: ({t: v for t, v in doc.get(k, {}).items() if t == trial} if isinstance(doc.get(k), dict) else v)
               for k, v in doc.items()}
    if as_json:
        _out(json.dumps({"experiment": target, "running_now": _is_running(target), **doc}, indent=2, default=str))
        return EXIT_OK
    rows = worker_rows(doc, time.time())
    if not rows:
        _out(f"no ranks recorded in {target} (workers.json is written while trials run)")
        return EXIT_OK
    _out(_table(WORKER_COLUMNS, rows))
    return EXIT_OK
