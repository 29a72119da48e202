"""``tuneplat run``: run a sweep file (or check it with ``--dry-run``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

from ._common import (
    EXIT_OK,
    _cli_overrides,
    _Fail,
    _fit,
    _jsonable,
    _load,
    _out,
    _prepare_imports,
    _quiet_libraries,
    _save_sweep,
    _summary,
)

logger = logging.getLogger("tuneplat")


_EPILOG_RUN = """\
examples:
  tuneplat run examples/toy_asha.yaml
  tuneplat run examples/toy_asha.yaml --set num_samples=4 --set scheduler.max_t=3 --name quick
  tuneplat run sweep.toml --set 'param_space.lr={loguniform: [1e-5, 1e-2]}'
  tuneplat run sweep.yaml --dry-run --show 10

--set values are read as YAML values (42, 0.1, true, null, [1, 2], {a: 1}, text);
the same validation applies as for the file. ${env:VAR} in the file or in a
--set value is replaced by the environment variable VAR; nothing is evaluated.
"""


def _cmd_run(args: argparse.Namespace) -> int:
    sweep_dir = os.path.dirname(os.path.abspath(args.sweep_file))
    _prepare_imports([sweep_dir])
    sweep = _load(args.sweep_file, _cli_overrides(args))
    _quiet_libraries(args.verbose)
    for note in sweep.notes:
        logger.warning("tuneplat: %s: %s", args.sweep_file, note)
    if args.dry_run:
        return _dry_run(sweep, args.show)
    try:
        tuner = sweep.tuner()
    except (ValueError, TypeError) as exc:
        raise _Fail(f"{args.sweep_file}: {str(exc).splitlines()[0]}") from None
    # saved once fit() made the folder this run's (a previous run there moves aside, with its own sweep file)
    tuner._before_run = lambda: _save_sweep(sweep, tuner.experiment_dir, tuner._remote_dir)
    results = _fit(tuner)
    return _summary(results, tuner.experiment_dir, tuner.tune_config.metric, tuner.tune_config.mode,
                    tuner.run_config.verbose)


def _describe_obj(obj: Any) -> str:
    if obj is None:
        return "-"
    inner = getattr(obj, "searcher", None)
    if inner is not None and type(obj).__name__ == "ConcurrencyLimiter":
        return f"ConcurrencyLimiter({_describe_obj(inner)}, max_concurrent={obj.max_concurrent})"
    describe = getattr(obj, "describe", None)
    if callable(describe):
        try:
            info = describe()
            if isinstance(info, dict):
                args = ", ".join(
                    f"{k}={v!r}" for k, v in info.items() if k not in ("name", "type", "scheduler") and v is not None
                )
                return f"{type(obj).__name__}({args})"
        except Exception:  # noqa: BLE001 - cosmetic
            pass
    sampler = getattr(obj, "_sampler_arg", None)
    return f"{type(obj).__name__}(sampler={sampler!r})" if sampler is not None else type(obj).__name__


def _dry_run(sweep: Any, show: int) -> int:
    from .._tuner import Tuner, _local_path
    from ..search import BasicVariantGenerator
    from ..storage._storage import is_remote

    tc, rc = sweep.tune_config, sweep.run_config
    Tuner(
        sweep.trainable,
        param_space=sweep.param_space,
        tune_config=tc,
        run_config=rc,
        scaling_config=sweep.scaling_config,
    )  # the Tuner's own checks (space, picklable trainable)
    name = rc.name or "<trainable>_<timestamp>"
    rows = [
        ("sweep file", sweep.source + (" (W&B sweep, translated)" if sweep.translated_from else "")),
        ("trainable", sweep.trainable_ref),
        ("metric", f"{tc.metric} ({tc.mode})" if tc.metric else "-"),
        ("num_samples", str(tc.num_samples)),
        ("search", _describe_obj(tc.search_alg or BasicVariantGenerator())),
        ("scheduler", _describe_obj(tc.scheduler) if tc.scheduler else "FIFOScheduler"),
        ("scaling", f"{(sweep.scaling_config.num_workers if sweep.scaling_config else 1)} rank(s) per trial"),
        ("stop", json.dumps(_jsonable(rc.stop)) if rc.stop is not None else "-"),
        ("experiment", (rc.storage_path.rstrip("/") + "/" + name) if is_remote(rc.storage_path)
         else os.path.join(_local_path(rc.storage_path), name)),
        ("cluster", rc.address or "embedded LocalCluster"),
    ]
    _out("tuneplat: dry run — the sweep file is valid; nothing was started")
    for k, v in rows:
        _out(f"  {k:<12} {v}")
    searcher = tc.search_alg or BasicVariantGenerator()
    searcher = getattr(searcher, "searcher", searcher) if type(searcher).__name__ == "ConcurrencyLimiter" else searcher
    searcher.set_search_properties(
        tc.metric,
        tc.mode,
        sweep.param_space,
        num_samples=tc.num_samples,
        seed=tc.seed,
        experiment_dir=None,
        resume=False,
    )
    configs = []
    for i in range(max(0, show)):
        config = searcher.suggest(f"dryrun_{i:05d}")
        if not isinstance(config, dict):
            break
        configs.append(config)
    searcher.close()
    _out(f"first {len(configs)} config(s):")
    for i, config in enumerate(configs):
        _out(f"  {i + 1:>3}  {json.dumps(_jsonable(config), sort_keys=True)}")
    return EXIT_OK
