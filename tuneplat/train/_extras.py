"""Optional framework integrations: importing one whose extra is missing says which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` or raise an ImportError naming the extra that provides it.

    Args:
        module: the module to import (``"transformers"``, ``"lightning.pytorch"``).
        extra: the tuneplat extra that installs it (``"huggingface"``, ``"lightning"``).
        feature: what needs it, for the message (``"tuneplat.train.lightning"``).

    Raises:
        ImportError: the module is not installed (or fails to import).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{feature} needs the {module.split('.')[0]!r} package, which is not installed here ({exc}). "
            f"Install the extra: pip install 'tuneplat[{extra}]'"
        ) from exc
