"""``ray.tune.execution.tune_controller``: what a resource allocation function gets as ``tune_controller``.

``TuneController`` is :class:`~tuneplat.schedulers.resource_changing_scheduler.TuneControllerView`, the
read-only view of the running experiment with Ray's ``get_live_trials()``, ``get_trials()`` and
``_resource_updater`` (for type annotations of ported allocation functions).
"""

from __future__ import annotations

from ..schedulers.resource_changing_scheduler import TuneControllerView as TuneController

__all__ = ["TuneController"]
