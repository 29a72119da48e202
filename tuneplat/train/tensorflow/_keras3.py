"""Keras 3's ``fit`` under a multi-worker ``MultiWorkerMirroredStrategy`` (fails upstream; docs/frameworks.md).

Keras 3 (checked with 3.15.1 on TensorFlow 2.21; keras-team/keras#20585, tensorflow/tensorflow#72388,
ray-project/ray#47464) fails in two functions of its TensorFlow trainer as soon
as the strategy spans two workers, with or without tuneplat:

1. ``TensorFlowTrainer._maybe_symbolic_build`` builds the model from the first
   batch of the distributed dataset, a structure of ``PerReplica`` values that
   it hands as a whole to ``strategy.reduce("MEAN", batch, axis=None)``; the
   collective reduction takes one value, and converting the tuple fails
   ("Attempt to convert a value (PerReplica:{...}) with an unsupported type").
   The build only reads shapes and dtypes: this rank's own replica values serve.
2. ``reduce_per_replica`` averages each logged metric across workers with
   ``strategy.reduce("MEAN", v, axis=0)``, which also reduces over axis 0 and
   fails on scalar metric results ("Invalid reduction dimension 0 for input
   with 0 dimensions"); the mean over the replicas alone (``axis=None``) is
   what is meant.

Both wrappers change nothing unless the strategy is a multi-worker
``MultiWorkerMirroredStrategy`` (where the originals always fail); the training
step and its gradient all-reduce are Keras' and TensorFlow's, untouched.
:func:`install` applies them in this process: now if Keras 3's trainer is
loaded, else when it is first imported (an import hook: Keras 3 is never
imported for it, a rank whose code uses tf-keras does not pay for it).
"""

from __future__ import annotations

import functools
import importlib.abc
import logging
import sys
import types
from collections.abc import Sequence
from typing import Any

__all__ = ["install"]

logger = logging.getLogger("tuneplat")

_TARGET = "keras.src.backend.tensorflow.trainer"
_MARK = "_tuneplat_multi_worker_build"


def install() -> None:
    """Make Keras 3's ``fit`` work under a multi-worker ``MultiWorkerMirroredStrategy`` in this process.

    Idempotent. Patches Keras 3's TensorFlow trainer now if it is imported,
    else installs an import hook that patches it when it is.
    """
    module = sys.modules.get(_TARGET)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds Keras 3's TensorFlow trainer with the other finders, and patches it once it has run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None) -> Any:
        if fullname != _TARGET:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            _patch(module)

        loader.exec_module = exec_module  # this module's own loader object: no other module is affected
        return spec


def _patch(module: types.ModuleType) -> None:
    """Wrap the two functions of Keras 3's TensorFlow trainer that fail with more than one worker."""
    trainer = getattr(module, "TensorFlowTrainer", None)
    build = getattr(trainer, "_maybe_symbolic_build", None)
    reduce = getattr(module, "reduce_per_replica", None)
    if trainer is None or build is None or reduce is None:
        logger.warning("tuneplat: this Keras (%s) has no TensorFlowTrainer._maybe_symbolic_build or "
                       "reduce_per_replica; Keras 3's fit under a multi-worker MultiWorkerMirroredStrategy is left as "
                       "it is (docs/frameworks.md)", getattr(sys.modules.get("keras"), "__version__", "?"))
        return
    if getattr(build, _MARK, False):
        return

    @functools.wraps(build)
    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy = getattr(self, "_distribute_strategy", None)
        if iterator is not None and strategy is not None and _multi_worker(strategy):
            import tensorflow as tf

            def own(value: Any) -> Any:  # this rank's (first local) replica's value: the shapes and dtypes
                if isinstance(value, tf.distribute.DistributedValues):
                    return strategy.experimental_local_results(value)[0]
                return value

            for _, _, batches in iterator:  # the first batch, as Keras takes it (fit() resets the iterator after)
                return build(self, data_batch=tf.nest.map_structure(own, next(batches)))
        return build(self, iterator=iterator, data_batch=data_batch)

    @functools.wraps(reduce)
    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if reduction in ("auto", "mean") and _multi_worker(strategy):
            import tensorflow as tf

            # Keras reduces each logged value with strategy.reduce("MEAN", v, axis=0), which also averages over
            # axis 0 and so fails on the scalar results of metrics ("Invalid reduction dimension 0 for input with 0
            # dimensions"); the mean over the replicas alone is what "mean" means for values that are not batches
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return reduce(values, strategy, reduction)

    for wrapper in (_maybe_symbolic_build, reduce_per_replica):
        setattr(wrapper, _MARK, True)
    trainer._maybe_symbolic_build = _maybe_symbolic_build
    module.reduce_per_replica = reduce_per_replica  # type: ignore[attr-defined]
    logger.debug("tuneplat: Keras 3's TensorFlow trainer patched for multi-worker MultiWorkerMirroredStrategy")


def _multi_worker(strategy: Any) -> bool:
    """Whether Keras reduces with collectives across workers here (Keras' own test, less its private helper)."""
    import tensorflow as tf

    in_multi_worker = getattr(getattr(strategy, "extended", None), "_in_multi_worker_mode", None)
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and callable(in_multi_worker) \
        and bool(in_multi_worker())
