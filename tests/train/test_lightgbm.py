"""LightGBMTrainer on the real 2-worker LocalCluster: one model from two ranks through LightGBM's own network."""

from __future__ import annotations

import numpy as np
import pytest

lightgbm = pytest.importorskip("lightgbm", reason="the lightgbm extra is not installed (pip install 'tuneplat[lightgbm]')")

import boost_trainables as bt  # noqa: E402

import tuneplat as tune  # noqa: E402
from tuneplat.train.lightgbm import LightGBMTrainer, RayTrainReportCallback  # noqa: E402


def test_two_ranks_train_the_single_process_model(dask_client, tmp_path):
    frame = bt.make_frame(seed=3)
    trainer = LightGBMTrainer(bt.lgb_loop, train_loop_config={"rounds": 10}, datasets={"train": frame},
                              scaling_config=tune.ScalingConfig(num_workers=2), client=dask_client,
                              run_config=tune.RunConfig(name="lgb2", storage_path=str(tmp_path / "results"),
                                                        verbose=0, mlflow=False))
    result = trainer.fit()
    assert result.metrics["training_iteration"] == 10
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    assert booster.current_iteration() == 10
    X = frame.drop("y", axis=1)
    reference = lightgbm.train(bt.LGB_PARAMS, lightgbm.Dataset(X, label=frame["y"]), num_boost_round=10)
    want = reference.predict(X)
    np.testing.assert_allclose(booster.predict(X), want, rtol=0, atol=1e-6)
    half = lightgbm.train(bt.LGB_PARAMS, lightgbm.Dataset(X.iloc[:1000], label=frame["y"].iloc[:1000]),
                          num_boost_round=10)
    assert np.abs(half.predict(X) - want).max() > 1e-3  # a rank alone would give another model
