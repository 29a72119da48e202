"""``ray.train.v2.jax`` (where Ray 2.x publishes ``JaxTrainer``): the same objects as ``tuneplat.train.jax``.

Needs the ``jax`` extra (``pip install 'tuneplat[jax]'``).
"""

from __future__ import annotations

from ...jax import JaxConfig, JaxTrainer

__all__ = ["JaxConfig", "JaxTrainer"]
