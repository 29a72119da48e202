"""Ray Train V2's local mode: ``ScalingConfig(num_workers=0)`` runs the training function in this process.

No Dask cluster, no worker group, no process group, no MLflow: the function
runs in the calling thread, as a plain function call, so a debugger's
breakpoints and ``print`` work (Ray's use: debugging and unit tests).
``train.report()`` keeps the last metrics and checkpoint, ``get_checkpoint()``
returns the last reported one, ``get_context()`` says rank 0 of 1 and
``get_all_reported_checkpoints()`` returns ``[]``, as in Ray. ``fit()``
returns a :class:`tuneplat.Result` with the last metrics, the last checkpoint
and the function's ``return_value``.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..storage._checkpoint import Checkpoint
from ._session import PreemptionInfo, RankSpec, TrainContext, _local, _plain, _set_session

if TYPE_CHECKING:
    from ..results._result import Result
    from ._trainer import DataParallelTrainer

__all__ = ["LocalSession", "run_local"]


class LocalSession:
    """What ``report()``/``get_checkpoint()``/``get_context()`` use in local mode (the interface of a rank's session)."""

    def __init__(self, spec: RankSpec) -> None:
        self.spec = spec
        self.context = TrainContext(spec)
        self.checkpoint: Checkpoint | None = None
        self.metrics: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        self.iteration = 0
        self.checkpoint_requested = False
        self.save_requested = False
        self.preemption: PreemptionInfo | None = None
        self.monitor = None
        self.cleanups: list[Any] = []
        self.send_lock = threading.Lock()

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
        if not isinstance(metrics, dict):
            raise TypeError(f"report() takes a dict of metrics, got {type(metrics).__name__}: {metrics!r}")
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"report(checkpoint=...) takes a tuneplat Checkpoint, got {type(checkpoint).__name__}")
        self.iteration += 1
        self.metrics = {str(k): _plain(v) for k, v in metrics.items()}
        self.history.append(dict(self.metrics, training_iteration=self.iteration))
        if checkpoint is not None:  # kept as given (Ray's local mode does not copy it)
            self.checkpoint = checkpoint


def run_local(trainer: DataParallelTrainer, fn: Any) -> Result:
    """Run ``fn`` (``trainer``'s training function, taking the config) once in this thread; its Result.

    Raises:
        WorkerGroupError: the function raised (``worker_failures[0]`` is its exception).
    """
    from ..results._result import Result
    from ._errors import WorkerGroupError
    from ._session import current_session

    run_config = trainer.run_config
    name = (run_config.name if run_config is not None else None) or f"{trainer._name}_local"
    spec = RankSpec(trial_id="", trial_name=name, experiment_name=name, trial_dir=os.getcwd(), attempt=0, rank=0,
                    world_size=1, local_rank=0, local_world_size=1, node_rank=0, tuner_addr=("127.0.0.1", 0),
                    token=b"", config={"train_loop_config": dict(trainer.train_loop_config)})
    session = LocalSession(spec)
    outer_thread = getattr(_local, "session", None)
    outer = current_session()
    from . import _session as sessions

    process_outer = sessions._process_session
    _set_session(session, process_wide=outer is None)  # type: ignore[arg-type]
    value: Any = None
    try:
        value = fn({"train_loop_config": dict(trainer.train_loop_config)})
    except Exception as exc:  # noqa: BLE001 - Ray's local mode: the function's own error, as the rank's
        raise WorkerGroupError(f"rank 0: {type(exc).__name__}: {exc}", {0: exc}) from exc
    finally:
        _local.session = outer_thread
        sessions._process_session = process_outer
        for cleanup in session.cleanups:
            cleanup()
    result = Result(config={"train_loop_config": dict(trainer.train_loop_config)}, metrics=session.metrics or {},
                    path=None,  # type: ignore[arg-type]  # (Ray's local mode has no run folder either)
                    checkpoint=session.checkpoint, _history=session.history)
    result.return_value = value
    return result
