"""Forks from a rank wait until CPython's thread-state lock is free (CPython gh-112275, Python 3.10.0-3.10.14, 3.11.0-3.11.9).

A process forked while another of its threads holds the interpreter's thread-state
list lock (``HEAD_LOCK``) inherits that lock held, and on these Pythons the child
takes it again in ``PyOS_AfterFork_Child`` before resetting it: the child hangs
before running a line of Python. In a rank, torch's gloo thread takes that lock
without the GIL each time it frees a collective's tensors (``~AsyncWork`` →
``gil_scoped_acquire`` → ``PyThreadState_New``), just as the rank's own thread
starts the next epoch's ``DataLoader`` worker processes, so now and then a loader
worker never starts and the rank waits for its first batch for ever (on 2 cores,
most runs of 300 such epochs hung: ``benchmarks/fork_guard.py``).

The fix in CPython 3.10.15 / 3.11.10 / 3.12 resets the lock first. On the affected
versions :func:`install` adds a before-fork hook that waits, giving up the GIL,
until the lock is free; it looks at the lock's semaphore and never takes the lock.
The fork follows within microseconds with the GIL held, and every holder but a
native thread making its thread state needs the GIL to take the lock, so only such
a thread taking it within those microseconds could still hang a child. The lock is
found through public functions (``PyInterpreterState_Head``/``_Main``): the hook is
installed only on Linux and where ``_PyRuntime.interpreters`` holds a semaphore
just before those two pointers, as in CPython 3.8-3.11; anything else leaves forks
as they are.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from typing import Callable

from tuneplat._settings import env_str

__all__ = ["affected", "install"]

#: the first patch release of each minor version with CPython's own fix (3.12+ has it from 3.12.0)
_FIXED_IN = {(3, 10): 15, (3, 11): 10}
#: how long a fork waits for the lock before going ahead anyway (a holder that long is not a thread-state change)
_WAIT_S = 2.0

_lock = threading.Lock()
_installed = False


def affected(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """True on the CPython releases whose forked children can hang on the inherited lock."""
    fixed = _FIXED_IN.get((version[0], version[1]))
    return sys.implementation.name == "cpython" and fixed is not None and version[2] < fixed


def _head_lock() -> int | None:
    """The address of ``_PyRuntime.interpreters.mutex``, or None where it cannot be found safely."""
    try:
        api = ctypes.PyDLL(None)  # the running interpreter's own symbols (functions called with the GIL held)
        runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
        head_of, main_of = api.PyInterpreterState_Head, api.PyInterpreterState_Main
    except (AttributeError, OSError, ValueError):
        return None
    head_of.restype = main_of.restype = ctypes.c_void_p
    head_of.argtypes = main_of.argtypes = []
    head, main = head_of(), main_of()
    if not head or not main:
        return None
    # struct pyinterpreters { PyThread_type_lock mutex; PyInterpreterState *head; PyInterpreterState *main; ... }
    # sits within the first words of _PyRuntimeState on 3.8-3.11
    words = (ctypes.c_void_p * 24).from_address(runtime)
    for i in range(1, 23):
        if words[i] == head and words[i + 1] == main and words[i - 1]:
            return int(words[i - 1])  # type: ignore[arg-type]
    return None


def _held_probe(mutex: int) -> Callable[[], bool] | None:
    """A look at whether the lock is held, without taking it: its POSIX semaphore's count (0: held, 1: free).

    Looking, not taking: a hook that took the lock could lose the GIL between taking and
    giving it back, to a thread that holds the GIL and waits for the lock (a thread
    starting or ending, ``sys._current_frames()``): both would wait for ever.
    """
    if not sys.platform.startswith("linux"):  # CPython's locks are POSIX semaphores on Linux (USE_SEMAPHORES)
        return None
    try:
        sem_getvalue = ctypes.CDLL(None).sem_getvalue
    except (AttributeError, OSError):
        return None
    sem_getvalue.restype, sem_getvalue.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    value = ctypes.c_int(-1)

    def held() -> bool:
        return sem_getvalue(mutex, ctypes.byref(value)) == 0 and value.value == 0

    if sem_getvalue(mutex, ctypes.byref(value)) != 0 or value.value not in (0, 1):
        return None  # not a semaphore of a lock: leave forks alone
    return held


def install() -> bool:
    """Add the before-fork wait to this process once, where the running Python needs it; True when it is in place.

    ``TUNEPLAT_FORK_GUARD=0`` leaves forks as they are.
    """
    global _installed
    with _lock:
        if _installed or not affected() or not hasattr(os, "register_at_fork"):
            return _installed
        if env_str("TUNEPLAT_FORK_GUARD") == "0":
            return False
        mutex = _head_lock()
        held = _held_probe(mutex) if mutex is not None else None
        if held is None:
            return False

        def wait_until_free() -> None:
            deadline = time.monotonic() + _WAIT_S
            while held() and time.monotonic() < deadline:
                time.sleep(0.0002)  # gives up the GIL, which the holder may need to finish

        os.register_at_fork(before=wait_until_free)
        _installed = True
        return True

