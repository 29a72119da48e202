"""``XGBoostConfig``: each rank enters xgboost's own collective, started by rank 0's ``RabitTracker``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .._backend import Backend, BackendConfig, RankGroup, get_rank_group

__all__ = ["XGBoostConfig", "get_xgboost_args"]

logger = logging.getLogger("tuneplat")

_ORPHANS: list[Any] = []  # trackers whose wait thread still runs (kept alive until the process ends)
_args_lock = threading.Lock()
_xgboost_args: dict[str, Any] = {}


def _set_xgboost_args(args: dict[str, Any]) -> None:
    global _xgboost_args
    with _args_lock:
        _xgboost_args = dict(args)


def get_xgboost_args() -> dict[str, Any]:
    """The ``xgboost.collective.CommunicatorContext`` arguments of the calling rank's group ({} outside one)."""
    with _args_lock:
        return dict(_xgboost_args)


@dataclasses.dataclass
class XGBoostConfig(BackendConfig):
    """How the ranks of an :class:`XGBoostTrainer` train one model together (``ray.train.xgboost.XGBoostConfig``).

    Rank 0 starts xgboost's ``RabitTracker`` on its Dask worker's address
    (port chosen by the OS); the tracker's address reaches the other ranks
    through the group's rendezvous; every rank runs the training function
    inside ``xgboost.collective.CommunicatorContext`` with its rank as task
    id, so xgboost's ranks are tuneplat's. ``xgboost.train`` then builds one
    model from every rank's rows (histograms are allreduced each round).

    Args:
        xgboost_communicator: ``"rabit"`` (the only one, as in Ray).

    Example:
        >>> trainer = XGBoostTrainer(train_fn, xgboost_config=XGBoostConfig(),  # doctest: +SKIP
        ...                          scaling_config=ScalingConfig(num_workers=2))
    """

    xgboost_communicator: str = "rabit"

    def __post_init__(self) -> None:
        if self.xgboost_communicator != "rabit":
            raise ValueError(f"The value of `XGBoostConfig.xgboost_communicator` is {self.xgboost_communicator!r}, "
                             "but must be 'rabit'.")

    @property
    def backend_cls(self) -> type[Backend]:
        return _XGBoostRabitBackend

    @property
    def framework(self) -> str:
        return "xgboost"

    @property
    def train_func_context(self) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        return _communicator_context

    def to_dict(self) -> dict[str, Any]:
        return {"xgboost_communicator": self.xgboost_communicator}


@contextlib.contextmanager
def _communicator_context() -> Iterator[None]:
    """xgboost's collective around the training function when the group has several ranks (Ray V2's)."""
    group = get_rank_group()
    if group is None or group.world_size <= 1:
        yield
        return
    from xgboost.collective import CommunicatorContext

    with CommunicatorContext(**get_xgboost_args()):
        yield


class _XGBoostRabitBackend(Backend):
    """Rank 0 runs the tracker; every rank learns its address (and its own task id)."""

    def __init__(self) -> None:
        self._tracker: Any = None
        self._wait_thread: threading.Thread | None = None

    def on_start(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        _set_xgboost_args({})
        if worker_group.world_size <= 1:
            return
        args = None
        if worker_group.rank == 0:
            from xgboost.tracker import RabitTracker

            # sortby="task": xgboost orders its ranks by the task ids below, which carry tuneplat's ranks
            self._tracker = RabitTracker(n_workers=worker_group.world_size, host_ip=worker_group.host, sortby="task")
            self._tracker.start()
            self._wait_thread = threading.Thread(target=self._tracker.wait_for, daemon=True,
                                                 name="tuneplat-xgboost-tracker")
            self._wait_thread.start()
            args = {"n_workers": worker_group.world_size, **self._tracker.worker_args()}
            logger.debug("tuneplat: xgboost RabitTracker listening: %s", args)
        args = dict(worker_group.broadcast(args))
        trial = getattr(worker_group.spec, "trial_id", "")
        args["dmlc_task_id"] = f"[xgboost.tuneplat-rank={worker_group.rank:08}]:{trial}"
        _set_xgboost_args(args)

    def on_shutdown(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        _set_xgboost_args({})
        thread, self._wait_thread = self._wait_thread, None
        if thread is not None:
            thread.join(timeout=5)
            if thread.is_alive():  # a rank that never finalised: the daemon thread ends with the process
                logger.warning("tuneplat: xgboost's RabitTracker did not finish within 5 s of the end of the "
                               "training function on rank 0")
                _ORPHANS.append(self._tracker)  # freeing it under its waiting thread would crash the process
        self._tracker = None
