"""``ray.train.v2.torch.train_loop_utils``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ...torch import enable_reproducibility, get_device, get_devices, prepare_data_loader, prepare_model

__all__ = ["enable_reproducibility", "get_device", "get_devices", "prepare_data_loader", "prepare_model"]
