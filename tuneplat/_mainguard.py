"""Scripts that fit at their top level, outside ``if __name__ == "__main__":``, as Ray's snippets do.

The embedded Dask ``LocalCluster`` starts its worker processes with
``spawn``. By default, ``multiprocessing`` makes each spawned child run the
parent's main script again (as ``__mp_main__``), so that objects pickled by
reference to ``__main__`` can be found there; a script whose ``fit()`` is at
its top level would then fit again in every worker. Ray's workers never import
the driver's script: functions and classes from ``__main__`` travel by value
(cloudpickle). tuneplat does the same for the worker processes of the clusters
it starts itself: :func:`embedded_workers` tells ``multiprocessing`` not to
run the main script in them (and Dask, like tuneplat's own channel, pickles
anything from ``__main__`` by value). A guarded and an unguarded script then
start their workers alike, and equally fast.

What is left of the old refusal is :func:`check_main_guard`: a ``fit()`` run
while some *other* spawned process imports the script (the user's own
``multiprocessing`` pool, or their own ``LocalCluster`` created at the top
level) gets one clear error instead of pages of tracebacks.
"""

from __future__ import annotations

import ast
import contextlib
import multiprocessing
import multiprocessing.spawn
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["check_main_guard", "embedded_workers", "unguarded_call_site"]

#: the name Dask's nanny gives the worker process it spawns (distributed/nanny.py)
_DASK_WORKER_PROCESS = "Dask Worker process (from Nanny)"

_lock = threading.Lock()
_active = 0  # embedded clusters of ours alive in this process (their nannies may respawn a worker at any time)
_original: Callable[[str], dict[str, Any]] | None = None


def _preparation_data(name: str) -> dict[str, Any]:
    assert _original is not None
    data = _original(name)
    if _active > 0 and name == _DASK_WORKER_PROCESS:
        # the child keeps sys.path, the working directory and argv; it only does not run the main script
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


def _install() -> None:
    global _original
    if _original is None:
        _original = multiprocessing.spawn.get_preparation_data
        multiprocessing.spawn.get_preparation_data = _preparation_data  # type: ignore[assignment]


@contextlib.contextmanager
def embedded_workers() -> Iterator[None]:
    """While inside, Dask worker processes spawned by this process do not run the ``__main__`` script.

    Hold it for the whole life of an embedded cluster: its nannies start
    replacement workers (after a crash, an ``os._exit``) at any time.
    """
    global _active
    with _lock:
        _install()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1


def _tests_main(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(test))


def unguarded_call_site() -> tuple[str, int] | None:
    """``(script, line)`` when the caller runs in the ``__main__`` script's top level outside a main guard."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not path.endswith(".py") or not os.path.isfile(path):
        return None  # an interactive session, a notebook, python -c: nothing is imported again
    frame: Any = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _tests_main(node.test) and node.lineno <= line <= (node.end_lineno or line):
            return None
    return path, line


def check_main_guard(client: Any, address: str | None, caller: str = "Tuner.fit()") -> None:
    """Refuse a ``fit()`` that runs while a spawned process imports the main script.

    tuneplat's own workers never import it (:func:`embedded_workers`), so this
    only happens in a process the user spawned: their own ``multiprocessing``
    pool or ``LocalCluster`` started at the top level of an unguarded script.

    Args:
        client, address: kept for the callers' signature (a given cluster needs no check either).
        caller: what the user called (``"Tuner.fit()"``, ``"TorchTrainer.fit()"``, ``"tune.run()"``).
    """
    del client, address
    if getattr(multiprocessing.current_process(), "_inheriting", False):  # we are a spawned child importing the script
        raise RuntimeError(
            f"tuneplat: {caller} ran while a process spawned by the script (a multiprocessing pool, or a Dask "
            "LocalCluster the script created itself) was starting and importing the main script again. Put that "
            "pool or cluster, and the code that fits, under `if __name__ == \"__main__\":`; or let tuneplat start "
            "its own cluster (it needs no guard), or connect to a running one: RunConfig(address=...).")
