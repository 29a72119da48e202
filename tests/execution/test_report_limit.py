"""A report over the message limit fails its trial naming its size, the limit and the setting (issue 33), not
"lost its connection (its process or Dask worker died)"."""

from __future__ import annotations

import harden_trainables as H
import pytest

import tuneplat as tune


@pytest.mark.timeout(600)
def test_an_oversized_report_names_its_size_the_limit_and_the_setting(dask_client, tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEPLAT_MAX_REPORT_BYTES", str(1 << 20))  # 1 MiB, so the test sends 2 MiB, not 1.1 GiB
    results = tune.Tuner(
        H.big_report, param_space={"mib": 2},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, mlflow=False),
        client=dask_client,
    ).fit()
    (r,) = list(results)
    error = str(r.error)
    assert "ReportTooLarge" in error and "2 MiB" in error and "1 MiB (1048576 bytes)" in error, error
    assert "TUNEPLAT_MAX_REPORT_BYTES" in error and "lost its connection" not in error, error
