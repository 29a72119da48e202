"""The ``tuneplat`` console script: the parser and :func:`main`, which hands each command to its module."""

from __future__ import annotations

import argparse
import os
import sys

from ..testing._simulate import SCHEDULER_NAMES
from ._best import _cmd_best
from ._common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, _Fail, _setup_logging, cluster_options
from ._plot import _add_plot_parser, _cmd_plot
from ._resume import _cmd_resume
from ._run import _EPILOG_RUN, _cmd_run
from ._simulate import _cmd_simulate
from ._stacks import _cmd_stacks
from ._status import _cmd_status, _status_options

_EPILOG_MAIN = """\
examples:
  tuneplat run sweep.yaml                                   # embedded Dask cluster on this machine
  tuneplat run sweep.yaml --set num_samples=64 --set scheduler.max_t=50
  tuneplat run sweep.yaml --address tcp://10.0.0.5:8786     # an existing Dask cluster
  tuneplat run sweep.yaml --dry-run                         # validate, print the first configs
  tuneplat resume ./tuneplat_results/digits-asha
  tuneplat status ./tuneplat_results/digits-asha --json
  tuneplat best ./tuneplat_results/digits-asha
  tuneplat plot ./tuneplat_results/digits-asha               # PNG plots into <experiment>/plots

Sweep files (YAML or TOML, or a Weights & Biases sweep file) are described in
docs/sweep-files.md.
"""


