"""``TensorflowConfig``: each rank's ``TF_CONFIG``, so that ``MultiWorkerMirroredStrategy`` forms one group."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import Any

from .._backend import Backend, BackendConfig, RankGroup
from . import _keras3

__all__ = ["TensorflowConfig", "tf_config"]

logger = logging.getLogger("tuneplat")


@dataclasses.dataclass
class TensorflowConfig(BackendConfig):
    """How the ranks of a :class:`TensorflowTrainer` find each other (``ray.train.tensorflow.TensorflowConfig``).

    Ray's class has no fields; neither has this one. Before the training
    function runs, every rank gets ``TF_CONFIG``::

        {"cluster": {"worker": ["host0:port0", "host1:port1", ...]}, "task": {"type": "worker", "index": rank}}

    with each port chosen free on that rank's own host (the address of its Dask
    worker) and gathered over the group's rendezvous, so
    ``tf.distribute.MultiWorkerMirroredStrategy()`` joins the ranks in one
    collective group; and ``TF_USE_LEGACY_KERAS=1`` unless the environment
    already says otherwise (as Ray does: its examples use tf-keras). No torch
    process group is joined. After the function, both are removed. Keras 3's
    ``fit`` fails under a multi-worker ``MultiWorkerMirroredStrategy``
    (keras-team/keras#20585); each rank patches the two functions of Keras 3's
    TensorFlow trainer that fail, when Keras 3 is imported (docs/frameworks.md).

    Example:
        >>> TensorflowConfig()
        TensorflowConfig()
    """

    @property
    def backend_cls(self) -> type[Backend]:
        return _TensorflowBackend

    @property
    def framework(self) -> str:
        return "tensorflow"


def tf_config(workers: list[str], index: int) -> dict[str, Any]:
    """The ``TF_CONFIG`` of rank ``index`` of a group whose ranks listen on ``workers`` (``host:port`` each).

    Example:
        >>> tf_config(["127.0.0.1:5000", "127.0.0.1:5001"], 1)["task"]
        {'type': 'worker', 'index': 1}
    """
    if not 0 <= index < len(workers):
        raise ValueError(f"rank {index} is not in a group of {len(workers)} workers")
    return {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _TensorflowBackend(Backend):
    """Sets the rank's ``TF_CONFIG`` from every rank's address (gathered over the rendezvous), removes it after."""

    # MultiWorkerMirroredStrategy starts a gRPC server in the process that TensorFlow cannot stop (tensorflow#11872):
    # ~100 threads, a listening port and ~45 MB per trial in each worker process, measured. The worker processes of a
    # TensorFlow group are restarted after it ends, as Ray's worker actors are new for every run.
    reuses_worker_process = False

    def __init__(self) -> None:
        self._added: list[str] = []

    def on_start(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        # an earlier trial of this process that used TensorFlow outside this backend (a plain Tune trial) left an
        # initialized eager context: MultiWorkerMirroredStrategy then refuses ("Collective ops must be configured
        # at program startup")
        _reset_tensorflow()
        _keras3.install()  # Keras 3's fit under a multi-worker strategy (upstream bug): patched when Keras 3 loads
        own = _address(worker_group.host, worker_group.free_port())
        workers = [str(w) for w in worker_group.all_gather(own)]
        os.environ["TF_CONFIG"] = json.dumps(tf_config(workers, worker_group.rank))
        self._added = ["TF_CONFIG"]
        if "TF_USE_LEGACY_KERAS" not in os.environ:
            os.environ["TF_USE_LEGACY_KERAS"] = "1"
            self._added.append("TF_USE_LEGACY_KERAS")
            if _keras_resolved():
                logger.warning("tuneplat: TF_USE_LEGACY_KERAS=1 is set after tf.keras was first used in this worker "
                               "process; tf.keras stays the Keras it chose then (set TF_USE_LEGACY_KERAS in the "
                               "workers' environment to choose)")
        logger.debug("tuneplat: rank %d TF_CONFIG %s", worker_group.rank, os.environ["TF_CONFIG"])

    def on_shutdown(self, worker_group: RankGroup, backend_config: BackendConfig) -> None:
        for key in self._added:  # a later trial of this worker must not see this group
            os.environ.pop(key, None)
        self._added = []
        _reset_tensorflow()


def _reset_tensorflow() -> None:
    """Drop TensorFlow's eager context, so that the next trial of this worker process can form a new group.

    ``MultiWorkerMirroredStrategy`` configures collective ops (and their
    server) into the process's eager context once; a second strategy with
    another ``TF_CONFIG`` in the same process then waits forever for the first
    group. Ray never meets this (a run's workers are new processes); here the
    Dask worker process lives on, so the context is reset (TensorFlow's own
    multi-worker tests do the same) and Keras' global state cleared.
    """
    if "tensorflow" not in sys.modules:
        return
    try:
        import tensorflow as tf
        from tensorflow.python.eager import context

        try:
            if _keras_resolved():  # (never the first use of tf.keras: that would fix its choice of Keras here)
                tf.keras.backend.clear_session()
        except Exception:  # noqa: BLE001 - Keras not loaded or another version: the context reset is what matters
            logger.debug("tuneplat: keras clear_session failed", exc_info=True)
        context._reset_context()
    except Exception:  # noqa: BLE001 - another TensorFlow: the next group may then hang (docs/frameworks.md)
        logger.warning("tuneplat: could not reset TensorFlow's context; a later TensorFlow group in this worker "
                       "process may not form", exc_info=True)


def _keras_resolved() -> bool:
    """Whether this process already resolved ``tf.keras`` (TensorFlow reads ``TF_USE_LEGACY_KERAS`` then)."""
    tf = sys.modules.get("tensorflow")
    keras = getattr(tf, "__dict__", {}).get("keras") if tf is not None else None
    if keras is None:
        return False
    if "LazyLoader" in type(keras).__name__:  # TensorFlow's loader picks the Keras on its first use
        return bool(getattr(keras, "_tfll_initialized", True))
    return True
