"""Importing a sweep file's ``module:function`` references (nothing is evaluated), and shipping file-defined ones."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["ShippedFunction", "_import_file", "import_object"]

logger = logging.getLogger("tuneplat")


def import_object(ref: str, base_dir: str | None = None, what: str = "function") -> Any:
    """Import ``module:attr`` or ``path/to/file.py:attr`` (attr may be dotted); nothing is evaluated.

    Module names are looked up on ``sys.path`` after the current directory and
    ``base_dir`` (the sweep file's folder) are added to it. A file path is
    resolved against ``base_dir`` first, then the current directory; its
    module is registered with cloudpickle to travel *by value* to Dask
    workers, which therefore need not have the file.

    Raises:
        ImportError: with a message naming what was looked for and where.
    """
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise ImportError(f"{ref!r} is not 'module:{what}' or 'path/to/file.py:{what}'")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise ImportError(f"{attr!r} in {ref!r} is not a Python name")
    is_file = target.endswith(".py") or "/" in target or os.sep in target
    if is_file:
        candidates = (
            [target]
            if os.path.isabs(target)
            else [os.path.join(base_dir or os.getcwd(), target), os.path.join(os.getcwd(), target)]
        )
        found = next((os.path.abspath(c) for c in candidates if os.path.isfile(c)), None)
        if found is None:
            raise ImportError(
                f"cannot import {ref!r}: no file {target!r} (looked in "
                f"{', '.join(sorted({os.path.dirname(os.path.abspath(c)) for c in candidates}))})"
            )
        module = _import_file(found)
    else:
        for d in (base_dir, os.getcwd()):
            if d and os.path.abspath(d) not in [os.path.abspath(p) for p in sys.path if p]:
                sys.path.insert(0, os.path.abspath(d))
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
                raise ImportError(
                    f"cannot import module {target!r} (No module named {exc.name!r}); expected "
                    "an installed module or one importable from the current directory"
                ) from None
            raise ImportError(f"importing module {target!r} failed: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
            raise ImportError(f"importing module {target!r} failed: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportError(f"module {module.__name__!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImportError(f"{ref!r} is a {type(obj).__name__}, not a {what}")
    if is_file and what == "function" and inspect.isfunction(obj):
        return ShippedFunction(obj, ref)
    return obj


class ShippedFunction:
    """A function from a file workers may not have, carried *by value* (cloudpickle bytes).

    Dask pickles task arguments with the standard pickle first, which refers
    to functions by module name; a function loaded from a file path lives in
    a module the workers cannot import. This wrapper holds the function's
    cloudpickle bytes and unpickles them once per worker process.
    """

    _cache: ClassVar[dict[bytes, Callable[..., Any]]] = {}

    def __init__(self, fn: Callable[..., Any], ref: str) -> None:
        import cloudpickle

        self._blob = cloudpickle.dumps(fn)
        self._key = hashlib.sha1(self._blob).digest()
        self.ref = ref
        self.__name__ = getattr(fn, "__name__", "trainable")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def _fn(self) -> Callable[..., Any]:
        fn = self._cache.get(self._key)
        if fn is None:
            import cloudpickle

            fn = self._cache[self._key] = cloudpickle.loads(self._blob)  # our own bytes
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.ref} (shipped by value)>"


def _import_file(path: str) -> Any:
    name = (
        "tuneplat_sweep_"
        + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        + "_"
        + hashlib.sha1(path.encode()).hexdigest()[:8]
    )
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001
        del sys.modules[name]
        raise ImportError(f"importing {path!r} failed: {type(exc).__name__}: {exc}") from None
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module
