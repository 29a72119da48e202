"""TensorFlow in tuneplat's worker groups (``tuneplat.train.tensorflow``, like ``ray.train.tensorflow``).

:class:`TensorflowTrainer` runs the training function on ``num_workers`` ranks,
each with the ``TF_CONFIG`` of one ``MultiWorkerMirroredStrategy`` group;
:func:`prepare_dataset_shard` readies a per-rank ``tf.data.Dataset`` (no
auto-sharding: it is already the rank's shard); :mod:`.keras` has the Keras
callbacks that report and checkpoint.

Example (Ray's ``tensorflow_quick_start.py``, imports changed):
    >>> def train_func_distributed():  # doctest: +SKIP
    ...     strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ...     with strategy.scope():
    ...         model = build_and_compile_cnn_model()
    ...     model.fit(dataset, epochs=3, steps_per_epoch=70)
    >>> TensorflowTrainer(train_func_distributed, scaling_config=ScalingConfig(num_workers=2)).fit()  # doctest: +SKIP

Needs the ``tensorflow`` extra (``pip install 'tuneplat[tensorflow]'``: TensorFlow and tf-keras).
"""

from __future__ import annotations

from .._extras import require

require("tensorflow", "tensorflow", "tuneplat.train.tensorflow")

from ._checkpoint import TensorflowCheckpoint  # noqa: E402
from ._config import TensorflowConfig  # noqa: E402
from ._trainer import TensorflowTrainer  # noqa: E402
from ._utils import prepare_dataset_shard  # noqa: E402

__all__ = ["TensorflowCheckpoint", "TensorflowConfig", "TensorflowTrainer", "prepare_dataset_shard"]
