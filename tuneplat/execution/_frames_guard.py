"""``sys._current_frames()`` without the garbage collector on CPython 3.11 (CPython gh-106883, gh-116969).

On 3.11, ``sys._current_frames()`` holds the interpreter's thread-state list lock
(``HEAD_LOCK``) while it makes the frame objects, and making an object can start a
collection there. The collection then either frees a ``threading.local`` in a
reference cycle, whose clean-up takes that same lock (the thread waits for itself),
or runs a finalizer that lets another thread take the GIL, such as a thread that is
ending, which holds the GIL while it waits for the lock. Either way the process stops
for good, holding the GIL: its Dask worker does not answer and its rank's heartbeat
stops.

Dask's worker calls ``sys._current_frames()`` every 10 ms for its profiler
(``distributed.worker.profile.interval``), and a rank starts and ends threads all the
time (the data path's reader threads, a ``DataLoader``'s pin-memory thread, ...): a
rank on 3.11 hung so, now and then, "sent nothing for 30s" with faulthandler showing
``Garbage-collecting`` in ``Worker.trigger_profile``. CPython's own fix turns the
collector off for the duration of the call, where 3.12 does not collect on allocation
at all. :func:`install` does the same for every caller in a worker process (the embedded
cluster's worker preload at its start; the runner when a rank starts) by putting
:func:`current_frames` in ``sys._current_frames``' place (on 3.11 only;
``TUNEPLAT_FRAMES_GUARD=0`` leaves it as it is); tuneplat's own callers use
:func:`current_frames` directly.

A program that turns the collector off from another thread during the microseconds
of a call has it turned on again at the call's end; that is the price of the fix.
"""

from __future__ import annotations

import gc
import sys
import threading
import types
from typing import Callable

from tuneplat._settings import env_str

__all__ = ["affected", "current_frames", "install"]

_lock = threading.RLock()  # (re-entrant: a Python signal handler may call it again in the thread inside)
_original: Callable[[], dict[int, types.FrameType]] = sys._current_frames
_installed = False


def affected(version: tuple[int, ...] | None = None, implementation: str | None = None) -> bool:
    """Whether this CPython can collect garbage inside ``sys._current_frames()`` (3.11: allocations collect, and
    the frames are made under the thread-state lock; 3.10 made no objects there, 3.12 collects only between
    bytecodes)."""
    version = tuple(sys.version_info[:3]) if version is None else version
    implementation = sys.implementation.name if implementation is None else implementation
    return implementation == "cpython" and tuple(version[:2]) == (3, 11)


_AFFECTED = affected()


def current_frames() -> dict[int, types.FrameType]:
    """``sys._current_frames()``, with the collector off while it runs where that call can deadlock."""
    if not _AFFECTED:
        return _original()
    with _lock:  # (two callers at once: the first to finish must not turn the collector on under the other)
        enabled = gc.isenabled()
        gc.disable()
        try:
            return _original()
        finally:
            if enabled:
                gc.enable()


def install() -> bool:
    """Put :func:`current_frames` in ``sys._current_frames``' place in this process, where the running Python needs
    it; True when it is in place."""
    global _installed
    with _lock:
        if _installed or not _AFFECTED:
            return _installed
        if env_str("TUNEPLAT_FRAMES_GUARD") == "0":
            return False
        sys._current_frames = current_frames
        _installed = True
        return True
