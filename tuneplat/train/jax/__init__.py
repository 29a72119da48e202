"""JAX in tuneplat's worker groups (``tuneplat.train.jax``, like Ray Train V2's ``ray.train.v2.jax``).

:class:`JaxTrainer` runs the training function on ``num_workers`` processes
joined by ``jax.distributed.initialize`` (done for you, coordinator on rank 0),
on CPUs or GPUs.

Example:
    >>> def train_func(config):  # doctest: +SKIP
    ...     import jax
    ...     # jax.process_count() == 2; jax.devices() lists both processes' devices
    ...     ...
    >>> JaxTrainer(train_func, scaling_config=ScalingConfig(num_workers=2)).fit()  # doctest: +SKIP

Needs the ``jax`` extra (``pip install 'tuneplat[jax]'``).
"""

from __future__ import annotations

from .._extras import require

require("jax", "jax", "tuneplat.train.jax")

from ._config import JaxConfig  # noqa: E402
from ._trainer import JaxTrainer  # noqa: E402

__all__ = ["JaxConfig", "JaxTrainer"]
