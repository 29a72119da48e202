"""XGBoostTrainer on the real 2-worker LocalCluster: one model from two ranks through xgboost's own collective."""

from __future__ import annotations

import numpy as np
import pytest

xgboost = pytest.importorskip("xgboost", reason="the xgboost extra is not installed (pip install 'tuneplat[xgboost]')")

import boost_trainables as bt  # noqa: E402

import tuneplat as tune  # noqa: E402
from tuneplat.schedulers import ASHAScheduler  # noqa: E402
from tuneplat.train import BackendConfig  # noqa: E402
from tuneplat.train.xgboost import RayTrainReportCallback, XGBoostConfig, XGBoostTrainer  # noqa: E402


def _rc(tmp_path, name: str, **kw) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=str(tmp_path / "results"), verbose=0, mlflow=False, **kw)


def _single_process(frame, rounds: int) -> xgboost.Booster:
    d = xgboost.DMatrix(frame.drop("y", axis=1), label=frame["y"])
    return xgboost.train(bt.PARAMS, d, num_boost_round=rounds)


def _predict(booster: xgboost.Booster, frame) -> np.ndarray:
    return booster.predict(xgboost.DMatrix(frame.drop("y", axis=1)))


def test_two_ranks_train_the_single_process_model(dask_client, tmp_path):
    frame = bt.make_frame()
    trainer = XGBoostTrainer(bt.xgb_loop, train_loop_config={"rounds": 10}, datasets={"train": frame},
                             scaling_config=tune.ScalingConfig(num_workers=2), run_config=_rc(tmp_path, "xgb2"),
                             client=dask_client)
    result = trainer.fit()
    assert result.metrics["training_iteration"] == 10  # one report per boosting round
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 10
    reference = _single_process(frame, 10)
    got, want = _predict(booster, frame), _predict(reference, frame)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # each rank trained on half the rows: a rank alone would give another model
    half = _single_process(frame.iloc[: len(frame) // 2], 10)
    assert np.abs(_predict(half, frame) - want).max() > 1e-3
    assert abs(result.metrics["rmse"] - float(reference.eval(xgboost.DMatrix(frame.drop("y", axis=1),
                                                                                 label=frame["y"])).split(":")[1])) < 1e-5


def test_matches_xgboost_dask_train_on_the_same_collection(dask_client, tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    import xgboost.dask  # noqa: F401 - (a submodule: not imported by `import xgboost`)
    frame = bt.make_frame(seed=1)
    ddf = dask_client.persist(dd.from_pandas(frame, npartitions=2, sort=False))
    with dask_client.as_current():  # (xgboost.dask looks the client's type up on the current client)
        dtrain = xgboost.dask.DaskDMatrix(dask_client, ddf.drop(columns="y"), ddf["y"])
        dask_model = xgboost.dask.train(dask_client, bt.PARAMS, dtrain, num_boost_round=8)["booster"]
    trainer = XGBoostTrainer(bt.xgb_loop, train_loop_config={"rounds": 8, "frequency": 0},
                             datasets={"train": ddf}, scaling_config=tune.ScalingConfig(num_workers=2),
                             run_config=_rc(tmp_path, "xgb_vs_dask"), client=dask_client)
    booster = RayTrainReportCallback.get_model(trainer.fit().checkpoint)
    want = _predict(dask_model, frame)
    np.testing.assert_allclose(_predict(booster, frame), want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(_predict(_single_process(frame, 8), frame), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failing_rank_resumes_from_the_booster_checkpoint(dask_client, tmp_path, how):
    frame = bt.make_frame(seed=2)
    trainer = XGBoostTrainer(bt.xgb_loop, train_loop_config={"rounds": 10, "fail_at": 4, "fail_how": how},
                             datasets={"train": frame},
                             scaling_config=tune.ScalingConfig(num_workers=2),
                             run_config=_rc(tmp_path, f"xgb_retry_{how}", failure_config=tune.FailureConfig(max_failures=1)),
                             client=dask_client)
    result = trainer.fit()
    history = result.metrics_dataframe
    # rounds 0-3 reported and checkpointed on the first attempt, rank 1 failed in round 4 (before its report:
    # raised, or its process died while rank 0 waited in xgboost's allreduce);
    # the retry loaded the 4-round booster and boosted rounds 4-9: every round reported once, none lost
    assert list(history["training_iteration"]) == list(range(1, 11))
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 10
    np.testing.assert_allclose(_predict(booster, frame), _predict(_single_process(frame, 10), frame), rtol=0,
                               atol=1e-6)


def test_trainer_in_a_tuner_asha_stops_boosting_trials_and_the_best_checkpoint_is_a_booster(dask_client, tmp_path):
    frame = bt.make_frame(1000, seed=4)
    trainer = XGBoostTrainer(bt.xgb_loop, train_loop_config={"rounds": 10}, datasets={"train": frame},
                             scaling_config=tune.ScalingConfig(num_workers=1))
    etas = [0.3, 0.001, 0.002, 0.003]  # three that barely move: ASHA stops them at its rungs
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {"params": {"eta": tune.grid_search(etas)}}},
                      tune_config=tune.TuneConfig(metric="rmse", mode="min", max_concurrent_trials=1,
                                                  scheduler=ASHAScheduler(max_t=10, grace_period=1,
                                                                                          reduction_factor=2)),
                      run_config=_rc(tmp_path, "xgb_asha"), client=dask_client).fit()
    assert not grid.errors
    rounds = {r.config["train_loop_config"]["params"]["eta"]: r.metrics["training_iteration"] for r in grid}
    assert rounds[0.3] == 10
    stopped = [eta for eta, n in rounds.items() if n < 10]
    assert len(stopped) >= 2, rounds  # ASHA stopped boosting trials between rounds
    best = grid.get_best_result()
    assert best.config["train_loop_config"]["params"]["eta"] == 0.3
    booster = RayTrainReportCallback.get_model(best.checkpoint)
    assert booster.num_boosted_rounds() == 10


def test_resume_from_checkpoint_continues_the_booster(dask_client, tmp_path):
    frame = bt.make_frame(1000, seed=6)
    d = xgboost.DMatrix(frame.drop("y", axis=1), label=frame["y"])
    four = xgboost.train(bt.PARAMS, d, num_boost_round=4)
    (tmp_path / "start").mkdir()
    four.save_model(str(tmp_path / "start" / "model.ubj"))
    trainer = XGBoostTrainer(bt.xgb_loop, train_loop_config={"rounds": 10}, datasets={"train": frame},
                             resume_from_checkpoint=tune.Checkpoint.from_directory(tmp_path / "start"),
                             scaling_config=tune.ScalingConfig(num_workers=1), run_config=_rc(tmp_path, "xgb_resume"),
                             client=dask_client)
    result = trainer.fit()
    assert result.metrics["training_iteration"] == 6  # rounds 5-10 of the model
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 10
    np.testing.assert_allclose(_predict(booster, frame), _predict(_single_process(frame, 10), frame), atol=1e-6, rtol=0)


def test_tune_callback_reports_every_round(dask_client, tmp_path):
    from tuneplat.tune.integration.xgboost import TuneReportCheckpointCallback

    grid = tune.Tuner(bt.xgb_tune_fn, param_space={"eta": 0.3}, run_config=_rc(tmp_path, "xgb_tune_cb"),
                      client=dask_client).fit()
    result = grid[0]
    assert list(result.metrics_dataframe["training_iteration"]) == list(range(1, 11))
    assert TuneReportCheckpointCallback.get_model(result.checkpoint).num_boosted_rounds() == 10


def test_a_bad_param_fails_its_trial_with_xgboosts_own_error(dask_client, tmp_path):
    grid = tune.Tuner(bt.xgb_tune_fn, param_space={"eta": 0.3, "params": {"objective": tune.grid_search(
        ["reg:squarederror", "reg:no_such_objective"])}}, run_config=_rc(tmp_path, "xgb_bad_param"),
        client=dask_client).fit()
    ok, bad = sorted(grid, key=lambda r: r.config["params"]["objective"] != "reg:squarederror")
    assert ok.error is None and ok.metrics["training_iteration"] == 10  # the other trial is untouched
    assert bad.error is not None and bad.error.trial_id and bad.error.trial_id in bad.path  # the trial is named
    assert "XGBoostError" in str(bad.error) and "reg:no_such_objective" in str(bad.error)


def test_legacy_form_and_bad_arguments_are_refused():
    with pytest.raises(DeprecationWarning, match="The legacy XGBoostTrainer API is deprecated.*train_fn_per_worker"):
        XGBoostTrainer(label_column="y", params={"objective": "binary:logistic"}, datasets={})
    with pytest.raises(ValueError, match="xgboost_communicator"):
        XGBoostConfig(xgboost_communicator="nccl")
    with pytest.raises(TypeError, match="XGBoostConfig"):
        XGBoostTrainer(bt.xgb_loop, xgboost_config=BackendConfig())
    with pytest.raises(DeprecationWarning, match="RayTrainReportCallback.get_model"):
        XGBoostTrainer.get_model(None)
    from tuneplat.tune.integration.xgboost import TuneReportCallback, TuneReportCheckpointCallback

    with pytest.raises(DeprecationWarning, match="TuneReportCheckpointCallback"):
        TuneReportCallback()
    with pytest.raises(ValueError, match="frequency"):
        TuneReportCheckpointCallback(frequency=-1)
    with pytest.raises(TypeError, match="metrics"):
        RayTrainReportCallback(metrics=3)


def test_missing_extra_names_it():
    import subprocess
    import sys

    code = ("import sys; sys.modules['xgboost'] = None\n"
            "for m in ('tuneplat.train.xgboost', 'tuneplat.tune.integration.xgboost'):\n"
            "    try:\n        __import__(m)\n    except ImportError as e:\n        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.count("pip install 'tuneplat[xgboost]'") == 2, out.stdout + out.stderr


_TORCH_FREE_SCRIPT = '''
import json, sys

import boost_trainables as bt
import tuneplat as tune
from tuneplat.train.xgboost import XGBoostTrainer


def torch_modules():
    return sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))[:5]


if __name__ == "__main__":
    probe_dir, storage = sys.argv[1], sys.argv[2]
    out = {"driver_after_import": torch_modules()}
    rc = tune.RunConfig(name="xgb_torch_free", storage_path=storage, verbose=0, mlflow=False)
    trainer = XGBoostTrainer(bt.torch_probe_loop, datasets={"train": bt.make_frame()}, run_config=rc,
                             train_loop_config={"rounds": 10, "loop": "xgb_loop", "probe_dir": probe_dir},
                             scaling_config=tune.ScalingConfig(num_workers=2))
    result = trainer.fit()  # the embedded cluster: 2 fresh worker processes (TUNEPLAT_NUM_CPUS=2)
    out.update(checkpoint=result.checkpoint.path, rounds=result.metrics["training_iteration"])
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        pass
    else:  # the same for LightGBMTrainer, on the same (still torch-free) worker processes
        from tuneplat.train.lightgbm import LightGBMTrainer

        lgb = LightGBMTrainer(bt.torch_probe_loop, datasets={"train": bt.make_frame()},
                              train_loop_config={"rounds": 5, "loop": "lgb_loop", "probe_dir": probe_dir},
                              scaling_config=tune.ScalingConfig(num_workers=2),
                              run_config=tune.RunConfig(name="lgb_torch_free", storage_path=storage, verbose=0,
                                                        mlflow=False))
        out["lgb_rounds"] = lgb.fit().metrics["training_iteration"]
    out["driver_after_fit"] = torch_modules()
    print("RESULT " + json.dumps(out))
'''


@pytest.mark.timeout(600)  # a fresh driver and cluster: 3 min measured at load 26 here (the default limit is 300 s)
def test_boosting_ranks_and_driver_never_import_torch(tmp_path):
    # Fresh processes (a driver and the embedded cluster's 2 worker processes, as a user's first fit() gets): the
    # ranks' rendezvous of a non-torch backend goes through the tuner, not torch's TCPStore, and nothing else on the
    # way (session, report callback, checkpoint, dataset shard, embedded cluster) imports torch. The shared cluster's
    # workers cannot tell: other tests imported torch there. (Fails on the build with the TCPStore rendezvous.)
    import json
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    script = tmp_path / "torch_free.py"
    script.write_text(_TORCH_FREE_SCRIPT, encoding="utf-8")
    probes = tmp_path / "probes"
    probes.mkdir()
    env = {**os.environ, "TUNEPLAT_NUM_CPUS": "2",
           "PYTHONPATH": os.pathsep.join([root, os.path.dirname(here), here, os.environ.get("PYTHONPATH", "")])}
    env.pop("TUNEPLAT_PRELOAD_IMPORTS", None)  # the default: workers import nothing ahead of the trial
    proc = subprocess.run([sys.executable, str(script), str(probes), str(tmp_path / "results")], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    out = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert out["driver_after_import"] == [] and out["driver_after_fit"] == [], out
    loops = ["xgb_loop"] + (["lgb_loop"] if "lgb_rounds" in out else [])
    for loop in loops:
        ranks = [json.loads((probes / f"{loop}-rank{r}.json").read_text()) for r in (0, 1)]
        assert ranks[0]["pid"] != ranks[1]["pid"]  # two worker processes
        assert [(r["before"], r["after"]) for r in ranks] == [([], []), ([], [])], (loop, ranks)
    # the model is still the one model of both ranks' rows (as test_two_ranks_train_the_single_process_model)
    frame = bt.make_frame()
    assert out["rounds"] == 10
    booster = RayTrainReportCallback.get_model(tune.Checkpoint(out["checkpoint"]))
    np.testing.assert_allclose(_predict(booster, frame), _predict(_single_process(frame, 10), frame), rtol=0,
                               atol=1e-6)
    if "lgb_rounds" in out:
        assert out["lgb_rounds"] == 5
