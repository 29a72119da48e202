"""``ray.train.v2.api.result``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ....results._result import Result

__all__ = ["Result"]
