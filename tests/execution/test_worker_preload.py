"""The embedded cluster's worker preload keeps Dask's shutdown races out of the user's terminal, and only those."""

from __future__ import annotations

import logging
import sys
import types

from distributed.comm.core import CommClosedError
from distributed.core import Status

from tuneplat.execution._worker_preload import _CloseRace

HEARTBEAT = "Failed to communicate with scheduler during heartbeat."


def _record(msg: str, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = None
    if exc is not None:
        try:
            raise exc
        except BaseException:  # noqa: BLE001 - the record carries it, as logger.exception's does
            exc_info = sys.exc_info()
    return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg, None, exc_info)


def test_heartbeat_error_of_a_closing_worker_is_dropped_of_a_running_one_kept():
    worker = types.SimpleNamespace(status=Status.running)
    keep = _CloseRace(worker)
    closed = CommClosedError("in <TLS (closed) local=tls://127.0.0.1:1 remote=tls://127.0.0.1:2>: Stream is closed")
    # a running worker that cannot reach its scheduler: the user must see it
    assert keep.filter(_record(HEARTBEAT, closed))
    for status in (Status.closing, Status.closing_gracefully, Status.closed, Status.failed):
        worker.status = status  # the scheduler said "missing", the worker closes, its nanny is gone
        assert not keep.filter(_record(HEARTBEAT, closed)), status
    # other errors of a closing worker still show
    assert keep.filter(_record("Unexpected exception during heartbeat. Closing worker.", RuntimeError("x")))
    # no worker known (a preload called without one): nothing is taken for closing
    assert _CloseRace(None).filter(_record(HEARTBEAT, closed))


def test_tls_half_shut_race_is_dropped_whatever_the_status():
    worker = types.SimpleNamespace(status=Status.running)
    race = ValueError("IOStream is not idle; cannot convert to SSL")
    assert not _CloseRace(worker).filter(_record(HEARTBEAT, race))
    assert _CloseRace(worker).filter(_record(HEARTBEAT, OSError("connection refused")))
