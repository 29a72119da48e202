"""Python stacks of a trial's ranks: when a rank is declared hung, and on demand (``tuneplat stacks``).

Three ways to read a rank's stacks, tried in order:

1. Ask its Dask worker (``Client.run``, which runs on the worker's event-loop
   thread): ``sys._current_frames()`` of every thread, the rank's own thread
   first. Works across hosts whenever the process still runs Python (a rank
   blocked on a lock, in a collective, in ``time.sleep``...).
2. On the tuner's host, ``py-spy dump --native --pid`` when py-spy is installed
   (it also reads a process that is stopped or holds the GIL, shows C frames and
   says which thread holds the GIL).
3. On the tuner's host, ``SIGUSR2``: the runner armed ``faulthandler`` for the
   trial, which writes every thread's stack to a file in the trial folder from
   its C signal handler (works while the process holds the GIL).

The result is one text file per capture in ``<trial>/stacks/``, and a one-line
summary naming, for each rank, the function and line where its training thread
was (the innermost frame outside tuneplat and the standard library).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

__all__ = ["RankRef", "arm", "capture", "disarm", "rank_stacks", "register", "unregister"]

logger = logging.getLogger("tuneplat")

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
_SIGNAL = getattr(signal, "SIGUSR2", None)

#: (trial_id, rank) -> the thread ident running that rank's user code in this worker process
_THREADS: dict[tuple[str, int], int] = {}
_ARMED: dict[tuple[str, int], Any] = {}


def register(trial_id: str, rank: int) -> None:
    """The calling thread runs ``rank`` of ``trial_id`` (the runner calls it before user code)."""
    _THREADS[(trial_id, rank)] = threading.get_ident()


def unregister(trial_id: str, rank: int) -> None:
    _THREADS.pop((trial_id, rank), None)


def _faulthandler_path(trial_dir: str, rank: int) -> str:
    return os.path.join(trial_dir, f".faulthandler-rank{rank}.txt")


def arm(trial_id: str, rank: int, trial_dir: str) -> None:
    """Make ``SIGUSR2`` write every thread's stack to the trial folder (faulthandler, C-level: no GIL needed)."""
    if _SIGNAL is None:
        return
    try:
        path = _faulthandler_path(trial_dir, rank)  # (no folder is made: a trial folder on another host is skipped)
        f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the signal handler
        f.write(f"tuneplat rank {rank} thread 0x{threading.get_ident():016x}\n")
        f.flush()
        faulthandler.register(_SIGNAL, file=f, all_threads=True, chain=False)
        _ARMED[(trial_id, rank)] = f
    except (OSError, RuntimeError, ValueError):
        logger.debug("tuneplat: faulthandler not armed", exc_info=True)


def disarm(trial_id: str, rank: int) -> None:
    f = _ARMED.pop((trial_id, rank), None)
    if f is None:
        return
    try:
        if _SIGNAL is not None:
            if _ARMED:  # another rank of this process is still armed: the signal writes to its file now
                faulthandler.register(_SIGNAL, file=next(iter(_ARMED.values())), all_threads=True, chain=False)
            else:
                faulthandler.unregister(_SIGNAL)
        f.close()
        os.unlink(f.name)
    except (OSError, RuntimeError, ValueError):
        pass


def _where(frames: list[tuple[str, int, str]]) -> str | None:
    """The innermost frame (``frames`` outermost first) outside tuneplat and the standard library."""
    for filename, lineno, name in reversed(frames):
        path = os.path.abspath(filename)
        if path.startswith(_PKG) or path.startswith(_STDLIB) or filename.startswith("<"):
            continue
        return f"{name} ({filename}:{lineno})"
    if frames:
        filename, lineno, name = frames[-1]
        return f"{name} ({filename}:{lineno})"
    return None


