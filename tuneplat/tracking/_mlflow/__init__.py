"""MLflow tracking: one parent run per ``fit()``, one nested child run per trial.

The callback's hooks run on the tuner's loop thread and only append small
events to a queue. A writer thread ships them to a child process
(:func:`_child_main`, the uploader) that folds them into per-run buffers and
sends them with ``MlflowClient.log_batch`` (one call for many values). MLflow
runs in its own process so that its CPU work (SQLAlchemy, HTTP) never
competes with the tuner's loop for the GIL: the trial's ``report()`` path
never waits on MLflow. The uploader process outlives one ``fit()``
(:class:`_Pool`): it is started when the callback is made, imports MLflow
while the cluster starts, and serves the next ``fit()`` of the same Python
process as well. When the tracking server is down, the buffers stay and
are retried with backoff; at the end of the experiment the backlog is flushed
with a bounded wait and whatever could not be logged is reported in a warning
(and in ``<experiment>/mlflow_unlogged.json``).

The package, by job: ``_format`` (names and values), ``_uploader`` (the child's
buffers and MLflow calls), ``_sqlite`` (the embedded store), ``_process`` (the
uploader process, its session and pool), ``_callback`` (the tuner's hooks).
"""

from __future__ import annotations

from ._callback import MLflowCallback
from ._format import IDS_FILE, default_tracking_uri, experiment_tags
from ._process import _child_main

__all__ = ["IDS_FILE", "MLflowCallback", "_child_main", "default_tracking_uri", "experiment_tags"]
