"""``TensorflowTrainer``: a :class:`~tuneplat.train.DataParallelTrainer` whose ranks get ``TF_CONFIG``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._trainer import DataParallelTrainer
from ._config import TensorflowConfig

__all__ = ["TensorflowTrainer"]


class TensorflowTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker(config)`` on ``scaling_config.num_workers`` TensorFlow ranks (Ray Train V2's form).

    Each rank gets ``TF_CONFIG`` (see :class:`TensorflowConfig`) before the
    function starts, so ``tf.distribute.MultiWorkerMirroredStrategy()`` inside it
    forms one group across the Dask workers; report with
    :class:`tuneplat.train.tensorflow.keras.ReportCheckpointCallback` or
    ``tuneplat.train.report``.

    Args:
        train_loop_per_worker: the function each rank runs (``fn()`` or ``fn(config)``).
        train_loop_config: its config.
        tensorflow_config: a :class:`TensorflowConfig` (the default one if None).
        scaling_config, run_config, datasets, dataset_config: as for :class:`~tuneplat.train.torch.TorchTrainer`.

    Example:
        >>> trainer = TensorflowTrainer(train_func, scaling_config=ScalingConfig(num_workers=2))  # doctest: +SKIP
        >>> result = trainer.fit()  # doctest: +SKIP
    """

    _name = "TensorflowTrainer"

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: Mapping[str, Any] | None = None,
                 tensorflow_config: TensorflowConfig | None = None, scaling_config: Any = None,
                 dataset_config: Any = None, run_config: Any = None, datasets: Any = None, client: Any = None,
                 metadata: Any = None, resume_from_checkpoint: Any = None, backend_config: Any = None,
                 validation_config: Any = None) -> None:
        config = tensorflow_config if tensorflow_config is not None else backend_config
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, scaling_config=scaling_config,
                         run_config=run_config, datasets=datasets, client=client, metadata=metadata,
                         resume_from_checkpoint=resume_from_checkpoint, dataset_config=dataset_config,
                         backend_config=config if config is not None else TensorflowConfig(),
                         validation_config=validation_config)

    def _check_backend_config(self, config: Any) -> Any:
        if not isinstance(config, TensorflowConfig):
            raise TypeError("tensorflow_config must be a tuneplat.train.tensorflow.TensorflowConfig(), got "
                            f"{type(config).__name__}")
        return config

    @property
    def tensorflow_config(self) -> TensorflowConfig:
        """The trainer's :class:`TensorflowConfig`."""
        return self.backend_config  # type: ignore[no-any-return]
