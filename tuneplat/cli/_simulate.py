"""``tuneplat simulate``: replay an experiment's curves under another scheduler, in virtual time."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from ..testing._simulate import simulate
from ._common import EXIT_BAD_INPUT, EXIT_OK, _Fail


def _cmd_simulate(args: argparse.Namespace) -> int:
    settings: dict[str, Any] = {}
    for item in args.settings:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise _Fail(f"--set {item!r}: expected NAME=VALUE, e.g. --set reduction_factor=4", EXIT_BAD_INPUT)
        try:
            settings[name.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise _Fail(f"--set {item!r}: the value is not valid YAML ({exc})", EXIT_BAD_INPUT) from None
    if args.recommend:
        from ..testing._recommend import recommend

        if settings:
            raise _Fail("--recommend tries its own grid of schedulers and settings: drop --set (and --scheduler)",
                        EXIT_BAD_INPUT)
        try:
            rec = recommend(args.experiment_dir, tolerance=args.tolerance, slots=args.slots)
        except (FileNotFoundError, ValueError) as exc:
            raise _Fail(str(exc), EXIT_BAD_INPUT) from None
        print(json.dumps(rec.to_dict(), indent=2, default=str) if args.json else rec.table())
        return EXIT_OK
    try:
        report = simulate(args.experiment_dir, args.scheduler, settings, slots=args.slots)
    except (FileNotFoundError, ValueError) as exc:
        raise _Fail(str(exc), EXIT_BAD_INPUT) from None
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.table())
    return EXIT_OK
