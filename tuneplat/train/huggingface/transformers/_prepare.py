"""``prepare_trainer``: a ``transformers.Trainer`` made ready for a tuneplat worker group."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

import transformers
from torch.utils.data import DataLoader, IterableDataset

from ... import _session as _sessions

__all__ = ["prepare_trainer"]

logger = logging.getLogger("tuneplat")


class _BatchIterable(IterableDataset):  # type: ignore[type-arg]
    """An iterable of ready batches (``get_dataset_shard(...).iter_torch_batches(...)``) seen as a dataset."""

    def __init__(self, batches: Iterable[Any]) -> None:
        super().__init__()
        self.batches = batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)


def _is_batch_iterable(dataset: Any) -> bool:
    """An iterable of batches rather than a dataset of rows (no ``__getitem__``, not a torch/HF dataset)."""
    if dataset is None or isinstance(dataset, (IterableDataset, str, bytes, dict)):
        return False
    if hasattr(dataset, "__getitem__") or not hasattr(dataset, "__iter__"):
        return False
    return type(dataset).__module__.split(".")[0] not in ("datasets", "torch")


def _batches_loader(dataset: Any) -> DataLoader:  # type: ignore[type-arg]
    return DataLoader(_BatchIterable(dataset), batch_size=None)


def prepare_trainer(trainer: transformers.Trainer) -> transformers.Trainer:
    """Make a ``transformers.Trainer`` built inside a training function ready for the trial's ranks.

    The Trainer already trains with DDP over the trial's ranks: tuneplat joins
    the process group before the training function starts and sets ``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, so the
    ``TrainingArguments`` (through ``accelerate``) find the group and use it
    instead of creating one. ``prepare_trainer`` then:

    * takes iterables of ready batches as ``train_dataset``/``eval_dataset``
      (``train.get_dataset_shard("train").iter_torch_batches(batch_size=8)``),
      already sharded per rank, as Ray's ``prepare_trainer`` does for Ray Data;
    * puts a relative ``output_dir`` inside the trial's folder when the
      function does not already run there (a ``TorchTrainer``'s own ``fit()``
      keeps the worker's directory, as Ray Train V2 does): the Trainer's
      checkpoints are scratch that the callback copies into the trial's
      checkpoints, and trials never share or litter the current directory.

    Add :class:`RayTrainReportCallback` to report metrics and checkpoints.

    Args:
        trainer: a ``transformers.Trainer`` (or a subclass).

    Returns:
        The same Trainer object (its class is a subclass of the original).

    Example:
        >>> trainer = prepare_trainer(transformers.Trainer(model=model, args=args, train_dataset=ds))  # doctest: +SKIP
        >>> trainer.train()  # doctest: +SKIP
    """
    if not isinstance(trainer, transformers.Trainer):
        raise TypeError(f"prepare_trainer() takes a transformers.Trainer, got {type(trainer).__name__}")
    session = _sessions.current_session()
    out = trainer.args.output_dir
    if session is not None and out and not os.path.isabs(out) and os.path.abspath(out) != os.path.join(
            session.spec.trial_dir, out):
        trainer.args.output_dir = os.path.join(session.spec.trial_dir, out)
        logger.debug("tuneplat: transformers output_dir %r -> %s", out, trainer.args.output_dir)
        if trainer.args.should_save:
            os.makedirs(trainer.args.output_dir, exist_ok=True)
            try:  # the Trainer made the folder in the current directory when it was built: drop it if still empty
                os.rmdir(out)
            except OSError:
                pass
    base: type[transformers.Trainer] = type(trainer)

    def get_train_dataloader(self: Any) -> Any:
        if _is_batch_iterable(self.train_dataset):
            return _batches_loader(self.train_dataset)
        return base.get_train_dataloader(self)

    def get_eval_dataloader(self: Any, eval_dataset: Any = None) -> Any:
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(dataset, str) and isinstance(self.eval_dataset, dict):  # a name of one of several eval sets
            dataset = self.eval_dataset[dataset]
        if _is_batch_iterable(dataset):
            return _batches_loader(dataset)
        return base.get_eval_dataloader(self, eval_dataset)

    prepared = type(f"Prepared{base.__name__}", (base,), {
        "get_train_dataloader": get_train_dataloader, "get_eval_dataloader": get_eval_dataloader,
        "__module__": base.__module__, "__qualname__": f"Prepared{base.__qualname__}",
    })
    trainer.__class__ = prepared
    return trainer