def _parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="tuneplat",
        description="Hyperparameter sweeps on Dask, described by sweep files.",
        epilog=_EPILOG_MAIN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tuneplat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common_output(p: argparse.ArgumentParser) -> None:
        g = p.add_mutually_exclusive_group()
        g.add_argument("-v", "--verbose", action="store_true", help="also print trial events and debug logs")
        g.add_argument("-q", "--quiet", action="store_true", help="no progress table, only the final summary")

    run = sub.add_parser(
        "run",
        help="run a sweep file",
        description="Run the sweep described by a sweep file.",
        epilog=_EPILOG_RUN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("sweep_file", help="a .yaml/.yml/.toml sweep file (or a W&B sweep file)")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a setting, e.g. --set scheduler.max_t=50 (repeatable)",
    )
    run.add_argument(
        "--address", help="Dask scheduler to run on, e.g. tcp://10.0.0.5:8786 (default: an embedded LocalCluster)"
    )
    cluster_options(run)
    run.add_argument("--storage-path", help="folder holding experiments (run.storage_path)")
    run.add_argument("--name", help="experiment name (the folder under the storage path)")
    run.add_argument("--dry-run", action="store_true", help="validate and print the first configs; run nothing")
    run.add_argument("--show", type=int, default=5, metavar="N", help="configs printed by --dry-run (default 5)")
    common_output(run)

    res = sub.add_parser(
        "resume",
        help="continue an interrupted or crashed experiment",
        description="Continue an experiment from its folder (Tuner.restore). The sweep file that "
        "started it was saved there as sweep.yaml, so the folder is all it needs.",
        epilog="examples:\n  tuneplat resume ./tuneplat_results/digits-asha\n"
        "  tuneplat resume ./tuneplat_results/exp --resume-errored\n"
        "  tuneplat resume ./exp --trainable mypkg.train:loop   # experiments started from Python",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    res.add_argument("experiment_dir")
    res.add_argument("--trainable", metavar="MODULE:FUNCTION", help="the function to run (default: from sweep.yaml)")
    res.add_argument("--address", help="Dask scheduler to run on (default: as when started, else embedded)")
    cluster_options(res)
    res.add_argument("--resume-errored", action="store_true", help="retry ERROR trials from their latest checkpoint")
    res.add_argument("--restart-errored", action="store_true", help="rerun ERROR trials from scratch")
    common_output(res)

    st = sub.add_parser(
        "status",
        help="trials table of an experiment",
        description="Print the trials of an experiment folder (read from its journal), one trial in full, "
        "or the experiments of a storage path.",
        epilog="examples:\n  tuneplat status ./tuneplat_results                      # the experiments there\n"
        "  tuneplat status ./tuneplat_results/digits-asha\n"
        "  tuneplat status ./tuneplat_results/digits-asha --trial 5ae03_00003   # error, stop reason, metrics\n"
        "  tuneplat status ./tuneplat_results/digits-asha --csv trials.csv      # the table for a spreadsheet\n"
        "  tuneplat status ./tuneplat_results/digits-asha --json | jq '.trials[0]'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    st.add_argument("experiment_dir", help="an experiment folder, or a storage path (lists its experiments)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    _status_options(st)

    sk = sub.add_parser(
        "stacks",
        help="Python stacks of a running experiment's ranks",
        description="Ask the tuner running an experiment for the Python stacks of every rank of its running "
        "trials (or of one trial), print them, and keep them in the trial folder (stacks/), the journal and the "
        "trial's MLflow run.",
        epilog="examples:\n  tuneplat stacks ./tuneplat_results/digits-asha\n"
        "  tuneplat stacks ./tuneplat_results/digits-asha --trial 5ae03_00003",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sk.add_argument("experiment_dir", help="the folder of a running experiment")
    sk.add_argument("--trial", metavar="ID", help="only this trial")
    sk.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the tuner's answer (30)")
    sk.add_argument("--json", action="store_true", help="machine-readable output")

    best = sub.add_parser(
        "best",
        help="best trial of an experiment",
        description="Print the best trial: config, metrics, checkpoint path, MLflow run id. "
        "For a multi-objective experiment without --metric, the Pareto front.",
        epilog="examples:\n  tuneplat best ./tuneplat_results/digits-asha\n"
        "  tuneplat best ./exp --metric val_accuracy --mode max --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    best.add_argument("experiment_dir")
    best.add_argument("--metric", help="metric to rank by (default: the experiment's)")
    best.add_argument("--mode", choices=("min", "max"), help="min or max (default: the experiment's)")
    best.add_argument("--scope", default="last", help="last (default), all, avg or last-N-avg")
    best.add_argument("--json", action="store_true", help="machine-readable output")

    sim = sub.add_parser(
        "simulate",
        help="replay an experiment's learning curves under another scheduler",
        description="Replay the learning curves recorded in an experiment under another scheduler (or other "
        "settings) in virtual time, and print what it would have spent (iterations, trial-time) and found "
        "(best metric), beside what the recorded run spent and found.",
        epilog="examples:\n  tuneplat simulate ./tuneplat_results/digits-asha --scheduler asha --set reduction_factor=4\n"
        "  tuneplat simulate ./exp --scheduler median --set grace_period=3 --json\n"
        "  tuneplat simulate ./exp --recommend --tolerance 0.5%%\n"
        "schedulers: " + ", ".join(SCHEDULER_NAMES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("experiment_dir")
    sim.add_argument("--scheduler", default="asha", help="fifo, asha, hyperband, median, pbt (default asha)")
    sim.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                     help="a scheduler setting, e.g. --set grace_period=2 (repeatable; values read as YAML)")
    sim.add_argument("--slots", type=int, help="trials at once (default: as many as the recorded run had)")
    sim.add_argument("--recommend", action="store_true",
                     help="replay a grid of schedulers (ASHA eta/grace, HyperBand, PASHA, median stopping, 'one "
                     "iteration each, keep the top k') and rank them by the compute spent until a result within "
                     "--tolerance of the best recorded one; prints the winner as code and as a sweep-file line")
    sim.add_argument("--tolerance", default="1%",
                     help="with --recommend: how close to the best recorded value counts as found: absolute "
                     "(0.005) or relative ('1%%', the default)")
    sim.add_argument("--json", action="store_true", help="machine-readable output")
    _add_plot_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tuneplat`` console script; returns the exit status.

    Example:
        >>> main(["run", "examples/toy_asha.yaml", "--dry-run"])  # doctest: +SKIP
        0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    _setup_logging(getattr(args, "verbose", False))
    handler = {"run": _cmd_run, "resume": _cmd_resume, "status": _cmd_status, "best": _cmd_best,
               "simulate": _cmd_simulate, "plot": _cmd_plot, "stacks": _cmd_stacks}[args.command]
    try:
        return handler(args)
    except _Fail as exc:
        print(f"tuneplat: error: {exc}", file=sys.stderr, flush=True)
        return exc.status
    except KeyboardInterrupt:
        print("tuneplat: error: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `tuneplat status ... | head`: the reader left, nothing to say
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - no flush error at exit
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # a bug, not bad input: one line, the traceback with -v
        if getattr(args, "verbose", False):
            import traceback

            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(
            f"tuneplat: error: internal error: {type(exc).__name__}: {first} (run with -v for the traceback)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FAILED
