"""The cluster a search runs on, and the embedded one kept between fits (as joblib's loky keeps its workers).

Order (Dask's convention, as :class:`tuneplat.Tuner`): the search's ``client=``;
else the process's active ``distributed.Client``; else an embedded
LocalCluster. Starting one costs 1-2 s on a quiet machine (much more on a busy
one), and its fresh worker processes import scikit-learn again, which a
scikit-learn user fitting several searches (nested cross-validation, a loop
over estimators) would pay every time. So the embedded cluster is kept after a
fit and shut down when it has been idle for ``TUNEPLAT_SKLEARN_IDLE_S``
seconds (300, loky's default; 0 closes it after every fit) or when the
interpreter exits. A second search fitted while the kept cluster is busy (two
threads) gets a cluster of its own, closed after its fit.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from .._settings import env_seconds
from ..execution._cluster import Cluster, scheduler_workers

__all__ = ["cluster_for", "shutdown"]

logger = logging.getLogger("tuneplat")

_lock = threading.Lock()
_kept: Cluster | None = None
_in_use = False
_timer: threading.Timer | None = None


def _idle_s() -> float:
    return env_seconds("TUNEPLAT_SKLEARN_IDLE_S", 300.0)


def _alive(cluster: Cluster) -> bool:
    try:
        return cluster.client.status == "running" and bool(scheduler_workers(cluster.client))
    except Exception:  # noqa: BLE001 - a cluster that cannot answer is not reused
        return False


def _has_active_client() -> bool:
    try:
        from distributed import get_client

        get_client()
        return True
    except ValueError:
        return False


@contextlib.contextmanager
def cluster_for(client: Any) -> Iterator[Cluster]:
    """The cluster for one ``fit``: the given or active client's, else the kept embedded one (or a new one)."""
    global _kept, _in_use, _timer
    if client is not None or _has_active_client():
        yield Cluster(client)  # not ours to close
        return
    mine = None
    with _lock:
        if _timer is not None:
            _timer.cancel()
            _timer = None
        if not _in_use and _kept is not None and _alive(_kept):
            mine, _in_use = _kept, True
        elif not _in_use and _kept is not None:
            _close(_kept)
            _kept = None
    shared = mine is not None
    if mine is None:
        mine = Cluster()
        with _lock:
            if not _in_use and _idle_s() > 0:
                _kept, _in_use, shared = mine, True, True
    try:
        yield mine
    finally:
        if not shared:
            _close(mine)
        else:
            with _lock:
                _in_use = False
                idle = _idle_s()
                if idle <= 0:
                    _close(mine)
                    _kept = None
                else:
                    _timer = threading.Timer(idle, _expire)
                    _timer.daemon = True
                    _timer.start()


def _close(cluster: Cluster) -> None:
    try:
        cluster.close()
    except Exception:  # noqa: BLE001 - shutting down anyway
        logger.debug("tuneplat: closing the embedded cluster failed", exc_info=True)


def _expire() -> None:
    global _kept, _timer
    with _lock:
        if _in_use or _kept is None:
            return
        kept, _kept, _timer = _kept, None, None
    _close(kept)


def shutdown() -> None:
    """Close the kept embedded cluster now (also done when idle, and at interpreter exit)."""
    global _kept, _timer
    with _lock:
        if _timer is not None:
            _timer.cancel()
            _timer = None
        kept, _kept = _kept, None
    if kept is not None:
        _close(kept)


atexit.register(shutdown)
