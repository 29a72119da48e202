"""``JaxConfig``: ``jax.distributed.initialize`` done for every rank (coordinator on rank 0)."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import sys
from typing import Any

from .._backend import Backend, BackendConfig, RankGroup

__all__ = ["JaxConfig"]

logger = logging.getLogger("tuneplat")


@dataclasses.dataclass
class JaxConfig(BackendConfig):
    """How the ranks of a :class:`JaxTrainer` join one JAX cluster (``ray.train.v2.jax.JaxConfig``).

    Before the training function runs, every rank of a group of more than one
    calls ``jax.distributed.initialize(coordinator, num_processes, process_id)``
    with the coordinator on rank 0 (its Dask worker's address, a port chosen
    free there); after it returns, ``jax.distributed.shutdown()``. On CPU ranks
    too (Ray initializes only for TPUs and GPUs): cross-process collectives
    (``psum`` over ``jax.devices()``) then run over gloo.

    Args:
        use_tpu: set ``JAX_PLATFORMS=tpu`` (unless already set).
        use_gpu: set ``JAX_PLATFORMS=cuda`` (unless already set) and give each
            process its rank's GPUs as ``local_device_ids``.

    Example:
        >>> JaxConfig(use_gpu=False)
        JaxConfig(use_tpu=False, use_gpu=False)
    """

    use_tpu: bool = False
    use_gpu: bool = False

    def __post_init__(self) -> None:
        for name in ("use_tpu", "use_gpu"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"The value of `JaxConfig.{name}` is {getattr(self, name)!r}, but must be a bool.")

    @property
    def backend_cls(self) -> type[Backend]:
        return _JaxBackend

    @property
    def framework(self) -> str:
        return "jax"

    def to_dict(self) -> dict[str, Any]:
        return {"use_tpu": self.use_tpu, "use_gpu": self.use_gpu}


class _JaxBackend(Backend):
    """``jax.distributed.initialize`` before the function (coordinator on rank 0), ``shutdown`` after."""

    # once a process of the group died, JAX's coordination service ends every other one (SIGABRT, "the JAX
    # distributed service detected fatal errors") when it has missed the dead one's heartbeats, tens of seconds
    # later, and jax.distributed.shutdown() waits for the dead one meanwhile: after a failed group its worker
    # processes are restarted at once, so no retry is placed on a process about to be ended (measured: a retry
    # after rank 0 failed started 62 s later before, the time JAX took to end rank 0's process)
    reuses_worker_process_after_failure = False

    def __init__(self) -> None:
        self._platforms_set = False
        self._initialized = False

    def on_start(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        config = backend_config if isinstance(backend_config, JaxConfig) else JaxConfig()
        platforms = os.environ.get("JAX_PLATFORMS", "").lower()
        if not platforms and (config.use_tpu or config.use_gpu):
            platforms = "tpu" if config.use_tpu else "cuda"
            os.environ["JAX_PLATFORMS"] = platforms
            self._platforms_set = True
        if worker_group.world_size <= 1:
            return
        own = f"{worker_group.host}:{worker_group.free_port()}" if worker_group.rank == 0 else None
        coordinator = str(worker_group.broadcast(own, src=0))
        import jax

        _fresh_backends(jax)
        kwargs: dict[str, Any] = {}
        spec = worker_group.spec
        if "cuda" in platforms.split(",") and spec.gpu_ids:
            kwargs["local_device_ids"] = list(spec.gpu_ids)
        params = inspect.signature(jax.distributed.initialize).parameters
        if worker_group.rank == 0 and "coordinator_bind_address" in params:
            kwargs["coordinator_bind_address"] = coordinator  # JAX's default binds every interface
        for name in ("initialization_timeout", "shutdown_timeout_seconds"):  # a missing peer: the group's timeout
            if name in params:
                kwargs[name] = max(int(worker_group.timeout_s), 1)
        jax.distributed.initialize(coordinator, worker_group.world_size, worker_group.rank, **kwargs)
        self._initialized = True
        logger.debug("tuneplat: rank %d joined jax.distributed at %s", worker_group.rank, coordinator)

    def on_shutdown(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        """Shut ``jax.distributed`` down and drop the backends, so the next trial of this process can initialize."""
        if self._platforms_set:
            os.environ.pop("JAX_PLATFORMS", None)
            self._platforms_set = False
        if not self._initialized:
            return
        self._initialized = False
        jax = sys.modules.get("jax")
        if jax is None:
            return
        try:
            jax.distributed.shutdown()
        except Exception:  # noqa: BLE001 - a peer already gone: the trial's outcome is decided
            logger.warning("tuneplat: rank %d: jax.distributed.shutdown() failed", worker_group.rank, exc_info=True)
        _fresh_backends(jax)


def _fresh_backends(jax: Any) -> None:
    """A worker process that ran JAX before (an earlier trial) has live backends, which ``initialize`` refuses."""
    try:
        from jax.extend.backend import clear_backends

        clear_backends()
    except Exception:  # noqa: BLE001 - an older JAX: initialize() says what is wrong
        logger.debug("tuneplat: could not clear JAX's backends", exc_info=True)
