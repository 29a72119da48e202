"""The suite's own clean-up: what a test starts is stopped with its whole process group, whatever happens, and
the session says what it leaves (processes it had to stop, the temporary folder it keeps)."""

from __future__ import annotations

import os
import select
import subprocess
import sys

import procs
from procs import kept_note

# a leader that ignores SIGTERM (as a `dask worker --no-nanny` busy in a task may) with a child of its own
_STUBBORN = r"""
import signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
signal.pause()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """The process ``pid`` (not our child: the leader's) has ended within ``within_s``. SIGKILL is delivered
    asynchronously, so this waits for the exit itself: a pidfd becomes readable when its process ends (a zombie
    included), which works for a process that is not ours to ``waitpid``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], within_s)
    finally:
        os.close(fd)
    return bool(readable) or not _alive(pid)


def test_stop_kills_the_whole_group_even_when_the_leader_ignores_sigterm():
    p = procs.popen([sys.executable, "-c", _STUBBORN], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())  # the child is up (it answered before the leader printed its pid)
    procs.stop(p, grace_s=0.5)  # before: p.wait(timeout=30) raised TimeoutExpired and left both running
    p.stdout.close()
    assert p.poll() is not None and _gone(child)


def test_the_session_stops_and_names_what_a_test_left_running(monkeypatch):
    # the session's own list is set aside: stop_leftovers() ends every process on it, and the session's S3
    # server (started once, for the whole session) is on it; this test ran mid-session and ended it
    monkeypatch.setattr(procs, "_STARTED", [])
    p = procs.popen([sys.executable, "-c", _STUBBORN], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    stopped = procs.stop_leftovers()
    p.stdout.close()
    assert any(f"pid {p.pid}:" in line for line in stopped)
    assert p.poll() is not None and _gone(child)


def test_a_kept_temporary_folder_is_named_with_its_size(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 3_000_000)
    note = kept_note(str(tmp_path))
    assert str(tmp_path) in note and "(3 MB)" in note and f"rm -rf {tmp_path}" in note
