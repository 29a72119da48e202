"""``ray.tune.experiment.trial``: the :class:`Trial` module path Ray's callbacks import from."""

from __future__ import annotations

from ..core._trial import Trial

__all__ = ["Trial"]
