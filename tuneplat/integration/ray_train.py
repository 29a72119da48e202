"""``ray.tune.integration.ray_train``: Ray Train V2's results reaching the Tune trial that runs the training.

Ray 2.60 documents tuning a Train run with a function trainable that builds
and fits a ``TorchTrainer`` per trial::

    from tuneplat import train, tune
    from tuneplat.tune.integration.ray_train import TuneReportCallback

    def train_driver_fn(config):
        trainer = train.torch.TorchTrainer(
            train_fn_per_worker, train_loop_config=config["train_loop_config"],
            scaling_config=train.ScalingConfig(num_workers=2),
            run_config=train.RunConfig(name=f"train-trial_id={tune.get_context().get_trial_id()}",
                                       callbacks=[TuneReportCallback()]))
        trainer.fit()

Each trial's function holds one worker slot; its TorchTrainer's ranks are
placed beside it by the same tuner (``docs/porting-from-ray.md``).
"""

from __future__ import annotations

import logging
from typing import Any

from ..tracking._user_callbacks import Callback

__all__ = ["CHECKPOINT_PATH_KEY", "TuneReportCallback"]

logger = logging.getLogger("tuneplat")

#: the metric holding the path of the checkpoint reported with a result (Ray's key)
CHECKPOINT_PATH_KEY = "checkpoint_path"

#: what the tuner adds to every result: the Tune trial adds its own
_AUTOMATIC = frozenset({
    "training_iteration", "time_this_iter_s", "time_total_s", "timestamp", "iterations_since_restore", "trial_id",
    "pid", "hostname", "date", "done", "node_ip", "time_since_restore", "experiment_tag", "should_checkpoint",
})


class TuneReportCallback(Callback):
    """Reports each result of a Trainer run to the Tune trial that runs it (``ray.tune.integration.ray_train``).

    Put it in the Trainer's ``RunConfig(callbacks=[...])``. Every result rank 0
    reports becomes a result of the enclosing trial (the keys the trainer's own
    tuner adds, such as ``training_iteration``, are left for the trial to fill
    in), with ``"checkpoint_path"`` when a checkpoint came with it (the
    checkpoint stays where the Trainer's run stored it). When the trial's
    scheduler stops the trial, the Trainer's run ends with it.
    Outside a Tune trial it does nothing.
    """

    def __init__(self) -> None:
        self._warned = False

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        from ..train._session import current_session, report

        if current_session() is None:
            if not self._warned:
                self._warned = True
                logger.info("tuneplat: TuneReportCallback: this Trainer runs outside a Tune trial; nothing to report to")
            return
        metrics = {k: v for k, v in result.items() if k not in _AUTOMATIC}
        if trial.checkpoints and _same_step(trial.checkpoints[-1][1], result):  # the checkpoint of this result
            metrics[CHECKPOINT_PATH_KEY] = trial.checkpoints[-1][0].path
        report(metrics)


def _same_step(checkpoint_metrics: dict[str, Any], result: dict[str, Any]) -> bool:
    """Whether a checkpoint's metrics are those of ``result`` (callbacks get a copy of the result: compare steps)."""
    step = result.get("training_iteration")
    return step is not None and checkpoint_metrics.get("training_iteration") == step
