"""``ray.tune.integration``: glue between Tune and other libraries (``tuneplat.tune.integration``)."""
