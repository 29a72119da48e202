"""Ray Train V2's module paths (``ray.train.v2...``), as Ray's guides import them: the same objects as ``tuneplat.train``.

``from ray.train.v2.api.config import ScalingConfig`` ports to
``from tuneplat.train.v2.api.config import ScalingConfig``: one class either way.
"""
