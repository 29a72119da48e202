"""``TensorflowCheckpoint``: a Keras model in a tuneplat checkpoint (``ray.train.tensorflow.TensorflowCheckpoint``)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ...storage._checkpoint import Checkpoint

__all__ = ["TensorflowCheckpoint"]

MODEL_FILENAME = "model.keras"


class TensorflowCheckpoint(Checkpoint):
    """A checkpoint holding a Keras model saved with ``model.save(<dir>/model.keras)``.

    Example:
        >>> ckpt = TensorflowCheckpoint.from_model(model)  # doctest: +SKIP
        >>> model = ckpt.get_model()  # doctest: +SKIP
    """

    MODEL_FILENAME_KEY = "_model_filename"

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """Save ``model`` (Keras 2 or 3) into a new temporary folder and return it as a checkpoint."""
        if preprocessor is not None:
            raise NotImplementedError("TensorflowCheckpoint.from_model(preprocessor=...) is not ported (Ray "
                                      "deprecated preprocessors): save it next to the model yourself.")
        folder = tempfile.mkdtemp(prefix="tuneplat-keras-")
        model.save(os.path.join(folder, MODEL_FILENAME))
        ckpt = cls(folder)
        ckpt.update_metadata({cls.MODEL_FILENAME_KEY: MODEL_FILENAME})
        return ckpt

    def get_model(self) -> Any:
        """The Keras model stored in this checkpoint (loaded with the Keras that ``tf.keras`` is here)."""
        import tensorflow as tf

        name = self.get_metadata().get(self.MODEL_FILENAME_KEY, MODEL_FILENAME)
        with self.as_directory() as folder:
            return tf.keras.models.load_model(os.path.join(folder, name))
