"""``JaxTrainer``: a :class:`~tuneplat.train.DataParallelTrainer` whose ranks run inside ``jax.distributed``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._trainer import DataParallelTrainer
from ._config import JaxConfig

__all__ = ["JaxTrainer"]


class JaxTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker(config)`` on ``scaling_config.num_workers`` JAX processes (``ray.train.v2.jax``).

    With more than one rank, each has called ``jax.distributed.initialize``
    before the function starts (coordinator on rank 0; see :class:`JaxConfig`):
    ``jax.process_index()``, ``jax.process_count()`` and ``jax.devices()`` (all
    processes' devices) are set, and collectives span the ranks.

    Args:
        train_loop_per_worker: the function each rank runs (``fn()`` or ``fn(config)``).
        train_loop_config: its config.
        jax_config: a :class:`JaxConfig` (default: from ``scaling_config.use_gpu``).
        scaling_config, run_config, datasets, dataset_config: as for :class:`~tuneplat.train.torch.TorchTrainer`.

    Example:
        >>> JaxTrainer(train_func, scaling_config=ScalingConfig(num_workers=2)).fit()  # doctest: +SKIP
    """

    _name = "JaxTrainer"

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: Mapping[str, Any] | None = None,
                 jax_config: JaxConfig | None = None, scaling_config: Any = None, dataset_config: Any = None,
                 run_config: Any = None, datasets: Any = None, client: Any = None, metadata: Any = None,
                 resume_from_checkpoint: Any = None, backend_config: Any = None,
                 validation_config: Any = None) -> None:
        config = jax_config if jax_config is not None else backend_config
        if config is None:
            config = JaxConfig(use_tpu=bool(getattr(scaling_config, "use_tpu", False)),
                               use_gpu=bool(getattr(scaling_config, "use_gpu", False)))
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, scaling_config=scaling_config,
                         run_config=run_config, datasets=datasets, client=client, dataset_config=dataset_config,
                         metadata=metadata, resume_from_checkpoint=resume_from_checkpoint, backend_config=config,
                         validation_config=validation_config)

    def _check_backend_config(self, config: Any) -> Any:
        if not isinstance(config, JaxConfig):
            raise TypeError(f"jax_config must be a tuneplat.train.jax.JaxConfig(...), got {type(config).__name__}")
        return config

    @property
    def jax_config(self) -> JaxConfig:
        """The trainer's :class:`JaxConfig`."""
        return self.backend_config  # type: ignore[no-any-return]
