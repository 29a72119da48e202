"""The ``huggingface`` extra's check, run before anything imports ``transformers``."""

from __future__ import annotations

from .._extras import require

__all__ = ["check"]


def check() -> None:
    """Raise an ImportError naming the ``huggingface`` extra when transformers or accelerate is missing."""
    feature = "tuneplat.train.huggingface.transformers"
    require("transformers", "huggingface", feature)
    require("accelerate", "huggingface", feature)  # transformers.Trainer needs it for torch
