"""``LightGBMConfig``: every rank learns the group's ``machines`` list for LightGBM's own network."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from .._backend import Backend, BackendConfig, RankGroup

__all__ = ["LightGBMConfig", "get_network_params"]

logger = logging.getLogger("tuneplat")

_lock = threading.Lock()
_network_params: dict[str, Any] | None = None


def _set_network_params(params: dict[str, Any] | None) -> None:
    global _network_params
    with _lock:
        _network_params = dict(params) if params is not None else None


def get_network_params() -> dict[str, Any]:
    """LightGBM's network parameters for this rank: ``machines``, ``local_listen_port``, ``num_machines``.

    Add them to the ``params`` of ``lightgbm.train`` inside a
    :class:`LightGBMTrainer`'s function (with ``"tree_learner": "data_parallel"``
    and ``"pre_partition": True``), as in Ray. ``machines`` lists every rank's
    ``host:port`` in rank order, each a port that was free on that rank's Dask
    worker address; ``local_listen_port`` is this rank's.

    Returns:
        The parameters, or ``{}`` (with a warning) outside a LightGBMTrainer's rank.

    Example:
        >>> params = {"objective": "binary", "tree_learner": "data_parallel",  # doctest: +SKIP
        ...           "pre_partition": True, **tuneplat.train.lightgbm.get_network_params()}
    """
    with _lock:
        if not _network_params:
            logger.warning("tuneplat: `tuneplat.train.lightgbm.get_network_params` was called outside the training "
                           "function of a `tuneplat.train.lightgbm.LightGBMTrainer`: this process knows no group of "
                           "ranks, so it returns an empty dict.")
            return {}
        return dict(_network_params)


@dataclasses.dataclass
class LightGBMConfig(BackendConfig):
    """How the ranks of a :class:`LightGBMTrainer` find each other (``ray.train.lightgbm.LightGBMConfig``).

    Each rank takes a free port on its Dask worker's address; the group
    gathers them into LightGBM's ``machines`` list, which
    :func:`get_network_params` hands to ``lightgbm.train``. LightGBM then opens
    its own connections between the ranks (its socket network).
    """

    @property
    def backend_cls(self) -> type[Backend]:
        return _LightGBMBackend

    @property
    def framework(self) -> str:
        return "lightgbm"

    def to_dict(self) -> dict[str, Any]:
        return {}


class _LightGBMBackend(Backend):
    def on_start(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        port = worker_group.free_port()
        peers = worker_group.all_gather([worker_group.host, port])
        machines = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in peers)
        _set_network_params({"num_machines": worker_group.world_size, "local_listen_port": port,
                             "machines": machines})

    def on_shutdown(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        _set_network_params(None)
