"""``ray.tune.execution.placement_groups``: :class:`PlacementGroupFactory` at Ray's module path (``tune.PlacementGroupFactory``).

Example:
    >>> from tuneplat.tune.execution.placement_groups import PlacementGroupFactory
    >>> PlacementGroupFactory([{"CPU": 2, "GPU": 0}]).head_cpus
    2.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PlacementGroupFactory", "resource_dict_to_pg_factory"]


class PlacementGroupFactory:
    """Ray's resource bundles for one trial (``ray.tune.PlacementGroupFactory``), for :func:`with_resources`.

    Ray's semantics: amounts of 0 are dropped from the bundles; an empty first
    (head) bundle is dropped and remembered (:attr:`head_bundle_is_empty`);
    :attr:`required_resources` is the bundles' sum, :attr:`head_cpus` the head
    bundle's CPUs; two factories are equal when their bundles, strategy and
    extra arguments are. ``"cpu"``/``"gpu"`` keys are spelt ``"CPU"``/``"GPU"``.

    A Tune function trainable runs in one process that holds every bundle
    (Ray gives the extra bundles to actors the trainable starts itself); here
    that is one rank with the bundles' sum: ``PlacementGroupFactory([{"CPU": 1},
    {"CPU": 2}])`` is ``{"CPU": 3}``. For several ranks joined by
    torch.distributed, use a ``ScalingConfig(num_workers=...)``.

    Args:
        bundles: a non-empty list of dicts like ``{"CPU": 1, "GPU": 0.5}``.
        strategy: ``"PACK"``, ``"SPREAD"``, ``"STRICT_PACK"``, ``"STRICT_SPREAD"`` (accepted).
        *args, **kwargs: Ray's ``placement_group()`` arguments (kept for equality; not used).

    Raises:
        ValueError: no bundles, only empty ones, an amount that is not a number >= 0, or an unknown strategy.

    Example:
        >>> pgf = PlacementGroupFactory([{"CPU": 1, "GPU": 0}, {"CPU": 2}])
        >>> pgf.bundles, pgf.required_resources, pgf.head_cpus
        ([{'CPU': 1.0}, {'CPU': 2.0}], {'CPU': 3.0}, 1.0)
        >>> pgf == PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}])
        True
    """

    def __init__(self, bundles: Sequence[Mapping[str, float]], strategy: str = "PACK", *args: Any, **kwargs: Any) -> None:
        if not isinstance(bundles, (list, tuple)) or not bundles or not all(isinstance(b, Mapping) for b in bundles):
            raise ValueError(f"The value of `bundles` is {bundles!r}, but must be a non-empty list of dicts like "
                             "[{'CPU': 1}].")
        if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(f"The value of `strategy` is {strategy!r}, but must be 'PACK', 'SPREAD', "
                             "'STRICT_PACK' or 'STRICT_SPREAD'.")
        clean: list[dict[str, float]] = []
        for bundle in bundles:
            out: dict[str, float] = {}
            for key, value in bundle.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
                    raise ValueError(f"PlacementGroupFactory bundle {dict(bundle)!r}: the value of {key!r} is "
                                     f"{value!r}, but must be a number >= 0.")
                name = str(key).upper() if str(key).lower() in ("cpu", "gpu") else str(key)
                if value != 0:
                    out[name] = out.get(name, 0.0) + float(value)
            clean.append(out)
        self._head_bundle_is_empty = not clean[0]
        if self._head_bundle_is_empty:
            clean.pop(0)
            if not clean:
                raise ValueError(f"The value of `bundles` is {bundles!r}: an empty head bundle and no other bundle "
                                 "(a trial needs at least one resource, e.g. [{'CPU': 1}]).")
        self._bundles = clean
        self._strategy = strategy
        self._args = args
        self._kwargs = dict(kwargs)

    @property
    def bundles(self) -> list[dict[str, float]]:
        """A copy of the bundles (without an empty head bundle)."""
        return [dict(b) for b in self._bundles]

    @property
    def strategy(self) -> str:
        return self._strategy

    @property
    def head_bundle_is_empty(self) -> bool:
        """Whether the first bundle given was empty (the trainable itself needs nothing)."""
        return self._head_bundle_is_empty

    @property
    def head_cpus(self) -> float:
        """The CPUs of the head bundle (0 when it is empty)."""
        return 0.0 if self._head_bundle_is_empty else float(self._bundles[0].get("CPU", 0.0))

    @property
    def required_resources(self) -> dict[str, float]:
        """The bundles' sum (what the trial's one rank asks for)."""
        total: dict[str, float] = {}
        for bundle in self._bundles:
            for name, value in bundle.items():
                total[name] = total.get(name, 0.0) + value
        return total

    def _key(self) -> tuple[Any, ...]:
        return (self._bundles, self._strategy, self._args, sorted(self._kwargs.items()), self._head_bundle_is_empty)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroupFactory) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(repr(self._key()))

    def __getitem__(self, key: str) -> Any:
        """``["gpu_ids"]``: the GPUs of the rank (``get_trial_resources()`` was a dict of that key before it
        returned Ray's factory; scripts that read it keep working)."""
        if key == "gpu_ids":
            return list(getattr(self, "gpu_ids", []))
        raise KeyError(key)

    def __repr__(self) -> str:
        head: list[dict[str, float]] = [{}] if self._head_bundle_is_empty else []
        return f"PlacementGroupFactory({head + self.bundles!r}, strategy={self._strategy!r})"



def resource_dict_to_pg_factory(spec: Mapping[str, Any] | None = None) -> PlacementGroupFactory:
    """Ray's translation of a resources dict (``{"cpu": 2, "gpu": 1, "custom_resources": {...}}``) into one bundle.

    Example:
        >>> resource_dict_to_pg_factory({"cpu": 2}).bundles
        [{'CPU': 2.0}]
    """
    rest = dict(spec or {"cpu": 1})
    cpus = rest.pop("cpu", rest.pop("CPU", 0.0))
    gpus = rest.pop("gpu", rest.pop("GPU", 0.0))
    memory = rest.pop("memory", 0.0)
    bundle = dict(rest.pop("custom_resources", {}) or {}) or rest
    bundle.update({"CPU": cpus, "GPU": gpus, "memory": memory})
    return PlacementGroupFactory([bundle])
