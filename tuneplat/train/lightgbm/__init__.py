"""Distributed LightGBM on the Dask cluster (``tuneplat.train.lightgbm``, like ``ray.train.lightgbm``).

:class:`LightGBMTrainer` runs your function on every rank; :func:`get_network_params`
gives each rank LightGBM's ``machines``/``local_listen_port``/``num_machines``
(:class:`LightGBMConfig`), so ``lightgbm.train(..., tree_learner="data_parallel")``
trains one model over every rank's rows through LightGBM's own network;
:class:`RayTrainReportCallback` reports each round and saves the booster. See
``docs/boosting.md``.

Needs the ``lightgbm`` extra: ``pip install 'tuneplat[lightgbm]'``.
"""

from __future__ import annotations

from .._extras import require

require("lightgbm", "lightgbm", "tuneplat.train.lightgbm")

from ._callback import RayTrainReportCallback, normalize_pandas_for_lightgbm  # noqa: E402
from ._checkpoint import LightGBMCheckpoint  # noqa: E402
from ._config import LightGBMConfig, get_network_params  # noqa: E402
from ._trainer import LightGBMTrainer  # noqa: E402

__all__ = ["LightGBMCheckpoint", "LightGBMConfig", "LightGBMTrainer", "RayTrainReportCallback", "get_network_params",
           "normalize_pandas_for_lightgbm"]
