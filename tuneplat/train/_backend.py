"""The framework seam of a trainer's ranks (Ray Train's ``BackendConfig`` / ``Backend``).

A trainer names a :class:`BackendConfig`; its ``backend_cls`` is instantiated
in every rank, whose :meth:`Backend.on_start` runs before the user's training
function and :meth:`Backend.on_shutdown` after it, on every attempt of the
trial (retries and resumes included). Both get the rank's :class:`RankGroup`:
its rank and world size, its host address, and the group's rendezvous: for
torch's backend rank 0's ``TCPStore``, whose address the tuner relays to the
other ranks (``execution/_rank_group.py``); for every other backend the tuner
itself, on each rank's authenticated connection (no torch import, no store).
Small values travel between ranks with
:meth:`RankGroup.all_gather` / :meth:`RankGroup.broadcast`; a framework then
starts its own distributed launch (xgboost's tracker, LightGBM's
``machines``, ``TF_CONFIG``, ``jax.distributed``) from them. No torch process
group is joined unless the backend is torch's (:class:`tuneplat.train.torch.TorchConfig`,
the default of :class:`tuneplat.train.TorchTrainer`).

The worker group (``execution/``) knows nothing of any framework: it makes the
rendezvous, calls the two hooks and closes the rendezvous.

Example:
    >>> class PortsConfig(BackendConfig):  # doctest: +SKIP
    ...     @property
    ...     def backend_cls(self):
    ...         return PortsBackend
    >>> class PortsBackend(Backend):  # doctest: +SKIP
    ...     def on_start(self, worker_group, backend_config):
    ...         port = worker_group.free_port()
    ...         peers = worker_group.all_gather(f"{worker_group.host}:{port}")
    ...         os.environ["MY_FRAMEWORK_PEERS"] = ",".join(peers)
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .._settings import env_seconds

__all__ = ["Backend", "BackendConfig", "RankGroup", "get_rank_group"]

logger = logging.getLogger("tuneplat")


class BackendConfig:
    """What a trainer's ranks set up around the training function (``ray.train.backend.BackendConfig``).

    Subclass it with the framework's settings as dataclass fields and return
    your :class:`Backend` subclass from :attr:`backend_cls`. The plain
    ``BackendConfig()`` sets nothing up (its ranks share only the rendezvous).
    A ``timeout_s`` field, when a subclass has one, is how long a rank waits
    for its peers at the rendezvous and in :meth:`RankGroup.all_gather` /
    :meth:`RankGroup.broadcast` (else the trial's process-group timeout, 60 s).
    """

    @property
    def backend_cls(self) -> type[Backend]:
        """The :class:`Backend` each rank instantiates."""
        return Backend

    @property
    def train_func_context(self) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        """What makes the context the training function runs in, in every rank (Ray's hook; none by default)."""
        return contextlib.nullcontext

    @property
    def framework(self) -> str | None:
        """The framework's name (Ray's; None for the plain config)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """The config's settings as plain values (Ray's; empty here)."""
        return {}


class Backend:
    """Per-rank set-up and tear-down of a framework (``ray.train.backend.Backend``).

    Unlike Ray's, where the hooks run on the driver and reach the workers
    through the worker group, here both hooks run in every rank, with that
    rank's view of the group: the same code, without the remote calls.
    """

    #: accepted for Ray compatibility (each rank already sees the GPUs it was given)
    share_cuda_visible_devices: bool = False

    #: tuneplat's: whether a Dask worker process that ran a rank of this backend may run the next trial's rank. Ray
    #: makes new worker actors for every run; tuneplat keeps the worker processes, which the frameworks that clean
    #: up after themselves allow. A framework that leaves what it cannot take back (TensorFlow's collective server:
    #: threads, a listening port, memory, for the life of the process) sets this False: after its group ends, each
    #: of its workers is restarted by its nanny before anything else is placed there.
    reuses_worker_process: bool = True

    #: tuneplat's: whether a worker process whose rank was in a group that *failed* (a rank raised or died) may run
    #: the next trial's rank. A framework whose processes are ended by the framework itself some time after a peer
    #: died (JAX's coordination service ends every process of the group once it misses the dead one's heartbeats)
    #: sets this False: those workers are restarted at once, so that no trial is placed on a process about to end.
    reuses_worker_process_after_failure: bool = True

    def on_start(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        """Called in every rank, before the user's function (after the rendezvous)."""

    def on_training_start(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        """Called in every rank just before the user's function (after :meth:`on_start`)."""

    def on_shutdown(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        """Called in every rank after the user's function ended (returned, stopped or raised).

        ``worker_group.failed`` says whether the rank's attempt failed. An
        exception raised here is logged; it does not change the trial's outcome.
        """


class RankGroup:
    """One rank's view of its group: ranks, its host, and the group's rendezvous.

    Built by the rank before :meth:`Backend.on_start`; the training function
    reaches it with :func:`get_rank_group`. Values sent with
    :meth:`all_gather`/:meth:`broadcast` are small JSON values (strings,
    numbers, lists, dicts), and nothing received is unpickled.

    Two rendezvous carry them. torch's backend (``TorchConfig``, the default
    of ``TorchTrainer`` and of plain Tune trials) has rank 0's
    ``torch.distributed.TCPStore`` (:attr:`store`, :attr:`store_address`),
    on which its process group is made. Every other backend (XGBoost,
    LightGBM, TensorFlow, JAX, your own) has no store: each exchange travels
    on the rank's own authenticated (and, on a TLS cluster, encrypted)
    connection to the tuner, which answers every rank once all sent it
    (:meth:`~tuneplat.train._session.Session.gather`), so these ranks never
    import torch and open no extra listening port.
    """

    def __init__(self, spec: Any, store: Any = None, store_address: tuple[str, int] | None = None,
                 timeout_s: float = 60, relay: Callable[[int, str, float], list[str]] | None = None) -> None:
        self.spec = spec
        self.store = store
        self.store_address = store_address
        self.timeout_s = float(timeout_s)
        self.failed = False
        self._relay = relay
        self._calls = 0

    @property
    def rank(self) -> int:
        """This rank's index in the group (0 speaks for the group)."""
        return int(self.spec.rank)

    @property
    def world_size(self) -> int:
        """How many ranks the group has."""
        return int(self.spec.world_size)

    @property
    def local_rank(self) -> int:
        return int(self.spec.local_rank)

    @property
    def node_rank(self) -> int:
        return int(self.spec.node_rank)

    @property
    def host(self) -> str:
        """The address of this rank's Dask worker (where its framework should listen)."""
        return str(self.spec.host)

    def free_port(self) -> int:
        """A TCP port free on :attr:`host` now (the OS's choice; free again when returned)."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((self.host, 0))
            return int(s.getsockname()[1])

    def _key(self, kind: str, rank: int) -> str:
        return f"tuneplat/{kind}/{self._calls}/{rank}"

    def _get(self, key: str) -> Any:
        return json.loads(bytes(self.store.get(key)).decode("utf-8"))

    def _exchange(self, payload: str) -> list[Any]:
        """Every rank's ``payload`` of this exchange through the tuner's relay, decoded (rank order)."""
        assert self._relay is not None
        return [json.loads(p) for p in self._relay(self._calls, payload, self.timeout_s)]

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order (every rank must call it, in the same order).

        Raises:
            TypeError: ``value`` is not JSON-serialisable.
            TimeoutError: (no store) not every rank called it within the backend's ``timeout_s``.
        """
        payload = json.dumps(value)
        self._calls += 1
        if self.world_size == 1 or (self.store is None and self._relay is None):
            return [json.loads(payload)]
        if self._relay is not None:
            return self._exchange(payload)
        self.store.set(self._key("gather", self.rank), payload)
        return [json.loads(payload) if r == self.rank else self._get(self._key("gather", r))
                for r in range(self.world_size)]

    def broadcast(self, value: Any = None, src: int = 0) -> Any:
        """Rank ``src``'s ``value`` on every rank (every rank must call it, in the same order)."""
        if self._relay is not None and self.world_size > 1:  # (the other ranks' values are not sent)
            payload = json.dumps(value) if self.rank == src else "null"
            self._calls += 1
            return self._exchange(payload)[src]
        self._calls += 1
        if self.rank == src or self.world_size == 1 or self.store is None:
            payload = json.dumps(value)
            if self.store is not None and self.world_size > 1:
                self.store.set(self._key("bcast", src), payload)
            return json.loads(payload)
        return self._get(self._key("bcast", src))

    def barrier(self) -> None:
        """Wait until every rank reached this point."""
        self.all_gather(None)

    def close(self) -> None:
        """Drop this rank's handle on the store; rank 0's ends the store once every rank has (see ``_leave_store``)."""
        self._relay = None
        store, self.store = self.store, None
        if store is not None:
            _leave_store(store, self.spec)


def _store_linger_s() -> float:
    """The longest rank 0 keeps the group's rendezvous store open for ranks that have not finished (seconds)."""
    return env_seconds("TUNEPLAT_STORE_LINGER_S", 60)


def _exit_key(rank: int) -> str:
    return f"tuneplat/exit/{rank}"


def _leave_store(store: Any, spec: Any) -> None:
    """The group's final barrier, on the rendezvous store that rank 0 hosts.

    A rank that finished says so in the store; rank 0 keeps its store open until
    every other rank has said so (``TUNEPLAT_STORE_LINGER_S`` at most: a rank that died never
    will). Without it, rank 0 closing the store as its function returns makes a
    slower rank still using it (in ``init_process_group``'s store barrier, or any
    store operation) fail with ``DistNetworkError: Failed to recv``. Rank 0 waits in
    a thread of its own, so its task (and its worker slot) is free at once.
    """
    if store is None:
        return
    if spec.rank != 0:
        try:
            store.set(_exit_key(spec.rank), b"1")
        except Exception:  # noqa: BLE001 - rank 0's store is gone already (it waited its linger, or died)
            logger.debug("tuneplat: trial %s rank %d: the rendezvous store is gone", spec.trial_id, spec.rank,
                         exc_info=True)
        return
    others = [_exit_key(r) for r in range(1, spec.world_size)]
    if not others:
        return

    linger_s = _store_linger_s()

    def linger(store: Any) -> None:  # (the thread holds the last reference: the store's server closes after it)
        try:
            store.wait(others, timedelta(seconds=linger_s))
        except Exception:  # noqa: BLE001 - a rank that never finished (it died, or runs on past the bound)
            logger.debug("tuneplat: trial %s: not every rank left the rendezvous store in %s s", spec.trial_id,
                         linger_s, exc_info=True)

    threading.Thread(target=linger, args=(store,), name=f"tuneplat-store-{spec.trial_id}", daemon=True).start()


def get_rank_group() -> RankGroup | None:
    """The calling rank's :class:`RankGroup` (None outside a trainer's rank)."""
    from ._session import current_session

    session = current_session()
    return getattr(session, "backend_group", None) if session is not None else None
