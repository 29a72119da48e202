"""Errors of the execution layer that the rank side raises too (a leaf: it imports nothing)."""

from __future__ import annotations

__all__ = ["PlacementError"]


class PlacementError(ValueError):
    """A trial can never fit the cluster."""
