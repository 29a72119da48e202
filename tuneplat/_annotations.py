"""What ``isinstance()`` accepts for a dataclass field's annotation: one reading for journal events and wire messages."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

__all__ = ["isinstance_types"]


def isinstance_types(hint: Any, aliases: Mapping[Any, tuple[type, ...]] | None = None) -> tuple[tuple[type, ...], bool]:
    """The types ``isinstance()`` should accept for annotation ``hint``, and whether None is allowed.

    ``()`` means anything (``Any``, or a union holding ``Any``). Containers check
    their kind only (``dict[str, Any]`` -> ``dict``); a ``float`` accepts an
    ``int``; ``aliases`` maps an annotation to the types that stand for it (an
    enum and its value, say).
    """
    if hint is Any:
        return (), True
    if aliases and hint in aliases:
        return aliases[hint], False
    origin = typing.get_origin(hint)
    if origin in (dict, list, tuple):
        return (origin,), False
    args = typing.get_args(hint)
    if args:  # X | None
        types: list[type] = []
        optional = False
        for a in args:
            if a is type(None):
                optional = True
                continue
            t, _ = isinstance_types(a, aliases)
            if not t:
                return (), True
            types.extend(t)
        return tuple(types), optional
    if hint is float:
        return (int, float), False
    return (hint,), False
