"""``ray.train.v2.api``: see :mod:`tuneplat.train.v2`."""
