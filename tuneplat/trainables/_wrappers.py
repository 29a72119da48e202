"""``tune.with_parameters`` and ``tune.with_resources``: wrap a function trainable, as in Ray Tune.

Both return a :class:`ParameterizedTrainable`, a picklable callable that the
:class:`tuneplat.Tuner` accepts wherever it accepts a function; the two compose
in either order.

``with_parameters`` pickles its objects once, when it is called; the tuner
scatters that blob to the Dask cluster once per experiment (Ray's object
store), so every trial fetches it from a worker instead of shipping it in its
task; each trial unpickles its own copy, so a trial that mutates them does not
change what the next trial sees.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from .._config import ScalingConfig
from ..execution.placement_groups import PlacementGroupFactory

__all__ = ["ParameterizedTrainable", "PlacementGroupFactory", "resources_of", "trial_resources_of", "with_parameters",
           "with_resources"]

logger = logging.getLogger("tuneplat")

#: Ray resource names that Dask has no notion of: accepted, not scheduled on.
_IGNORED_RESOURCES = frozenset({"memory", "object_store_memory"})



class ParameterizedTrainable:
    """A function trainable with extra keyword arguments and/or its resources.

    Built by :func:`with_parameters` and :func:`with_resources`; calling it
    with ``config`` calls the wrapped function with ``config`` and the
    parameters.
    """

    def __init__(self, fn: Callable[..., Any], blob: bytes | None = None, names: tuple[str, ...] = (),
                 resources: ScalingConfig | _ResourcesByConfig | None = None) -> None:
        self._fn = fn
        self._blob = blob
        self._names = names
        self._tuneplat_resources = resources
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__module__ = getattr(fn, "__module__", __name__)

    def _copy(self, **changes: Any) -> ParameterizedTrainable:
        new = ParameterizedTrainable(self._fn, self._blob, self._names, self._tuneplat_resources)
        for k, v in changes.items():
            setattr(new, k, v)
        return new

    def _tuneplat_bind(self, client: Any) -> tuple[ParameterizedTrainable, tuple[Any, ...]]:
        """Scatter the parameters to the cluster once: a copy without them, and the future to pass with each task."""
        if self._blob is None:
            return self, ()
        future = client.scatter(self._blob, hash=False)
        return self._copy(_blob=None), (future,)

    def _tuneplat_resolve(self, blob: bytes) -> ParameterizedTrainable:
        """On the worker: the copy with the fetched parameters back."""
        return self._copy(_blob=blob)

    def _parameters(self) -> dict[str, Any]:
        import cloudpickle

        return cloudpickle.loads(self._blob) if self._blob is not None else {}

    def __call__(self, config: dict[str, Any]) -> Any:
        return self._fn(config, **self._parameters())

    def __repr__(self) -> str:
        parts = [f"{self.__qualname__}"]
        if self._names:
            parts.append("parameters=" + ",".join(self._names))
        if self._tuneplat_resources is not None:
            parts.append(f"resources={self._tuneplat_resources.per_worker()}")
        return f"ParameterizedTrainable({', '.join(parts)})"


def _unwrap(trainable: Any, where: str) -> tuple[Callable[..., Any], ParameterizedTrainable | None]:
    from ._base import ConvertibleTrainer
    from ._trainable import Trainable, TrainableFunction

    if isinstance(trainable, ParameterizedTrainable):
        return trainable._fn, trainable
    if isinstance(trainable, type) and issubclass(trainable, Trainable):
        return TrainableFunction(trainable), None  # parameters go to setup(config, **parameters), as in Ray
    if isinstance(trainable, ConvertibleTrainer):
        raise TypeError(f"{where} wraps a function trainable; a {type(trainable).__name__} takes its data through "
                        "train_loop_config (or load it inside train_loop_per_worker) and its resources through "
                        "ScalingConfig(num_workers=..., resources_per_worker=...).")
    if isinstance(trainable, type):
        raise TypeError(f"{where} got the class {trainable.__name__}, which does not subclass tune.Trainable; "
                        "tuneplat runs function trainables fn(config) that call tune.report(...) and tune.Trainable "
                        "subclasses (see docs/porting-from-ray.md).")
    if not callable(trainable):
        raise TypeError(f"{where} needs a function trainable fn(config), got {type(trainable).__name__}")
    return trainable, None


def with_parameters(trainable: Callable[..., Any], **kwargs: Any) -> ParameterizedTrainable:
    """Pass large or unpicklable-by-reference objects to a trainable (``ray.tune.with_parameters``).

    The trainable is called as ``trainable(config, **kwargs)``. The objects are
    pickled once, now, and put on the Dask cluster once per experiment: use it
    for datasets instead of capturing them in a closure or putting them in the
    search space. Give the wrapped trainable again to :meth:`Tuner.restore`.

    Args:
        trainable: a function ``fn(config, **kwargs)`` (or one already wrapped
            by :func:`with_resources`).
        **kwargs: the objects, by the parameter names of ``trainable`` (none: the
            trainable unchanged, as Ray allows).

    Raises:
        TypeError: ``trainable`` is not a function, does not take these keyword
            arguments, or an object cannot be pickled.
        ValueError: the trainable already has parameters.

    Example:
        >>> import tuneplat as tune
        >>> def train_fn(config, data=None):
        ...     tune.report({"loss": config["x"] * len(data)})
        >>> wrapped = tune.with_parameters(train_fn, data=list(range(1000)))
        >>> tuner = tune.Tuner(wrapped, param_space={"x": tune.uniform(0, 1)})  # doctest: +SKIP
    """
    import cloudpickle

    from ._trainable import TrainableFunction

    fn, wrapped = _unwrap(trainable, "with_parameters()")
    if not kwargs:  # Ray accepts it (its PyTorch/CIFAR guide starts so): the trainable as it is
        return wrapped if wrapped is not None else ParameterizedTrainable(fn)
    if wrapped is not None and wrapped._names:
        raise ValueError(f"The trainable already has parameters {list(wrapped._names)}; pass all of them in one "
                         "with_parameters() call.")
    try:
        (fn.setup_signature() if isinstance(fn, TrainableFunction) else inspect.signature(fn)).bind({}, **kwargs)
    except TypeError as exc:
        call = "setup(config, " if isinstance(fn, TrainableFunction) else "fn(config, "
        raise TypeError(f"with_parameters(): {getattr(fn, '__qualname__', fn)!r} cannot be called as "
                        f"{call}{', '.join(f'{k}=...' for k in kwargs)}): {exc}. Add these parameters to its "
                        "signature, e.g. def train_fn(config, data=None).") from None
    except ValueError:  # no signature (a builtin): let the call tell
        pass
    try:
        blob = cloudpickle.dumps(dict(kwargs))
    except Exception as exc:
        raise TypeError(f"with_parameters(): the objects {sorted(kwargs)} cannot be pickled to send them to Dask "
                        f"workers: {type(exc).__name__}: {exc}") from exc
    resources = wrapped._tuneplat_resources if wrapped is not None else None
    return ParameterizedTrainable(fn, blob, tuple(kwargs), resources)


def _scaling_from_dict(resources: Mapping[str, Any]) -> ScalingConfig:
    per_worker: dict[str, float] = {}
    for key, value in resources.items():
        name = str(key)
        if name.lower() == "gpu_memory":  # {"gpu_memory": "10GiB"}: packed by memory (docs/resources.md)
            from ..execution._gpu_memory import GPU_MEMORY, parse_memory

            per_worker[GPU_MEMORY] = parse_memory(value, f"resources[{key!r}]")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
            raise ValueError(f"The value of `resources[{key!r}]` is {value!r}, but must be a number >= 0.")
        if name.lower() in _IGNORED_RESOURCES:
            logger.warning("tuneplat: with_resources(): %r is not scheduled on (Dask workers have no such resource); "
                           "size your workers' memory instead", name)
            continue
        upper = name.upper() if name.lower() in ("cpu", "gpu") else name
        if upper in per_worker:
            raise ValueError(f"with_resources(): {name!r} is given twice (resource names are case-insensitive)")
        per_worker[upper] = float(value)
    return ScalingConfig(num_workers=1, resources_per_worker=per_worker)


def with_resources(trainable: Callable[..., Any],
                   resources: Mapping[str, float] | ScalingConfig) -> ParameterizedTrainable:
    """Say what every trial of the trainable needs (``ray.tune.with_resources``).

    Args:
        trainable: a function trainable (or one wrapped by :func:`with_parameters`).
        resources: a dict like ``{"cpu": 2, "gpu": 0.5}`` (one rank with these;
            custom Dask worker resources by name; ``memory`` is accepted and
            not scheduled on), or a :class:`ScalingConfig` (several ranks per
            trial).

    Returns:
        the wrapped trainable; the :class:`Tuner` gives every trial these
        resources (don't pass ``scaling_config=`` to the Tuner as well). On the
        embedded cluster, a whole number of CPUs per trial sizes its worker
        processes (8 cores and ``{"cpu": 2}``: 4 workers of 2 CPUs, 4 trials at
        once, as Ray would run them).

    Raises:
        TypeError: another type. A :class:`PlacementGroupFactory` is one rank
            with its bundles' sum. A callable ``resources(config)`` gives each
            trial its own resources (any of the forms above), as in Ray; a trial
            whose resources can never fit the cluster ends as ERROR at once,
            with the numbers.
        ValueError: a negative or non-numeric amount.

    Example:
        >>> import tuneplat as tune
        >>> def train_fn(config):
        ...     tune.report({"loss": config["x"]})
        >>> tuner = tune.Tuner(tune.with_resources(train_fn, {"cpu": 2, "gpu": 0.5}),  # doctest: +SKIP
        ...                    param_space={"x": tune.uniform(0, 1)})
    """
    fn, wrapped = _unwrap(trainable, "with_resources()")
    if isinstance(resources, ScalingConfig):
        scaling = resources
    elif isinstance(resources, PlacementGroupFactory):
        scaling = _scaling_from_dict(resources.required_resources)
    elif isinstance(resources, Mapping):
        scaling = _scaling_from_dict(resources)
    elif callable(resources):
        scaling = _ResourcesByConfig(resources)
    else:
        raise TypeError(f"with_resources() takes a dict like {{'cpu': 2, 'gpu': 0.5}}, a PlacementGroupFactory or a "
                        f"ScalingConfig, got {type(resources).__name__}.")
    if wrapped is not None:
        return wrapped._copy(_tuneplat_resources=scaling)
    return ParameterizedTrainable(fn, resources=scaling)


class _ResourcesByConfig:
    """``with_resources(trainable, fn)``: each trial's resources are ``fn(config)`` (Ray's per-trial resources)."""

    def __init__(self, fn: Callable[[Mapping[str, Any]], Any]) -> None:
        self.fn = fn

    def __call__(self, config: Mapping[str, Any]) -> ScalingConfig:
        where = f"with_resources(): {getattr(self.fn, '__qualname__', self.fn)}(config)"
        value = self.fn(config)
        if isinstance(value, ScalingConfig):
            return value
        if isinstance(value, PlacementGroupFactory):
            return _scaling_from_dict(value.required_resources)
        if isinstance(value, Mapping):
            return _scaling_from_dict(value)
        raise TypeError(f"{where} returned {value!r}; it must return a dict like {{'cpu': 2, 'gpu': 0.5}}, a "
                        "PlacementGroupFactory or a ScalingConfig.")

    def per_worker(self) -> str:  # (for the wrapped trainable's repr)
        return f"by config: {getattr(self.fn, '__qualname__', self.fn)}"


def trial_resources_of(trainable: Any) -> Callable[[Mapping[str, Any]], ScalingConfig] | None:
    """The per-trial resources function set with ``with_resources(trainable, fn)``, or None."""
    resources = getattr(trainable, "_tuneplat_resources", None) if isinstance(trainable, ParameterizedTrainable) \
        else None
    return resources if isinstance(resources, _ResourcesByConfig) else None


def resources_of(trainable: Any) -> ScalingConfig | None:
    """The resources set with :func:`with_resources` (the same for every trial), or None."""
    if trial_resources_of(trainable) is not None:
        return None
    return getattr(trainable, "_tuneplat_resources", None) if isinstance(trainable, ParameterizedTrainable) else None
