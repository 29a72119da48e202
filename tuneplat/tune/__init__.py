"""``from tuneplat import tune``: the same names as ``import tuneplat as tune``, under Ray's module paths.

A Ray script ports by replacing ``ray`` with ``tuneplat`` in its imports:
``from ray import tune`` → ``from tuneplat import tune``; ``from
ray.tune.search.optuna import OptunaSearch`` → ``from
tuneplat.tune.search.optuna import OptunaSearch``; ``ray.tune.schedulers``,
``ray.tune.stopper``, ``ray.tune.logger``, ``ray.tune.result``,
``ray.tune.search`` likewise. Each ``tuneplat.tune.X`` is the very module
``tuneplat.X`` (one class, one ``isinstance``), not a copy.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

import tuneplat as _tuneplat
from tuneplat import *  # noqa: F403 - the same public names
from tuneplat import __all__ as _names

__all__ = list(_names)

_PREFIX = __name__ + "."
_TARGET = "tuneplat."


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__  # (the import system sets __spec__ to the alias's: put it back)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module is ``tuneplat.<name>``, imported already."""
        module.__spec__ = self.spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``tuneplat.tune.<x>[.<y>]`` as the module ``tuneplat.<x>[.<y>]`` itself."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX):
            return None
        real = _TARGET + fullname[len(_PREFIX):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real))


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())


def __getattr__(name: str) -> Any:
    """``tune.result``, ``tune.logger``, ... (submodules of tuneplat) as attributes."""
    try:
        return importlib.import_module(_PREFIX + name)
    except ImportError:
        pass
    return getattr(_tuneplat, name)
