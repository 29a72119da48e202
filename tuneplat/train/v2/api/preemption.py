"""``ray.train.v2.api.preemption``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._session import PreemptionInfo

__all__ = ["PreemptionInfo"]
