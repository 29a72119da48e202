"""What a trainer object (``TorchTrainer``) hands the :class:`tuneplat.Tuner`: the Tuner never imports a trainer."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._config import RunConfig, ScalingConfig

__all__ = ["ConvertibleTrainer", "TrainerParts"]


@dataclass(frozen=True)
class TrainerParts:
    """A trainer as a trainable.

    Attributes:
        fn: the function each rank runs, ``fn(config)``; it reads ``config["train_loop_config"]``
            and carries the training function's name (the experiment is named after it).
        train_loop_config: the trainer's ``train_loop_config``, under the search space's.
        scaling_config: the trainer's ranks and resources (a ``Tuner(scaling_config=...)`` wins).
        run_config: the trainer's run config (a ``Tuner(run_config=...)`` wins).
    """

    fn: Callable[..., Any]
    train_loop_config: dict[str, Any] = field(default_factory=dict)
    scaling_config: ScalingConfig | None = None
    run_config: RunConfig | None = None


class ConvertibleTrainer(abc.ABC):
    """A trainer the :class:`tuneplat.Tuner` runs: it converts itself with :meth:`as_trainable`."""

    @abc.abstractmethod
    def as_trainable(self) -> TrainerParts:
        """This trainer as the function the tuner runs on each rank, with its defaults."""
