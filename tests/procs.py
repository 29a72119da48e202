"""Processes the tests start (Dask CLI clusters, MLflow and S3 servers): started in their own process group,
stopped with everything they spawned whatever happens, and none left running when the session ends.

``popen`` records each process; ``stop`` ends its group (SIGTERM, then SIGKILL after a grace) and never raises;
``stop_leftovers`` (called when the session ends) stops what a test did not, and says which.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

_STARTED: list[subprocess.Popen[Any]] = []


def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` in a new session (its own process group), remembered for the session's end."""
    kwargs.setdefault("start_new_session", True)
    proc = subprocess.Popen(args, **kwargs)
    _STARTED.append(proc)
    return proc


def terminal_sigint() -> None:
    """``preexec_fn`` of a child a test sends Ctrl-C to: it takes SIGINT as a terminal's foreground process does
    (Python's KeyboardInterrupt), even when this test session ignores SIGINT and the child would inherit that (a
    session started in the background of a non-interactive shell, or under ``nohup``: both ignore SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(proc: subprocess.Popen[Any], grace_s: float = 20.0) -> None:
    """End ``proc``'s process group: SIGTERM, then SIGKILL to the whole group after ``grace_s``; never raises.

    The group is killed even when the leader exits at once: a worker's children (a nanny's process, a
    DataLoader's workers) must not outlive the test.
    """
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # stragglers of the group, or a leader that ignored SIGTERM
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # (a process in uninterruptible sleep) - reported at the session's end
        pass
    if proc in _STARTED and proc.poll() is not None:
        _STARTED.remove(proc)


def stop_leftovers() -> list[str]:
    """Stop every recorded process still running (a test that failed before its clean-up); what was stopped."""
    left = []
    for proc in list(_STARTED):
        if proc.poll() is None:
            args = proc.args if isinstance(proc.args, str) else " ".join(map(str, proc.args))
            left.append(f"pid {proc.pid}: {args[:200]}")
        stop(proc, grace_s=5.0)
        if proc in _STARTED:
            _STARTED.remove(proc)
    return left


def _size_text(path: str) -> str:
    total = 0
    for top, _dirs, files in os.walk(path):
        for n in files:
            try:
                total += os.lstat(os.path.join(top, n)).st_size
            except OSError:
                pass
    return f"{total / 1e6:.0f} MB"


def kept_note(path: str) -> str:
    """The line the session prints when it keeps its temporary folder (a failed run): where, how big, how to remove."""
    return (f"tuneplat tests: kept the session's temporary folder for a look: {path} ({_size_text(path)}); "
            f"remove it with: rm -rf {path}")
