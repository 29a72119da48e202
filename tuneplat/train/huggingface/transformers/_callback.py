"""``RayTrainReportCallback``: the Trainer's logged metrics and saved checkpoints, reported to the tuner."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

import transformers.trainer
from transformers.trainer_callback import TrainerCallback

from ....storage._checkpoint import Checkpoint
from ... import _session as _sessions

__all__ = ["CHECKPOINT_NAME", "RayTrainReportCallback"]

logger = logging.getLogger("tuneplat")

#: the folder inside a reported checkpoint that holds the Trainer's ``checkpoint-<step>`` files (Ray's name)
CHECKPOINT_NAME = "checkpoint"


def _shares_folder_with_rank0(session: Any) -> bool:
    """Whether this (non-zero) rank writes into the same folders as rank 0 (same host: same trial folder)."""
    return session is not None and session.spec.rank != 0 and session.spec.host == os.environ.get("MASTER_ADDR")


class RayTrainReportCallback(TrainerCallback):
    """Reports the Trainer's metrics and each checkpoint it saves (``ray.train.huggingface.transformers``).

    On every save (``save_strategy``), the metrics logged so far (the
    Trainer's ``log_history`` merged, latest values winning: training loss,
    ``eval_*`` metrics, ``epoch``, ``step``) are reported with a copy of the
    checkpoint folder the Trainer just wrote, under ``checkpoint/`` inside the
    reported checkpoint (as in Ray). ``report()`` is a collective: every rank
    reaches it at the same save; when the tuner decides STOP (ASHA, a stopper),
    it ends ``trainer.train()`` on every rank.

    Align ``eval_strategy``, ``logging_strategy`` and ``save_strategy`` (all
    ``"epoch"``, or ``"steps"`` with ``save_steps`` a multiple of
    ``eval_steps``) so that the metric the scheduler reads is fresh at each
    save.

    Example:
        >>> trainer.add_callback(RayTrainReportCallback())  # doctest: +SKIP
    """

    CHECKPOINT_NAME = CHECKPOINT_NAME

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Count the optimizer step for the rank's steps/s and samples/s (``tuneplat status --workers``)."""
        session = _sessions.current_session()
        if session is not None:
            session.monitor.on_batch(int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps))

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """After the Trainer saved a checkpoint: report the latest metrics with a copy of it."""
        metrics: dict[str, Any] = {}
        for entry in state.log_history:
            metrics.update(entry)
        metrics.setdefault("step", state.global_step)
        if state.epoch is not None:
            metrics.setdefault("epoch", state.epoch)
        session = _sessions.current_session()
        _barrier()  # every rank has written its part (rank 0 the model, each rank its RNG state) before any copy
        source = transformers.trainer.get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
        if source is None or _shares_folder_with_rank0(session):
            # rank 0 copies the folder it shares with this rank (this rank's files included)
            _sessions.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="tuneplat-hf-") as tmp:
            shutil.copytree(source, os.path.join(tmp, CHECKPOINT_NAME))
            _sessions.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


def _barrier() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
    except RuntimeError:  # a peer failed: report() tells this rank what happened to the group
        logger.debug("tuneplat: barrier before a checkpoint copy failed", exc_info=True)
