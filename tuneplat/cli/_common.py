"""What the ``tuneplat`` commands share: exit statuses, output, logging, loading sweeps and experiments."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from typing import Any

import yaml

logger = logging.getLogger("tuneplat")


EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


SWEEP_COPY = "sweep.yaml"


ORIGIN_FILE = "sweep_origin.json"


class _Fail(Exception):
    """A one-line reason to stop with an exit status."""

    def __init__(self, message: str, status: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.status = status


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
    from ..config import SweepFileError, load_sweep

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
    return out + _run_overrides(args)


def _run_overrides(args: argparse.Namespace) -> list[str]:
    """--address, the cluster options and --verbose/--quiet as --set overrides (``run`` and ``resume`` alike)."""
    out = [f"run.address={json.dumps(args.address)}"] if args.address else []
    out += _cluster_overrides(args)
    if args.verbose:
        out.append("run.verbose=2")
    if args.quiet:
        out.append("run.verbose=0")
    return out


def _experiment_end_status(experiment_dir: str) -> str | None:
    from ..core._replay import load_state

    try:
        return load_state(experiment_dir).status
    except Exception:  # noqa: BLE001 - a summary detail only
        return None


def _save_sweep(sweep: Any, experiment_dir: str, remote_dir: str | None = None) -> None:
    """Save the effective sweep (overrides applied, ``${env:...}`` kept) beside the journal."""

    from ..config import portable_data

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
    from ..core import TuneError
    from ..execution._errors import PlacementError

    try:
        return tuner.fit()
    except PlacementError as exc:
        raise _Fail(f"cannot place trials: {exc}") from None
    except TuneError as exc:
        raise _Fail(f"experiment failed: {str(exc).splitlines()[0]}", EXIT_FAILED) from None
    except (OSError, ValueError, TypeError) as exc:
        raise _Fail(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None


def _fetch_remote(target: str) -> tuple[str, Any, str | None]:
    """``(local folder, filesystem, remote URL)``: a remote experiment's local cache, refreshed from the remote
    copy; a local path as is (with no filesystem or URL)."""
    from ..storage._storage import fetch_experiment, fs_for_url, is_remote, local_cache_for

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


def not_an_experiment(given: str, local_path: str) -> str:
    """Why ``given`` cannot be read as an experiment: it does not exist, or it holds no journal (same words as
    ``status``, which also takes a storage folder), or its journal is damaged (the file and line)."""
    if not os.path.exists(local_path):
        return (f"{given}: no such folder; pass an experiment folder (<storage_path>/<name>), e.g. one that "
                "tuneplat status ./tuneplat_results lists")
    if os.path.isfile(os.path.join(local_path, "journal.jsonl")):
        from ..core._replay import restore_problem

        problem = restore_problem(local_path)
        if problem:
            return problem
    return f"{given}: not a tuneplat experiment folder (no journal.jsonl); expected <storage_path>/<name>"


def journal_readable(local_path: str) -> bool:
    """Whether the folder's journal can be read (its ``tuner.pkl`` aside: reading a folder never unpickles it)."""
    from ..core._journal import JournalError, read_journal

    try:
        read_journal(os.path.join(local_path, "journal.jsonl"))
    except (JournalError, OSError, UnicodeDecodeError):
        return False
    return True


def _load_grid(experiment_dir: str) -> tuple[Any, dict[str, Any]]:
    from ..core._journal import JournalError
    from ..core._replay import load_trials
    from ..results._result import ResultGrid

    path, fs, url = _fetch_remote(experiment_dir)
    running = _is_running(path)  # (first: another user's experiment is "permission denied", not "no experiment")
    if not journal_readable(path):  # (a damaged or refused tuner.pkl does not stop a look at the journal)
        raise _Fail(not_an_experiment(experiment_dir, path))
    try:
        trials, meta = load_trials(path, fs)
    except JournalError as exc:
        raise _Fail(str(exc).splitlines()[0]) from None
    meta = dict(meta)
    from collections import Counter

    from ..tracking._progress import status_words

    ended = _experiment_end_status(path)
    meta["status"] = "running" if running else (
        status_words(ended, Counter(t.status.value for t in trials), len(trials)) if ended else "crashed (resumable)")
    meta["path"] = url or path
    meta["world_size"] = {t.trial_id: t.world_size for t in trials}
    meta["resource_changes"] = {t.trial_id: list(t.resource_changes) for t in trials if t.resource_changes}
    return ResultGrid.from_trials(trials, meta.get("metric"), meta.get("mode"), path, fs, url), meta


def _not_yours(experiment_dir: str, lock: str) -> str:
    """Permission denied on another user's experiment: whose it is and what to do."""
    try:
        uid = os.stat(lock).st_uid
    except OSError:
        uid = -1
    try:
        import pwd

        owner = f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        owner = f"uid {uid}"
    me = os.getuid() if hasattr(os, "getuid") else -1
    return (f"permission denied: {experiment_dir} belongs to {owner}, and its lock file {lock} (which says whether "
            f"a tuner is running it) is readable by its owner only; you are uid {me}. Run tuneplat as {owner}")


def _is_running(experiment_dir: str) -> bool:
    """Whether a live process holds the experiment's in-use lock (see core/_lock.py).

    Raises:
        _Fail: permission denied on the lock (another user's experiment): whether it runs cannot be told.
    """
    from ..core._lock import LOCK_NAME

    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return False
    lock = os.path.join(experiment_dir, LOCK_NAME)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except PermissionError:
        raise _Fail(_not_yours(experiment_dir, lock), EXIT_FAILED) from None
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (closing releases a lock this call took)
    return False