def rank_stacks(trial_id: str) -> dict[int, dict[str, Any]]:
    """Run in a worker process (``Client.run``): the stacks of this process's ranks of ``trial_id``."""
    from ._frames_guard import current_frames

    frames = current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    out: dict[int, dict[str, Any]] = {}
    for (tid, rank), ident in list(_THREADS.items()):
        if tid != trial_id:
            continue
        lines = [f"rank {rank} of trial {trial_id}, pid {os.getpid()} on {socket.gethostname()}"]
        where = None
        order = [ident] + [i for i in frames if i != ident]
        for i in order:
            frame = frames.get(i)
            if frame is None:
                continue
            stack = traceback.extract_stack(frame)
            label = "the rank's training thread" if i == ident else "thread"
            lines.append(f"\n--- {label} {names.get(i, '?')} (0x{i:x}), most recent call last:")
            lines.extend(traceback.format_list(stack))
            if i == ident:
                where = _where([(f.filename, f.lineno or 0, f.name) for f in stack])
        out[rank] = {"text": "\n".join(lines), "where": where, "how": "sys._current_frames via the Dask worker"}
    return out


@dataclass
class RankRef:
    """What the tuner knows of a rank: enough to reach it."""

    index: int
    address: str  # its Dask worker
    pid: int | None
    hostname: str | None
    responsive: bool = True  # its heartbeats arrive (the process runs Python)


