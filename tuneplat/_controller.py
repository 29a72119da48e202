"""Compatibility: the loop lives in :mod:`tuneplat.core`, the Dask side in :mod:`tuneplat.execution`."""

from __future__ import annotations

from .core._loop import TuneError, TuneLoop

Controller = TuneLoop

__all__ = ["Controller", "TuneError"]
