"""Each framework integration is an optional extra: importing it without the library names the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(("module", "library", "extra"), [
    ("tuneplat.train.tensorflow", "tensorflow", "tensorflow"),
    ("tuneplat.air.integrations.keras", "tensorflow", "tensorflow"),
    ("tuneplat.tune.integration.keras", "tensorflow", "tensorflow"),
    ("tuneplat.train.jax", "jax", "jax"),
])
def test_missing_framework_names_its_extra(module, library, extra):
    code = (f"import sys; sys.modules[{library!r}] = None\n"  # as if it were not installed
            f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\nelse:\n    print('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert f"pip install 'tuneplat[{extra}]'" in out, out


def test_importing_tuneplat_train_imports_no_framework():
    code = ("import sys, tuneplat, tuneplat.train, tuneplat.train.torch\n"
            "print(sorted(m for m in ('tensorflow', 'jax', 'deepspeed', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"


def test_horovod_is_refused_with_the_migration_path():
    from tuneplat.train.horovod import HorovodTrainer

    with pytest.raises(DeprecationWarning, match="TorchTrainer.*TensorflowTrainer"):
        HorovodTrainer(lambda: None)
