"""A rank's forks wait until no thread holds CPython's thread-state lock (CPython gh-112275).

On the affected Pythons a child forked while another thread holds that lock hangs before its first line of Python
(the hang of Ray's no-Ray-Data DeepSpeed example: a ``DataLoader`` worker that never starts, torch's gloo thread the
holder). The script forks in a fresh interpreter while a second thread holds the lock, with and without the guard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuneplat.execution import _fork_guard

SCRIPT = Path(__file__).with_name("fork_guard_child.py")
ROOT = Path(__file__).resolve().parents[2]

needs_affected_python = pytest.mark.skipif(
    not _fork_guard.affected() or _fork_guard._head_lock() is None,
    reason=f"CPython {sys.version.split()[0]} resets the lock itself (the bug is in 3.10.0-3.10.14, 3.11.0-3.11.9)")


def _fork_with_lock_held(mode: str, bound_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("TUNEPLAT_FORK_GUARD", None)
    out = subprocess.run([sys.executable, str(SCRIPT), mode, str(bound_s)], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_affected_python
def test_without_the_guard_the_child_of_such_a_fork_hangs():
    # the bug this guards against, reproduced: the child inherits the lock held and never gets past
    # PyOS_AfterFork_Child (it would wait for ever; 5 s is only how long the parent looks before killing it)
    result = _fork_with_lock_held("no-guard", 5)
    assert result["exited"] is False


@needs_affected_python
def test_with_the_guard_the_fork_waits_for_the_holder_and_the_child_runs():
    result = _fork_with_lock_held("guard", 120)
    assert result["guard_waits"] >= 1  # the guard found the lock held and waited for it
    assert result["exited"] is True and os.waitstatus_to_exitcode(result["status"]) == 0


def test_affected_versions():
    assert _fork_guard.affected((3, 11, 7)) and _fork_guard.affected((3, 10, 14)) and _fork_guard.affected((3, 11, 0))
    assert not _fork_guard.affected((3, 11, 10)) and not _fork_guard.affected((3, 10, 15))
    assert not _fork_guard.affected((3, 12, 0)) and not _fork_guard.affected((3, 13, 1))

