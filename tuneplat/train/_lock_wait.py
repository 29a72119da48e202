"""A rank waiting for a build lock that no process holds: torch's extension lock left by a killed process.

torch builds and loads its JIT extensions (``torch.utils.cpp_extension.load``:
DeepSpeed's CPU communication op, its CPU Adam, any user op) under a lock
file in the extension's build folder (``~/.cache/torch_extensions/<py>_<cpu|cuXY>/<name>/lock``),
created with ``O_CREAT | O_EXCL`` and held open until the build or up-to-date
check ends. Every process that loads the extension takes it, even when nothing
needs building. A process killed while it holds the lock (Ctrl-C'd, SIGKILLed,
a rank aborted while its group starts) leaves the file behind, and from then on
every process that loads that extension waits for it to disappear, forever,
using ~1 % of a core (``torch.utils.file_baton.FileBaton.wait``): a silent hang
of every later trial on that host.

The rank's heartbeat looks at where its threads are (:func:`baton_waits`); a wait
that lasts :func:`warn_after` seconds while no process on this host has the file
open (:func:`holders`: a live holder always has it open) goes to the tuner in the
rank's row, which warns once, naming the file and what to do.

tuneplat never leaves such a file itself: when it ends a rank's process (a rank
that did not unwind after an abort, a hung rank's worker killed on this host),
the build locks that process holds are removed with it (:func:`release_held`),
after the processes it started for the build (ninja, the compiler) are ended.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

from .._settings import env_seconds

__all__ = ["LockWatch", "baton_waits", "held_locks", "holders", "release_held", "warn_after"]

logger = logging.getLogger("tuneplat")

_BATON_FILE = os.path.join("torch", "utils", "file_baton.py")


def warn_after() -> float:
    """Seconds a rank waits for an unheld lock before it is reported (``TUNEPLAT_STALE_LOCK_S``, 60)."""
    return env_seconds("TUNEPLAT_STALE_LOCK_S", 60)


def baton_waits() -> list[str]:
    """The lock files that this process's threads wait for in torch's ``FileBaton.wait``."""
    from ..execution._frames_guard import current_frames

    found = []
    for frame in current_frames().values():
        code = frame.f_code  # the waiting thread's innermost Python frame is FileBaton.wait (in time.sleep)
        if code.co_name == "wait" and code.co_filename.endswith(_BATON_FILE):
            path = getattr(frame.f_locals.get("self"), "lock_file_path", None)
            if isinstance(path, str):
                found.append(os.path.abspath(path))
    return found


def holders(path: str) -> list[int] | None:
    """The processes on this host that have ``path`` open (of those whose descriptors this user may read);
    None where ``/proc`` cannot tell (not Linux)."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    want = os.path.realpath(path)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # ended meanwhile, or another user's process
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == want:
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


class LockWatch:
    """Called on each heartbeat: the lock this rank has waited for longest, once that wait passed
    :func:`warn_after` and nobody on this host holds the file; else None."""

    def __init__(self, warn_s: float | None = None) -> None:
        self.since: dict[str, float] = {}
        self.warn_s = warn_after() if warn_s is None else warn_s

    def check(self, now: float | None = None) -> dict[str, Any] | None:
        now = time.monotonic() if now is None else now
        waits = baton_waits()
        self.since = {p: self.since.get(p, now) for p in waits}
        for path, start in sorted(self.since.items(), key=lambda kv: kv[1]):
            waited = now - start
            if waited < self.warn_s or not os.path.exists(path):
                continue
            held = holders(path)
            if held is None or held:  # a live process holds it (building), or this host cannot tell
                continue
            return {"path": path, "waited_s": round(waited, 1)}
        return None


def _extension_roots(pid: int | None) -> list[str]:
    """Where torch builds its extensions for process ``pid`` (this one: None): ``TORCH_EXTENSIONS_DIR`` from its
    environment, else torch's default (``$XDG_CACHE_HOME`` or ``~/.cache``, ``/torch_extensions``)."""
    if pid is None:
        env: dict[str, str] = dict(os.environ)
    else:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
            env = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}
        except OSError:
            env = dict(os.environ)
    roots = []
    if env.get("TORCH_EXTENSIONS_DIR"):
        roots.append(env["TORCH_EXTENSIONS_DIR"])
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    roots.append(os.path.join(cache, "torch_extensions"))
    return [os.path.realpath(r) for r in roots]


def held_locks(pid: int | None = None) -> list[str]:
    """The torch build-lock files (``<extensions root>/.../lock``) that process ``pid`` (this one: None) has open."""
    fd_dir = f"/proc/{pid if pid is not None else 'self'}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # not Linux, ended, or another user's process
        return []
    roots = _extension_roots(pid)
    found = []
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        # (another process's environment as it started: a TORCH_EXTENSIONS_DIR it set itself later is not in
        # /proc/<pid>/environ, so a folder named torch_extensions counts wherever it is)
        if os.path.basename(target) == "lock" and (any(target.startswith(r + os.sep) for r in roots)
                                                   or "torch_extensions" in target.split(os.sep)[:-1]):
            found.append(target)
    return sorted(set(found))


def release_held(pid: int | None, locks: list[str], why: str) -> list[str]:
    """Process ``pid`` (this one: None), which held ``locks`` (:func:`held_locks`, read before it was stopped), is
    being ended by tuneplat: end the processes it started (the build it ran under the lock), then remove each lock
    no other process has open. Returns the files removed."""
    if not locks:
        return []
    try:
        import psutil

        for child in psutil.Process(pid if pid is not None else os.getpid()).children(recursive=True):
            try:
                os.kill(child.pid, signal.SIGKILL)  # (a build left running would write beside the next one)
            except OSError:
                pass
    except Exception:  # noqa: BLE001 - psutil missing, or the process ended: its children went with it or are orphans
        logger.debug("tuneplat: could not list the children of %s", pid, exc_info=True)
    removed = []
    me = os.getpid() if pid is None else pid
    for path in locks:
        others = [p for p in (holders(path) or []) if p != me]
        if others:
            continue  # (opened again since, by a live process: its lock now)
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
        logger.warning("tuneplat: removed torch's build lock %s, held by process %d as %s (the build it was doing "
                       "is redone by the next process that loads the extension)", path, me, why)
    return removed