def _via_workers(client: Any, trial_id: str, addresses: list[str], timeout: float) -> dict[str, Any]:
    """Every listed worker's answer to :func:`rank_stacks` (one ``Client.run`` for all; those that answer in time)."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["r"] = client.run(rank_stacks, trial_id, workers=addresses, on_error="return")
        except Exception as exc:  # noqa: BLE001
            box["e"] = exc

    t = threading.Thread(target=call, name="tuneplat-stacks", daemon=True)
    t.start()
    t.join(timeout)
    answers = box.get("r")
    if isinstance(answers, dict):
        return answers
    if addresses and len(addresses) > 1 and "r" not in box:  # one worker does not answer: ask each alone
        out: dict[str, Any] = {}
        for a in addresses:
            out.update(_via_workers(client, trial_id, [a], timeout / 2))
        return out
    return {}


def _pyspy() -> str | None:
    """py-spy on PATH, else beside this Python (a virtual environment that is not activated)."""
    found = shutil.which("py-spy")
    if found is None:
        beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
        found = beside if os.access(beside, os.X_OK) else None
    return found


def _via_pyspy(pid: int, timeout: float) -> dict[str, Any] | None:
    """``py-spy dump --native``: the Python and C frames of every thread, read from outside (no GIL, no signal),
    and which thread holds the GIL.

    The C frames say where a process is stuck that no Python-level dump can show: a C extension waiting on a lock
    while it holds the GIL, a destructor the garbage collector runs... Where native frames cannot be read, py-spy
    is asked again for the Python frames alone.
    """
    import json

    exe = _pyspy()
    if exe is None:
        return None
    threads: list[dict[str, Any]] = []
    how = "py-spy dump"
    for extra in (["--native"], []):
        try:
            run = subprocess.run([exe, "dump", "--json", *extra, "--pid", str(pid)], capture_output=True,
                                 text=True, timeout=timeout)
            threads = json.loads(run.stdout) if run.returncode == 0 else []
        except (OSError, subprocess.SubprocessError, ValueError):
            threads = []
        if threads:
            how = " ".join(["py-spy dump", *extra])
            break
    if not isinstance(threads, list) or not threads:
        return None
    lines: list[str] = []
    per_thread: list[list[tuple[str, int, str]]] = []  # each thread's Python frames, innermost first
    rank_frames: list[tuple[str, int, str]] | None = None
    holder = None
    for t in threads:
        frames = t.get("frames") or []  # innermost first
        tid = t.get("os_thread_id")
        name = (f"thread {t['thread_name']!r}" if t.get("thread_name")
                else "the main thread" if tid == pid else f"os thread {tid}")
        gil = bool(t.get("owns_gil"))
        lines.append(f"--- {name} (os thread {tid})"
                     + (", holds the GIL" if gil else "") + ", innermost first:")
        py: list[tuple[str, int, str]] = []
        for f in frames:
            filename, line = str(f.get("filename") or "?"), int(f.get("line") or 0)
            lines.append(f"    {f.get('name')} ({filename}:{line})" if line else
                         f"    {f.get('name')} ({f.get('short_filename') or filename})")
            if line and filename.endswith(".py"):
                py.append((filename, line, str(f.get("name"))))
        lines.append("")
        per_thread.append(py)
        if rank_frames is None and any(fn.endswith(os.path.join("execution", "_runner.py")) for fn, _l, _n in py):
            rank_frames = py  # the rank's training thread runs tuneplat's runner
        if gil and frames:
            holder = (name, str(frames[0].get("name")), frames[0].get("line") == 0)
    if rank_frames is None:  # (no runner frame: not a rank's process) the first thread with Python frames
        rank_frames = next((py for py in per_thread if py), [])
    where = _where(list(reversed(rank_frames)))
    if holder is not None and holder[2]:  # a thread holds the GIL inside C code: what every other thread waits on
        where = f"{where or '?'}, while {holder[0]} holds the GIL in {holder[1]}"
    return {"text": "\n".join(lines), "where": where, "how": how}


_FH_FRAME = re.compile(r'^\s+File "(?P<file>.+?)", line (?P<line>\d+) in (?P<name>\S+)')


def _via_signal(pid: int, trial_dir: str, rank: int, timeout: float) -> dict[str, Any] | None:
    if _SIGNAL is None:
        return None
    path = _faulthandler_path(trial_dir, rank)
    try:
        before = os.path.getsize(path)
        os.kill(pid, _SIGNAL)
    except OSError:
        return None
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:  # the signal handler writes asynchronously in the other process
        time.sleep(0.05)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(before)
                text = f.read()
        except OSError:
            return None
        if text.endswith("\n\n") or (text and time.monotonic() > deadline - timeout / 2):
            break
    if not text.strip():
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline()
    ident = header.rsplit(" ", 1)[-1].strip()
    frames: list[tuple[str, int, str]] = []
    block: list[tuple[str, int, str]] | None = None
    for line in text.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            block = [] if ident and ident in line else None
            continue
        m = _FH_FRAME.match(line)
        if m and block is not None:
            block.append((m["file"], int(m["line"]), m["name"]))
            frames = block
    return {"text": text, "where": _where(list(reversed(frames))), "how": "faulthandler (SIGUSR2)"}


def capture(client: Any, trial_id: str, trial_dir: str, ranks: list[RankRef], reason: str,
            timeout: float = 5.0) -> tuple[str | None, str]:
    """Capture every rank's stacks into ``<trial_dir>/stacks/``; return (the file, a one-line summary).

    Never raises: a rank whose stacks cannot be read says so in the summary.
    """
    here = socket.gethostname()
    parts: list[str] = []
    texts: list[str] = []
    answers = _via_workers(client, trial_id, sorted({r.address for r in ranks if r.responsive}), timeout)
    for ref in ranks:
        got: dict[str, Any] | None = None
        if ref.responsive:
            answer = answers.get(ref.address)
            got = answer.get(ref.index) if isinstance(answer, dict) else None
        if got is None and ref.pid and ref.hostname == here:
            got = _via_pyspy(ref.pid, timeout) or _via_signal(ref.pid, trial_dir, ref.index, min(timeout, 2.0))
        if got is None:
            parts.append(f"rank {ref.index}: stacks unavailable (its process does not answer"
                         + ("" if ref.hostname == here else " and runs on another host") + ")")
            texts.append(f"=== rank {ref.index} on {ref.address}: no stacks could be read")
            continue
        parts.append(f"rank {ref.index} in {got.get('where') or '?'}")
        texts.append(f"=== rank {ref.index} on {ref.address} (pid {ref.pid}, {got.get('how')})\n{got['text']}")
    summary = "; ".join(parts)
    path = None
    try:
        folder = os.path.join(trial_dir, "stacks")
        os.makedirs(folder, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = os.path.join(folder, f"{stamp}-{re.sub(r'[^A-Za-z0-9_-]+', '-', reason)[:40]}.txt")
        n = 1
        while os.path.exists(path):
            n += 1
            path = os.path.join(folder, f"{stamp}-{n}-{re.sub(r'[^A-Za-z0-9_-]+', '-', reason)[:40]}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"stacks of trial {trial_id} ({reason}) at {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                    f"summary: {summary}\n\n" + "\n\n".join(texts) + "\n")
    except OSError:
        logger.warning("tuneplat: could not write the stacks of trial %s", trial_id, exc_info=True)
        path = None
    return path, summary
