"""A Dask worker preload for tests: holds one worker's start until the test lets it go.

``TUNEPLAT_TEST_HOLD_WORKER="NAME@PORT"``: the worker named NAME connects to
127.0.0.1:PORT before it registers with the scheduler, and waits there until
the test closes that listening socket (the kernel then resets the waiting
connection, or refuses a later one). A worker held longer than
``HOLD_LIMIT_S`` fails to start: a tuner that waits for every worker before
its first trial fails the test instead of hanging.
"""

from __future__ import annotations

import os
import socket
from typing import Any

HOLD_LIMIT_S = 120.0


def dask_setup(worker: Any) -> None:
    spec = os.environ.get("TUNEPLAT_TEST_HOLD_WORKER", "")
    if "@" not in spec:
        return
    name, port = spec.split("@", 1)
    if str(worker.name) != name:
        return
    try:
        conn = socket.create_connection(("127.0.0.1", int(port)), timeout=HOLD_LIMIT_S)
    except OSError:  # the test already let go (its listener is closed)
        return
    with conn:
        try:
            conn.recv(1)  # returns (or raises) when the test closes its listener
        except TimeoutError:
            raise RuntimeError(f"worker {name} was held {HOLD_LIMIT_S:.0f}s: nothing ran before it joined") from None
        except OSError:
            return
