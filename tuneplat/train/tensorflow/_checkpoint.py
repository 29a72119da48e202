"""``TensorflowCheckpoint``: a Keras model in a tuneplat checkpoint (``ray.train.tensorflow.TensorflowCheckpoint``)."""

from __future__ import annotations

import os
import shutil
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

    @classmethod
    def from_h5(cls, file_path: str, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint holding a copy of the Keras model file ``file_path`` (``model.save("x.h5")``)."""
        if not os.path.isfile(file_path) or not file_path.endswith(".h5"):
            raise ValueError(f"TensorflowCheckpoint.from_h5({file_path!r}): give the path of an existing .h5 file "
                             "(what model.save('model.h5') wrote)")
        cls._no_preprocessor(preprocessor, "from_h5")
        folder = tempfile.mkdtemp(prefix="tuneplat-keras-")
        name = os.path.basename(file_path)
        shutil.copy(file_path, os.path.join(folder, name))
        ckpt = cls(folder)
        ckpt.update_metadata({cls.MODEL_FILENAME_KEY: name})
        return ckpt

    @classmethod
    def from_saved_model(cls, dir_path: str, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint holding a copy of the SavedModel folder ``dir_path`` (Keras 2's ``model.save(dir)``;
        Keras 3 loads SavedModels only for inference, with ``keras.layers.TFSMLayer``)."""
        if not os.path.isdir(dir_path):
            raise ValueError(f"TensorflowCheckpoint.from_saved_model({dir_path!r}): give an existing SavedModel "
                             "folder (what Keras 2's model.save(folder) wrote)")
        cls._no_preprocessor(preprocessor, "from_saved_model")
        folder = os.path.join(tempfile.mkdtemp(prefix="tuneplat-keras-"), "model")
        shutil.copytree(dir_path, folder)
        ckpt = cls(folder)
        ckpt.update_metadata({cls.MODEL_FILENAME_KEY: "."})  # the whole folder is the model, as in Ray
        return ckpt

    @staticmethod
    def _no_preprocessor(preprocessor: Any, where: str) -> None:
        if preprocessor is not None:
            raise NotImplementedError(f"TensorflowCheckpoint.{where}(preprocessor=...) is not ported (Ray "
                                      "deprecated preprocessors): save it next to the model yourself.")

    def get_model(self) -> Any:
        """The Keras model stored in this checkpoint (loaded with the Keras that ``tf.keras`` is here)."""
        import tensorflow as tf

        name = self.get_metadata().get(self.MODEL_FILENAME_KEY, MODEL_FILENAME)
        with self.as_directory() as folder:
            return tf.keras.models.load_model(os.path.join(folder, name))
