"""Hugging Face ``transformers.Trainer`` across a trial's ranks (``ray.train.huggingface.transformers``).

Example (Ray's "Get started with Hugging Face Transformers", imports changed):
    >>> from tuneplat.train import ScalingConfig  # doctest: +SKIP
    >>> from tuneplat.train.torch import TorchTrainer
    >>> import tuneplat.train.huggingface.transformers
    >>> def train_func():
    ...     trainer = transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=val)
    ...     trainer.add_callback(tuneplat.train.huggingface.transformers.RayTrainReportCallback())
    ...     trainer = tuneplat.train.huggingface.transformers.prepare_trainer(trainer)
    ...     trainer.train()
    >>> TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2)).fit()

Importing this module imports ``transformers``; without the ``huggingface`` extra it
raises an ImportError that says so.
"""

from __future__ import annotations

from .._extras_check import check as _check

_check()

from ._callback import RayTrainReportCallback  # noqa: E402
from ._prepare import prepare_trainer  # noqa: E402
from ._trainer import TransformersTrainer  # noqa: E402

__all__ = ["RayTrainReportCallback", "TransformersTrainer", "prepare_trainer"]
