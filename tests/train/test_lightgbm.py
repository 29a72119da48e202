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


def test_legacy_form_and_bad_arguments_are_refused():
    from tuneplat.tune.integration.lightgbm import TuneReportCallback, TuneReportCheckpointCallback

    from tuneplat.train import BackendConfig
    from tuneplat.train.lightgbm import get_network_params

    with pytest.raises(DeprecationWarning, match="The legacy LightGBMTrainer API is deprecated.*lightgbm.train"):
        LightGBMTrainer(label_column="y", params={"objective": "binary"}, num_boost_round=10)
    with pytest.raises(TypeError, match="LightGBMConfig"):
        LightGBMTrainer(bt.lgb_loop, lightgbm_config=BackendConfig())
    with pytest.raises(DeprecationWarning, match="TuneReportCheckpointCallback"):
        TuneReportCallback()
    with pytest.raises(ValueError, match="filename"):
        TuneReportCheckpointCallback(filename="")
    assert get_network_params() == {}  # outside a LightGBMTrainer's rank (Ray: a warning and {})


def test_normalize_pandas_for_lightgbm_maps_arrow_dtypes():
    import pandas as pd
    pa = pytest.importorskip("pyarrow")
    from tuneplat.train.lightgbm import normalize_pandas_for_lightgbm

    df = pd.DataFrame({"i": pd.array([1, 2], dtype=pd.ArrowDtype(pa.int32())),
                       "f": pd.array([1.5, None], dtype=pd.ArrowDtype(pa.float64())),
                       "b": pd.array([True, False], dtype=pd.ArrowDtype(pa.bool_())),
                       "s": pd.array(["a", "b"], dtype=pd.ArrowDtype(pa.string())), "n": [1, 2]})
    out = normalize_pandas_for_lightgbm(df)
    assert {c: str(t) for c, t in out.dtypes.items()} == {"i": "Int32", "f": "Float64", "b": "boolean",
                                                          "s": "string[pyarrow]", "n": "int64"}
    lightgbm.Dataset(out[["i", "f", "b", "n"]], label=[0, 1]).construct()  # LightGBM takes it now


def test_missing_extra_names_it():
    import subprocess
    import sys

    code = ("import sys; sys.modules['lightgbm'] = None\n"
            "for m in ('tuneplat.train.lightgbm', 'tuneplat.tune.integration.lightgbm'):\n"
            "    try:\n        __import__(m)\n    except ImportError as e:\n        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.count("pip install 'tuneplat[lightgbm]'") == 2, out.stdout + out.stderr
