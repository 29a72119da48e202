"""Ray's deprecated ``TransformersTrainer(trainer_init_per_worker, ...)``, run as a TorchTrainer."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..._trainer import TorchTrainer

__all__ = ["TransformersTrainer"]

_MODERN = """\
from tuneplat.train.torch import TorchTrainer
from tuneplat.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

def train_func(config):
    trainer = transformers.Trainer(...)          # what trainer_init_per_worker built
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    trainer.train()

TorchTrainer(train_func, train_loop_config=..., scaling_config=...).fit()"""


def _per_worker(trainer_init_per_worker: Callable[..., Any], train_dataset: Any, eval_dataset: Any,
                config: dict[str, Any]) -> None:
    from ._callback import RayTrainReportCallback
    from ._prepare import prepare_trainer

    trainer = trainer_init_per_worker(train_dataset, eval_dataset, **(config or {}))
    if not any(isinstance(cb, RayTrainReportCallback) for cb in trainer.callback_handler.callbacks):
        trainer.add_callback(RayTrainReportCallback())
    prepare_trainer(trainer).train()


class TransformersTrainer(TorchTrainer):
    """Ray's deprecated trainer for Hugging Face Transformers (Ray 2.1–2.6); use :class:`TorchTrainer` instead.

    ``trainer_init_per_worker(train_dataset, eval_dataset, **trainer_init_config)``
    builds a ``transformers.Trainer`` on every rank; it is trained with
    :class:`RayTrainReportCallback` and :func:`prepare_trainer`, as the modern
    form does. ``datasets={"train": ..., "evaluation": ...}`` take torch or
    Hugging Face datasets (each rank gets the whole dataset; the Trainer's
    sampler shards it). Constructing one warns with a ``DeprecationWarning``
    that shows the modern form.

    Example:
        >>> trainer = TransformersTrainer(trainer_init_per_worker=init,  # doctest: +SKIP
        ...                               scaling_config=ScalingConfig(num_workers=2),
        ...                               datasets={"train": train_ds, "evaluation": eval_ds})
        >>> result = trainer.fit()  # doctest: +SKIP
    """

    _name = "TransformersTrainer"

    def __init__(self, trainer_init_per_worker: Callable[..., Any], *,
                 trainer_init_config: Mapping[str, Any] | None = None, datasets: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        warnings.warn("TransformersTrainer is deprecated (as in Ray 2.7+): build the transformers.Trainer inside "
                      "a TorchTrainer's training function instead:\n\n" + _MODERN, DeprecationWarning, stacklevel=2)
        if not callable(trainer_init_per_worker):
            raise TypeError("trainer_init_per_worker must be a function (train_dataset, eval_dataset, **config) -> "
                            f"transformers.Trainer, got {type(trainer_init_per_worker).__name__}")
        datasets = dict(datasets or {})
        unknown = sorted(set(datasets) - {"train", "evaluation"})
        if unknown:
            raise ValueError(f"TransformersTrainer(datasets=...) takes the keys 'train' and 'evaluation', got "
                             f"{unknown}")
        for key in ("train_loop_per_worker", "train_loop_config"):
            if key in kwargs:
                raise TypeError(f"TransformersTrainer takes trainer_init_per_worker and trainer_init_config, not "
                                f"{key}")
        loop = functools.partial(_per_worker, trainer_init_per_worker, datasets.get("train"), datasets.get("evaluation"))
        self.trainer_init_per_worker = trainer_init_per_worker
        super().__init__(loop, train_loop_config=trainer_init_config, **kwargs)
