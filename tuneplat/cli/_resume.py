"""``tuneplat resume``: continue an interrupted experiment."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ._common import (
    ORIGIN_FILE,
    SWEEP_COPY,
    _Fail,
    _fetch_remote,
    _fit,
    _load,
    _prepare_imports,
    _quiet_libraries,
    _run_overrides,
    _summary,
    journal_readable,
    not_an_experiment,
)


def _cmd_resume(args: argparse.Namespace) -> int:
    from .._tuner import Tuner
    from ..storage._storage import is_remote

    path, _fs, _url = _fetch_remote(args.experiment_dir)
    # a tuner.pkl that is damaged or not signed with this user's key is not needed when the sweep file gives the
    # settings again (Tuner.restore then does not read it); otherwise the message says what is wrong with it
    if not journal_readable(path) or (not Tuner.can_restore(path)
                                      and not os.path.exists(os.path.join(path, SWEEP_COPY))):
        raise _Fail(not_an_experiment(args.experiment_dir, path))
    origin = {}
    if os.path.exists(os.path.join(path, ORIGIN_FILE)):
        with open(os.path.join(path, ORIGIN_FILE), encoding="utf-8") as f:
            try:
                origin = json.load(f)
            except ValueError as exc:
                raise _Fail(f"{os.path.join(path, ORIGIN_FILE)} is damaged (not JSON: {exc}); it only records where "
                            "the sweep was started: remove it and resume again") from None
        if not isinstance(origin, dict):
            origin = {}
    _prepare_imports([d for d in (origin.get("cwd"), origin.get("sweep_dir")) if d and os.path.isdir(d)])
    saved = os.path.join(path, SWEEP_COPY)
    overrides = _run_overrides(args)
    kwargs: dict[str, Any] = {}
    if os.path.exists(saved):
        if args.trainable:
            overrides.append(f"trainable={json.dumps(args.trainable)}")
        sweep = _load(saved, overrides)
        _quiet_libraries(args.verbose)
        trainable = sweep.trainable
        kwargs = {
            "param_space": sweep.param_space,
            "tune_config": sweep.tune_config,
            "run_config": sweep.run_config,
            "scaling_config": sweep.scaling_config,
        }
    elif args.trainable:
        from ..config import import_object

        try:
            trainable = import_object(args.trainable)
        except ImportError as exc:
            raise _Fail(f"--trainable: {exc}") from None
    else:
        raise _Fail(
            f"{args.experiment_dir} has no {SWEEP_COPY} (it was not started by `tuneplat run`); "
            "pass --trainable module:function"
        )
    try:
        tuner = Tuner.restore(
            args.experiment_dir if is_remote(args.experiment_dir) else path, trainable, resume_errored=args.resume_errored, restart_errored=args.restart_errored, **kwargs
        )
    except (ValueError, TypeError, OSError) as exc:
        raise _Fail(f"cannot restore {args.experiment_dir}: {str(exc).splitlines()[0]}") from None
    if not kwargs and (args.verbose or args.quiet):
        tuner.run_config.verbose = 2 if args.verbose else 0
    results = _fit(tuner)
    return _summary(results, path, tuner.tune_config.metric, tuner.tune_config.mode, tuner.run_config.verbose)
