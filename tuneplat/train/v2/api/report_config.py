"""``ray.train.v2.api.report_config``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._reported import CheckpointConsistencyMode
from ..._session import CheckpointUploadMode

__all__ = ["CheckpointConsistencyMode", "CheckpointUploadMode"]
