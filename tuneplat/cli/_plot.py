"""``tuneplat plot``: the experiment's plots as PNG files."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._common import EXIT_OK, _Fail, _fetch_remote, _out


def _add_plot_parser(sub: Any) -> None:
    from ..plot import KINDS

    p = sub.add_parser(
        "plot",
        help="draw an experiment's plots as PNG files",
        description="Draw the plots of an experiment folder (read from its journal) as PNG files and print their "
        "paths: learning curves with the scheduler's stop/pause/clone points, optimization history, parameter "
        "importances, parallel coordinates, intermediate values, PBT lineage, the decisions timeline and the "
        "Pareto front. Without --kind, every plot that applies to the experiment is drawn.",
        epilog="examples:\n  tuneplat plot ./tuneplat_results/digits-asha\n"
        "  tuneplat plot ./tuneplat_results/digits-asha --kind curves --kind importance --out /tmp/plots\n"
        "  tuneplat plot ./exp --metric val_accuracy --mode max\n"
        "kinds: " + ", ".join(KINDS) + " (or curves, history, importance, parallel, intermediate, lineage, "
        "timeline, pareto)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("experiment_dir", help="the experiment folder, <storage_path>/<name> (local or a remote URL)")
    p.add_argument("--kind", dest="kinds", action="append", metavar="KIND",
                   help="a plot to draw (repeatable, or comma-separated; default: every plot that applies)")
    p.add_argument("--metric", help="metric to draw (default: the experiment's)")
    p.add_argument("--mode", choices=("min", "max"), help="min or max (default: the experiment's)")
    p.add_argument("--out", metavar="DIR", help="folder for the PNG files (default: <experiment>/plots)")
    p.add_argument("--dpi", type=int, default=110, help="resolution of the PNG files (default 110)")
    p.add_argument("--json", action="store_true", help="machine-readable output (files and skipped kinds)")


def _cmd_plot(args: argparse.Namespace) -> int:
    from ..plot import PlotError, load_experiment, save_plots

    path, _fs, url = _fetch_remote(args.experiment_dir)
    try:
        exp = load_experiment(path)
        exp.path = url or args.experiment_dir
        kinds = [k for item in args.kinds for k in item.split(",") if k.strip()] if args.kinds else None
        out = args.out or os.path.join(path, "plots")
        saved = save_plots(exp, out, kinds, metric=args.metric, mode=args.mode, dpi=args.dpi)
    except PlotError as exc:
        raise _Fail(str(exc).splitlines()[0]) from None
    except OSError as exc:
        raise _Fail(f"--out {args.out or '(default)'}: cannot write the plots: {exc}") from None
    if args.json:
        print(json.dumps({"files": saved.files, "skipped": saved.skipped}, indent=2))
        return EXIT_OK
    for path_ in saved.files.values():
        _out(path_)
    for kind, why in saved.skipped.items():
        print(f"tuneplat: {kind} not drawn: {why}", file=sys.stderr)
    return EXIT_OK
