"""The framework seam of a trainer (``ray.train.backend``): :class:`BackendConfig` and :class:`Backend`.

See :mod:`tuneplat.train._backend` for how the hooks run in every rank.
"""

from __future__ import annotations

from ._backend import Backend, BackendConfig, RankGroup, get_rank_group

__all__ = ["Backend", "BackendConfig", "RankGroup", "get_rank_group"]
