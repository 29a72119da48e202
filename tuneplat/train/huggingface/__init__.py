"""Hugging Face Transformers inside tuneplat's worker groups (``tuneplat.train.huggingface``, like ``ray.train.huggingface``).

The modern form (Ray 2.7+) lives in :mod:`tuneplat.train.huggingface.transformers`:
build a ``transformers.Trainer`` inside the training function of a
:class:`~tuneplat.train.torch.TorchTrainer`, add :class:`RayTrainReportCallback`
and call :func:`prepare_trainer`. Needs the ``huggingface`` extra
(``pip install 'tuneplat[huggingface]'``).
"""

from __future__ import annotations

from .transformers import RayTrainReportCallback, TransformersTrainer, prepare_trainer

__all__ = ["RayTrainReportCallback", "TransformersTrainer", "prepare_trainer"]
