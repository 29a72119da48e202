"""Horovod is not ported (``ray.train.horovod``): Horovod is unmaintained, and Ray Train V2 refuses it too.

Horovod's last release is 0.28.1 (June 2023); Ray Train V2's ``HorovodTrainer``
raises on construction. Move the loop to the framework's own data parallelism
(``docs/frameworks.md``, "Horovod"): PyTorch ``hvd.DistributedOptimizer`` ->
:class:`tuneplat.train.torch.TorchTrainer` with ``prepare_model`` (DDP);
Keras ``hvd.DistributedOptimizer`` -> :class:`tuneplat.train.tensorflow.TensorflowTrainer`
with ``tf.distribute.MultiWorkerMirroredStrategy``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HorovodConfig", "HorovodTrainer"]

_MESSAGE = ("Horovod is unmaintained (last release 0.28.1, June 2023) and tuneplat does not run it, as Ray Train V2 "
            "does not: use TorchTrainer (hvd.DistributedOptimizer -> tuneplat.train.torch.prepare_model, DDP) or "
            "TensorflowTrainer (-> tf.distribute.MultiWorkerMirroredStrategy); docs/frameworks.md, 'Horovod'.")


class HorovodTrainer:
    """Refused with the migration path (Ray Train V2's ``HorovodTrainer`` raises too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise DeprecationWarning(_MESSAGE)


class HorovodConfig:
    """Refused with the migration path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise DeprecationWarning(_MESSAGE)
