"""Every restore file that cannot be read names its path (issue 33)."""

from __future__ import annotations

import re

import pytest

import tuneplat as tune


def test_a_damaged_params_json_names_its_path(tmp_path):
    (tmp_path / "params.json").write_text('{"lr": 0.1')  # cut short
    (tmp_path / "result.json").write_text('{"loss": 1.0, "training_iteration": 1}\n')
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "params.json")) + " is damaged"):
        tune.Result.from_path(str(tmp_path))


def test_a_damaged_checkpoint_metadata_names_its_path(tmp_path):
    ckpt = tune.Checkpoint.from_directory(str(tmp_path))
    ckpt.set_metadata({"epoch": 1})
    assert ckpt.get_metadata() == {"epoch": 1}
    (meta,) = [p for p in tmp_path.iterdir() if p.name.endswith(".json")]
    meta.write_text("PWNED")
    with pytest.raises(ValueError, match=re.escape(str(meta)) + " is damaged"):  # (before: a bare JSONDecodeError)
        ckpt.get_metadata()
