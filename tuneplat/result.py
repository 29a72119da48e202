"""Result keys under Ray's names (``ray.tune.result``): ``from tuneplat.result import SHOULD_CHECKPOINT``.

Keys tuneplat fills in every result: ``TRAINING_ITERATION``, ``TIME_THIS_ITER_S``,
``TIME_TOTAL_S``, ``TIMESTAMP``, ``ITERATIONS_SINCE_RESTORE``, ``TRIAL_ID``,
``PID``, ``HOSTNAME``, ``EXPERIMENT_TAG``; ``DONE`` on class trainables and when reported.
``SHOULD_CHECKPOINT`` set to True in a result (by the trainable, or by a
callback's ``on_trial_result``) makes a class trainable save a checkpoint of
that step. The others are Ray's names, for scripts that import them.
"""

from __future__ import annotations

__all__ = [
    "AUTO_RESULT_KEYS", "DEFAULT_METRIC", "DONE", "EPISODES_TOTAL", "EXPERIMENT_TAG", "EXPR_PARAM_FILE", "EXPR_PROGRESS_FILE",
    "EXPR_RESULT_FILE", "HOSTNAME", "ITERATIONS_SINCE_RESTORE", "MEAN_ACCURACY", "MEAN_LOSS", "NODE_IP", "PID",
    "SHOULD_CHECKPOINT", "TIMESTAMP", "TIMESTEPS_TOTAL", "TIME_THIS_ITER_S", "TIME_TOTAL_S", "TRAINING_ITERATION",
    "TRIAL_ID",
]

#: the key a returned or reported single number goes under
DEFAULT_METRIC = "_metric"
SHOULD_CHECKPOINT = "should_checkpoint"
DONE = "done"
TRAINING_ITERATION = "training_iteration"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TIMESTAMP = "timestamp"
ITERATIONS_SINCE_RESTORE = "iterations_since_restore"
TRIAL_ID = "trial_id"
PID = "pid"
HOSTNAME = "hostname"
#: Ray's short text of a trial's index and config values ("0_lr=0.0100,momentum=0.9000")
EXPERIMENT_TAG = "experiment_tag"
NODE_IP = "node_ip"  # (Ray's; not filled in by tuneplat)
MEAN_ACCURACY = "mean_accuracy"
MEAN_LOSS = "mean_loss"
TIMESTEPS_TOTAL = "timesteps_total"  # (Ray's; not filled in by tuneplat)
EPISODES_TOTAL = "episodes_total"  # (Ray's; not filled in by tuneplat)
#: per-trial files (Ray's names)
EXPR_PARAM_FILE = "params.json"
EXPR_RESULT_FILE = "result.json"
EXPR_PROGRESS_FILE = "progress.csv"
#: the keys tuneplat adds to every result
AUTO_RESULT_KEYS = (TRAINING_ITERATION, TIME_THIS_ITER_S, TIME_TOTAL_S, TIMESTAMP, ITERATIONS_SINCE_RESTORE,
                    TRIAL_ID, PID, HOSTNAME, EXPERIMENT_TAG, DONE)
