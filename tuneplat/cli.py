"""The ``tuneplat`` command line: run, resume and inspect sweeps described by sweep files.

Exit status: 0 success; 1 the experiment failed (every trial errored, or a
fail-fast error); 2 bad input (sweep file, options, experiment folder);
130 interrupted (resume it with ``tuneplat resume``). Errors are one line on
stderr, prefixed ``tuneplat: error:``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from typing import Any

import yaml

from .testing._simulate import SCHEDULER_NAMES, simulate

__all__ = ["main"]

logger = logging.getLogger("tuneplat")

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
SWEEP_COPY = "sweep.yaml"
ORIGIN_FILE = "sweep_origin.json"

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


class _Fail(Exception):
    """A one-line reason to stop with an exit status."""

    def __init__(self, message: str, status: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------- parser


def _parser() -> argparse.ArgumentParser:
    from . import __version__

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


def _add_plot_parser(sub: Any) -> None:
    from .plot import KINDS

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


# --------------------------------------------------------------------------- helpers


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("tuneplat")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    root.propagate = False
    if not verbose:
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    _quiet_libraries(verbose)


def _quiet_libraries(verbose: bool) -> None:
    """Libraries configure their loggers when first imported: call again after imports.

    ``distributed`` sets its logger to INFO on import; it is imported here first, so that
    a later import (when the cluster starts) cannot undo this (no "Connection ... has been
    closed." INFO line at the end of a run).
    """
    import distributed  # noqa: F401

    for noisy in ("distributed", "optuna", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.WARNING)


def _out(text: str = "") -> None:
    print(text, flush=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    text = str(value)
    return text if len(text) <= 24 else text[:23] + "…"


def _table(cols: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _prepare_imports(extra_dirs: list[str]) -> None:
    """Make modules next to the user importable here and in embedded Dask workers."""
    dirs = [os.getcwd(), *extra_dirs]
    for d in reversed(dirs):
        d = os.path.abspath(d)
        if d not in sys.path:
            sys.path.insert(0, d)
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([os.path.abspath(d) for d in dirs] + current))


def _load(path: str, overrides: list[str]) -> Any:
    from .config import SweepFileError, load_sweep

    try:
        return load_sweep(path, overrides)
    except SweepFileError as exc:
        raise _Fail(str(exc)) from None


def cluster_options(parser: argparse.ArgumentParser) -> None:
    """TLS files and the tuner's address: what a multi-host cluster needs (docs/multi-host.md)."""
    parser.add_argument("--tls-ca-file", metavar="FILE", help="the TLS cluster's CA certificate (run.tls.ca_file)")
    parser.add_argument("--tls-cert", metavar="FILE", help="this client's certificate (run.tls.cert)")
    parser.add_argument("--tls-key", metavar="FILE", help="this client's private key (run.tls.key)")
    parser.add_argument("--tuner-host", metavar="HOST", help="the address workers reach the tuner at (run.tuner_host)")
    parser.add_argument("--tuner-port", metavar="PORT[-LAST]",
                        help="the tuner's result port or range, e.g. 8790-8799 (run.tuner_port)")


def _cluster_overrides(args: argparse.Namespace) -> list[str]:
    out = []
    for opt, key in (("tls_ca_file", "run.tls.ca_file"), ("tls_cert", "run.tls.cert"), ("tls_key", "run.tls.key"),
                     ("tuner_host", "run.tuner_host")):
        if getattr(args, opt, None):
            out.append(f"{key}={json.dumps(getattr(args, opt))}")
    port = getattr(args, "tuner_port", None)
    if port:
        out.append(f"run.tuner_port={json.dumps(int(port) if port.isdigit() else port)}")
    return out


def _cli_overrides(args: argparse.Namespace) -> list[str]:
    """Command-line options are --set overrides in disguise (same validation, one code path)."""
    out = list(args.overrides)
    if args.name:
        out.append(f"name={json.dumps(args.name)}")
    if args.storage_path:
        out.append(f"run.storage_path={json.dumps(args.storage_path)}")
    if args.address:
        out.append(f"run.address={json.dumps(args.address)}")
    out += _cluster_overrides(args)
    if args.verbose:
        out.append("run.verbose=2")
    if args.quiet:
        out.append("run.verbose=0")
    return out


def _experiment_end_status(experiment_dir: str) -> str | None:
    from .core._journal import read_journal

    try:
        events = read_journal(os.path.join(experiment_dir, "journal.jsonl"))
    except Exception:  # noqa: BLE001 - a summary detail only
        return None
    ends = [e.get("status") for e in events if e.get("event") == "experiment_end"]
    return ends[-1] if ends else None


def _save_sweep(sweep: Any, experiment_dir: str, remote_dir: str | None = None) -> None:
    """Save the effective sweep (overrides applied, ``${env:...}`` kept) beside the journal."""
    import yaml

    from .config import portable_data

    data = portable_data(sweep)
    data["name"] = os.path.basename(experiment_dir)
    if not isinstance(data.get("run"), dict):
        data["run"] = {}
    data["run"]["storage_path"] = remote_dir.rsplit("/", 1)[0] if remote_dir else os.path.dirname(experiment_dir)
    os.makedirs(experiment_dir, exist_ok=True)
    tmp = os.path.join(experiment_dir, f".{SWEEP_COPY}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"# Saved by `tuneplat run {sweep.source}`; `tuneplat resume {remote_dir or experiment_dir}` reads it.\n")
        yaml.safe_dump(data, f, sort_keys=False)
    os.replace(tmp, os.path.join(experiment_dir, SWEEP_COPY))
    with open(os.path.join(experiment_dir, ORIGIN_FILE), "w", encoding="utf-8") as f:
        json.dump(
            {
                "source": os.path.abspath(sweep.source),
                "cwd": os.getcwd(),
                "sweep_dir": os.path.dirname(os.path.abspath(sweep.source)),
            },
            f,
        )


def _summary(results: Any, experiment_dir: str, metric: Any, mode: Any, verbose: int = 0) -> int:
    """The exit status of a run; with ``-q`` (verbose 0) also the two summary lines (else the live view's end says it)."""
    n, n_err = len(results), results.num_errors
    status = _experiment_end_status(experiment_dir)
    if verbose < 1:
        _out(f"tuneplat: {n} trials: {results.num_terminated} TERMINATED, {n_err} ERROR — {experiment_dir}")
    if verbose < 1 and isinstance(metric, str) and mode in ("min", "max") and n > n_err:
        try:
            best = results.get_best_result(metric, mode)
            _out(
                f"tuneplat: best trial {best.trial_id}: {metric}={_fmt(best.metrics.get(metric))} "
                f"config={json.dumps(_jsonable(best.config), sort_keys=True)}"
            )
        except ValueError:
            pass
    if status == "interrupted":
        raise _Fail(f"interrupted; continue with: tuneplat resume {experiment_dir}", EXIT_INTERRUPTED)
    if n == 0:
        raise _Fail(f"experiment produced no trials ({experiment_dir})", EXIT_FAILED)
    if n_err == n:
        first = str(results.errors[0]).splitlines()[0] if results.errors else "unknown error"
        raise _Fail(
            f"experiment failed: all {n} trials errored; first error: {first} (see `tuneplat status {experiment_dir}`)",
            EXIT_FAILED,
        )
    if status == "failed":
        first = str(results.errors[0]).splitlines()[0] if results.errors else "see tuneplat status"
        raise _Fail(f"experiment stopped at the first trial error: {first} — {experiment_dir}", EXIT_FAILED)
    return EXIT_OK


def _fit(tuner: Any) -> Any:
    from .core import TuneError
    from .execution._errors import PlacementError

    try:
        return tuner.fit()
    except PlacementError as exc:
        raise _Fail(f"cannot place trials: {exc}") from None
    except TuneError as exc:
        raise _Fail(f"experiment failed: {str(exc).splitlines()[0]}", EXIT_FAILED) from None
    except (OSError, ValueError, TypeError) as exc:
        raise _Fail(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None


# --------------------------------------------------------------------------- commands


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
    from ._tuner import Tuner, _local_path
    from .search import BasicVariantGenerator
    from .storage._storage import is_remote

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


def _fetch_remote(target: str) -> tuple[str, Any, str | None]:
    """``(local folder, filesystem, remote URL)``: a remote experiment's local cache, refreshed from the remote
    copy; a local path as is (with no filesystem or URL)."""
    from .storage._storage import fetch_experiment, fs_for_url, is_remote, local_cache_for

    if not is_remote(target):
        return os.path.abspath(target), None, None
    try:
        fs, root = fs_for_url(target)
        url = fs.unstrip_protocol(root.rstrip("/"))
        if not fs.exists(f"{url}/journal.jsonl"):
            raise _Fail(f"{target}: not a tuneplat experiment folder (no journal.jsonl); expected <storage_path>/<name>")
        local = local_cache_for(url)
        fetch_experiment(fs, url, local)
    except (ValueError, OSError) as exc:
        raise _Fail(f"{target}: {str(exc).splitlines()[0]}") from None
    return local, fs, url


def _cmd_resume(args: argparse.Namespace) -> int:
    from ._tuner import Tuner
    from .storage._storage import is_remote

    path, _fs, _url = _fetch_remote(args.experiment_dir)
    if not Tuner.can_restore(path):
        raise _Fail(
            f"{args.experiment_dir}: not a tuneplat experiment folder (no journal.jsonl); "
            "expected <storage_path>/<name>"
        )
    origin = {}
    if os.path.exists(os.path.join(path, ORIGIN_FILE)):
        with open(os.path.join(path, ORIGIN_FILE), encoding="utf-8") as f:
            origin = json.load(f)
    _prepare_imports([d for d in (origin.get("cwd"), origin.get("sweep_dir")) if d and os.path.isdir(d)])
    saved = os.path.join(path, SWEEP_COPY)
    overrides = []
    if args.address:
        overrides.append(f"run.address={json.dumps(args.address)}")
    overrides += _cluster_overrides(args)
    if args.verbose:
        overrides.append("run.verbose=2")
    if args.quiet:
        overrides.append("run.verbose=0")
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
        from .config import import_object

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


def _load_grid(experiment_dir: str) -> tuple[Any, dict[str, Any]]:
    from ._tuner import Tuner
    from .core._journal import JournalError
    from .core._replay import load_trials
    from .results._result import ResultGrid

    path, fs, url = _fetch_remote(experiment_dir)
    if not Tuner.can_restore(path):
        raise _Fail(
            f"{experiment_dir}: not a tuneplat experiment folder (no journal.jsonl); expected <storage_path>/<name>"
        )
    try:
        trials, meta = load_trials(path, fs)
    except JournalError as exc:
        raise _Fail(str(exc).splitlines()[0]) from None
    meta = dict(meta)
    from collections import Counter

    from .tracking._progress import status_words

    ended = _experiment_end_status(path)
    meta["status"] = "running" if _is_running(path) else (
        status_words(ended, Counter(t.status.value for t in trials), len(trials)) if ended else "crashed (resumable)")
    meta["path"] = url or path
    meta["world_size"] = {t.trial_id: t.world_size for t in trials}
    return ResultGrid.from_trials(trials, meta.get("metric"), meta.get("mode"), path, fs, url), meta


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


def _is_running(experiment_dir: str) -> bool:
    """Whether a live process holds the experiment's in-use lock (see core/_lock.py)."""
    from .core._lock import LOCK_NAME

    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return False
    try:
        fd = os.open(os.path.join(experiment_dir, LOCK_NAME), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (closing releases a lock this call took)
    return False


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

    from .search import flatten_dict

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
    if as_json:
        info = _trial_json(r)
        info["error"] = str(r.error) if r.error else None
        info["history"] = _jsonable(r._history)
        if _elastic(meta):
            info["world_size"] = (meta.get("world_size") or {}).get(r.trial_id)
            info["resizes"] = resizes
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
    if r.error:
        _out("error:")
        _out(str(r.error))
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from collections import Counter

    from .search import flatten_dict

    target = args.experiment_dir
    from .storage._storage import is_remote

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

    from .execution._observe import WORKER_COLUMNS, read_workers, worker_rows

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


def _cmd_stacks(args: argparse.Namespace) -> int:
    """``tuneplat stacks EXP [--trial ID]``: stacks of the running ranks, captured by the running tuner."""
    from .execution._observe import request_stacks

    target = args.experiment_dir
    if not os.path.isfile(os.path.join(target, "journal.jsonl")):
        raise _Fail(f"{target} is not an experiment folder (no journal.jsonl)")
    if not _is_running(target):
        raise _Fail(f"{target} is not running (no tuner holds it): stacks are read from running ranks. The stacks "
                    "captured when a rank hung are in its trial folder (stacks/) and named in the trial's error.")
    answer = request_stacks(target, args.trial, args.timeout)
    if answer is None:
        raise _Fail(f"the tuner running {target} did not answer within {args.timeout:g}s (--timeout)", EXIT_FAILED)
    trials = answer.get("trials") or {}
    if args.json:
        _out(json.dumps(answer, indent=2))
        return EXIT_OK
    if not trials:
        running = answer.get("running") or []
        which = f"trial {args.trial} is not running" if args.trial else "no trial is running"
        _out(f"{which} (running: {', '.join(running) or 'none'})")
        return EXIT_OK if not args.trial else EXIT_BAD_INPUT
    for tid, got in trials.items():
        _out(f"== trial {tid}: {got.get('summary', '').lstrip('. ')}")
        _out(got.get("text") or "(no stacks could be read)")
    return EXIT_OK


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
    from .results._result import _score

    if scope == "last":
        return result.metrics.get(metric)
    score = _score(result, metric, mode, scope)
    return score if mode == "min" or not math.isfinite(score) else -score


def _pareto(grid: Any, metrics: list[str], modes: list[str], as_json: bool) -> int:
    from .search import pareto_front

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
        from .testing._recommend import recommend

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


def _cmd_plot(args: argparse.Namespace) -> int:
    from .plot import PlotError, load_experiment, save_plots

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


if __name__ == "__main__":
    sys.exit(main())
