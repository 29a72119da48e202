"""``ray.tune.experiment``: the :class:`Trial` that callbacks and name creators receive."""

from __future__ import annotations

from ..core._trial import Trial

__all__ = ["Trial"]
