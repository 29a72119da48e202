"""``ray.train.v2.api.train_fn_utils``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._reported import get_all_reported_checkpoints
from ..._session import get_checkpoint, get_context, get_preemption_info, report
from ...data import get_dataset_shard

__all__ = ["get_all_reported_checkpoints", "get_checkpoint", "get_context", "get_dataset_shard", "get_preemption_info", "report"]
