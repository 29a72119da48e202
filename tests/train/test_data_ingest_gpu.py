"""Dataset shards on a GPU rank: ``iter_torch_batches(device="auto")`` lands on the rank's GPU (run on a GPU machine)."""

from __future__ import annotations

import data_trainables as dt
import numpy as np
import pandas as pd
import pytest
import torch

import tuneplat as tune
from tuneplat.train.torch import TorchTrainer


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_batches_land_on_the_ranks_gpu(storage):
    df = pd.DataFrame({"a": np.arange(256.0), "b": np.ones(256), "y": np.arange(256.0) * 0.5})
    trainer = TorchTrainer(dt.gpu_batches, datasets={"train": df},
                           scaling_config=tune.ScalingConfig(num_workers=1, use_gpu=True),
                           run_config=tune.RunConfig(name="gpu_data", storage_path=storage, verbose=0, mlflow=False))
    result = trainer.fit()
    device = result.metrics["device"]
    assert device.startswith("cuda")
    assert result.metrics["devices"] == [device]
    assert result.metrics["collated"] == "cpu"  # collate_fn's output is not moved (as in Ray)
    assert np.isfinite(result.metrics["loss"])
