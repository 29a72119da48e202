"""``ray.tune.utils``: helpers for writing trainables (``tuneplat.tune.utils``)."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

__all__ = ["validate_save_restore"]


def validate_save_restore(trainable_cls: type, config: dict[str, Any] | None = None, num_gpus: int = 0) -> bool:
    """Check that a :class:`tuneplat.Trainable` subclass resumes where it stopped (``ray.tune.utils``'s helper).

    Runs in this process (no cluster): one instance trains a step and saves; a
    second instance restores that checkpoint, and must be at the same
    iteration and train on from there.

    Args:
        trainable_cls: the Trainable subclass.
        config: its config (default ``{}``).
        num_gpus: accepted for Ray compatibility (nothing is placed).

    Returns:
        True.

    Raises:
        AssertionError: the restored instance does not continue where the first stopped (as Ray's).

    Example:
        >>> from tuneplat.tune.utils import validate_save_restore
        >>> validate_save_restore(MyTrainable, config={"lr": 0.1})  # doctest: +SKIP
        True
    """
    from .trainables._trainable import Trainable

    if not (isinstance(trainable_cls, type) and issubclass(trainable_cls, Trainable)):
        raise TypeError(f"validate_save_restore() takes a tune.Trainable subclass, got {trainable_cls!r}")
    config = dict(config or {})
    first = trainable_cls(config)
    second = None
    folder = tempfile.mkdtemp(prefix="tuneplat_validate_")
    try:
        first.train()
        first.train()
        saved = first.save(folder)
        second = trainable_cls(config)
        second.restore(saved)
        # not a bare assert: the check must run under python -O too
        if second.iteration != first.iteration:
            raise AssertionError(f"{trainable_cls.__name__}: restored at iteration {second.iteration}, saved at "
                                 f"{first.iteration}")
        result = second.train()
        if result.get("training_iteration") != first.iteration + 1:
            raise AssertionError(f"{trainable_cls.__name__}: after restoring iteration {first.iteration} the next "
                                 f"step reported training_iteration={result.get('training_iteration')}")
    finally:
        first.stop()
        if second is not None:
            second.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return True
