"""A script that fits a Tuner at its top level, outside ``if __name__ == "__main__":``.

Ray scripts often do (Ray's workers never import the driver's script). The
embedded Dask ``LocalCluster`` starts its worker processes with ``spawn``,
which imports the script again in each worker; there the top-level ``fit()``
runs once more and every worker fails to start, with pages of Dask
tracebacks. :func:`check_main_guard` says what to change instead, before any
process is started.
"""

from __future__ import annotations

import ast
import os
import sys
from typing import Any

__all__ = ["check_main_guard", "unguarded_call_site"]

_ADVICE = ("Put the code that builds and fits the Tuner under `if __name__ == \"__main__\":` (Ray does not need "
           "this: tuneplat's embedded Dask cluster starts its worker processes with 'spawn', which imports the "
           "script again in each of them), or run on a running Dask cluster: Tuner(..., client=distributed.Client("
           "...)) or RunConfig(address=...).")


def _tests_main(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(test))


def unguarded_call_site() -> tuple[str, int] | None:
    """``(script, line)`` when the caller runs in the ``__main__`` script's top level outside a main guard."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not path.endswith(".py") or not os.path.isfile(path):
        return None  # an interactive session, a notebook, python -c: nothing is imported again
    frame = sys._getframe(1)
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


def check_main_guard(client: Any, address: str | None) -> None:
    """Raise a clear error where the embedded cluster's spawned workers would import this script's ``fit()`` again."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):  # we are that worker, importing the script
        raise RuntimeError("tuneplat: Tuner.fit() ran while a worker process was starting and importing the main "
                           "script. " + _ADVICE)
    if client is not None or address is not None:
        return
    try:
        from distributed import get_client

        get_client()
        return  # an active client: no cluster of ours is started
    except (ImportError, ValueError):
        pass
    import dask

    if dask.config.get("distributed.worker.multiprocessing-method", "spawn") == "fork":
        return
    site = unguarded_call_site()
    if site is not None:
        raise RuntimeError(f"tuneplat: Tuner.fit() is called at the top level of {site[0]} (line {site[1]}), outside "
                           "an `if __name__ == \"__main__\":` block. " + _ADVICE)
