"""Ray's shipped TensorFlow/Keras examples, read from the installed Ray at test time and run with only imports changed.

``ported_example()`` takes Ray's file as it is in the installed ``ray`` (``ray/train/examples/tf``,
``ray/tune/examples``), points its ``ray`` import lines at tuneplat (``ported_imports``, the boosting examples'
harness) and replaces only the data lines named in the test: a download (MNIST, an S3 CSV: no network in tests)
by generated data of the same shape, and Ray Data calls by their pandas equivalent (docs/data-ingest.md). Each
replacement must match Ray's text exactly once, so a changed example fails here instead of silently running
something else. The generated-data helpers are put in front of the script, marked.

Each example runs as a user would run it (a subprocess in a temporary working directory, the embedded cluster);
the test reads what it printed and the experiment folder it left. Model initialisation is unseeded in Ray's
scripts: the assertions are on what the code decides (how many reports, checkpoints, which trial is best among
those reported) and on learning only where the data makes it certain (said at each).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from test_ray_boosting_examples import ported_imports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install 'tuneplat[tensorflow]')")
pytestmark = pytest.mark.timeout(900)  # each example imports TensorFlow in 3-5 fresh processes (minutes when loaded)

# Marked helpers put in front of a ported script: data of the shape the example downloads (each a pure function of
# a fixed seed). Nothing else is added to Ray's text.
LOCAL_DATA = '''\
# ---- tuneplat port: generated data in place of the example's download (no network in tests) --------------------
def _tuneplat_mnist(*_args, **_kwargs):  # stands in for (tf.)keras.datasets.mnist.load_data(): uint8 28x28 images
    import numpy as np

    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, size=1280).astype(np.uint8)
    x = rng.integers(0, 60, size=(1280, 28, 28)).astype(np.uint8)
    for c in range(10):
        x[y == c, c * 2:c * 2 + 8, :] += 150  # the class is a bright band at row 2c
    return (x[:1024], y[:1024]), (x[1024:], y[1024:])


class _tuneplat_mnist_module:  # stands in for the module tensorflow.keras.datasets.mnist
    load_data = staticmethod(_tuneplat_mnist)


def _tuneplat_regression_csv():  # stands in for ray.data.read_csv("s3://anonymous@air-example-data/regression.csv")
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.random((512, 100))
    frame = pd.DataFrame({f"x{i:03}": x[:, i] for i in range(100)})
    frame["y"] = 50.0 + x @ rng.random(100)  # targets far above any initial prediction (see the test)
    return frame


def _tuneplat_concatenate(frame, columns, output_column_name):  # Ray Data's Concatenator, in pandas
    import pandas as pd

    rest = [c for c in frame.columns if c not in columns]
    return pd.concat([frame[rest], pd.DataFrame({output_column_name: list(frame[columns].to_numpy())})], axis=1)


def _tuneplat_mnist_autoencoder_frame(split_type):  # tfds.load("mnist").take(128) -> normalized, flattened (Ray Data)
    import numpy as np
    import pandas as pd

    (x, _), _ = _tuneplat_mnist()
    images = list(np.reshape(np.float32(x[:128]) / 255.0, (128, -1)))
    return pd.DataFrame({"image": images, "label": images})
# ---- end of the tuneplat port's additions ------------------------------------------------------------------------

'''


def _ray_file(rel: str) -> str:
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        pytest.skip("ray is not installed: the examples are read from its package (pip install 'tuneplat[bench]')")
    with open(os.path.join(os.path.dirname(spec.origin), rel), encoding="utf-8") as f:
        return f.read()


def ported_example(rel: str, data: list[tuple[str, str]]) -> str:
    """Ray's file ``rel`` (under the ``ray`` package) with ``data``'s replacements and its imports pointed here."""
    text = _ray_file(rel)
    for old, new in data:
        assert text.count(old) == 1, f"Ray's {rel} changed: {old!r} is no longer in it once; update this port"
        text = text.replace(old, new)
    return LOCAL_DATA + ported_imports(text)


def _env(cwd, extra: dict[str, str] | None = None) -> dict[str, str]:
    tmp = cwd / "tmp"  # the examples' tempfile.mkdtemp() folders (never removed by Ray's code) stay in the test's
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]), "TMPDIR": str(tmp),
            "HOME": str(cwd),  # the examples' FileLock("~/.tune.lock") and Keras' cache stay in the test's folder
            **(extra or {})}


def run_example(rel: str, data: list[tuple[str, str]], cwd, *args: str, env_extra: dict[str, str] | None = None,
                timeout: int = 840) -> str:
    script = cwd / os.path.basename(rel)
    script.write_text(ported_example(rel, data), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(cwd, env_extra), cwd=str(cwd))
    assert proc.returncode == 0, f"{rel} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


def trial_results(cwd) -> dict[str, list[dict]]:
    """Every trial's reported results (its result.json lines), by trial folder."""
    out: dict[str, list[dict]] = {}
    for top, _dirs, files in os.walk(cwd / "tuneplat_results"):
        if "result.json" in files:
            with open(os.path.join(top, "result.json"), encoding="utf-8") as f:
                out[top] = [json.loads(line) for line in f if line.strip()]
    return out


def trial_dirs(cwd) -> list[str]:
    """Every trial folder the example left (those with a params.json)."""
    return sorted(top for top, _dirs, files in os.walk(cwd / "tuneplat_results") if "params.json" in files)


def checkpoints(trial_dir: str) -> list[str]:
    return sorted(d for d in os.listdir(trial_dir) if d.startswith("checkpoint_"))


def _printed_dict(out: str, must_have: str) -> dict:
    """The last line of ``out`` that is a printed dict holding the key ``must_have``."""
    for line in reversed(out.splitlines()):
        if line.startswith("{") and f"'{must_have}'" in line:
            return ast.literal_eval(line)
    raise AssertionError(f"no printed dict with {must_have!r}:\n{out[-3000:]}")


REGRESSION = [
    ("from ray.data.preprocessors import Concatenator\n", "# (tuneplat port: Concatenator -> pandas, below)\n"),
    ('dataset = ray.data.read_csv("s3://anonymous@air-example-data/regression.csv")',
     "dataset = _tuneplat_regression_csv()  # tuneplat port: generated, no network"),
    ('preprocessor = Concatenator(columns=columns_to_concatenate, output_column_name="x")\n'
     "    dataset = preprocessor.fit_transform(dataset)",
     'dataset = _tuneplat_concatenate(dataset, columns_to_concatenate, "x")  # tuneplat port: Ray Data -> pandas'),
]


@pytest.mark.slow  # TensorFlow in a fresh driver and 2 fresh worker processes: minutes on the 2-core machine
def test_ray_tensorflow_regression_example(tmp_path):
    out = run_example("train/examples/tf/tensorflow_regression_example.py", REGRESSION, tmp_path)
    (trial, results), = trial_results(tmp_path).items()
    # config epochs=4, one model.fit() per epoch, ReportCheckpointCallback's default: a report and a checkpoint at
    # each epoch's end
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4]
    assert len(checkpoints(trial)) == 4
    losses = [r["loss"] for r in results]
    # mean absolute error with targets >= 50 while a fresh 100-10-1 linear model predicts within a few units of 0:
    # every residual has the same sign for all 4 epochs (SGD at lr 1e-3 moves predictions by far less than 50), so
    # each step lowers the loss whatever the unseeded initial weights
    assert losses[-1] < losses[0], losses
    printed = _printed_dict(out, "mean_squared_error")  # the example's print(results.metrics)
    assert printed["training_iteration"] == 4 and printed["loss"] == pytest.approx(losses[-1])


AUTOENCODER = [
    ("import tensorflow_datasets as tfds\n", "# (tuneplat port: tensorflow_datasets' MNIST -> generated, below)\n"),
    ("from ray.data.datasource import SimpleTensorFlowDatasource\n", ""),
    ("from ray.data.extensions import TensorArray\n", ""),
]


def _autoencoder() -> list[tuple[str, str]]:
    text = _ray_file("train/examples/tf/tensorflow_autoencoder_example.py")
    body = re.search(r'def get_dataset\(split_type="train"\):\n(.*?)\n\n\ndef ', text, flags=re.S)
    assert body, "Ray's tensorflow_autoencoder_example.py changed: get_dataset() not found; update this port"
    # the whole body of get_dataset is Ray Data (tfds via SimpleTensorFlowDatasource, map_batches, TensorArray)
    return AUTOENCODER + [(body.group(1), "    return _tuneplat_mnist_autoencoder_frame(split_type)  # tuneplat port: "
                                          "Ray Data -> pandas (128 normalized images, image = label)")]


@pytest.mark.slow  # TensorFlow in a fresh driver and 2 fresh worker processes
def test_ray_tensorflow_autoencoder_example(tmp_path):
    out = run_example("train/examples/tf/tensorflow_autoencoder_example.py", _autoencoder(), tmp_path)
    (trial, results), = trial_results(tmp_path).items()
    # epochs=3 (its default), one fit() per epoch over iter_tf_batches + prepare_dataset_shard, a report and a
    # checkpoint at each epoch's end
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert len(checkpoints(trial)) == 3
    assert all(0.0 < r["binary_crossentropy"] < 1.0 for r in results)  # (sigmoid outputs, targets in [0, 1])
    printed = _printed_dict(out, "binary_crossentropy")  # the example's print(results.metrics)
    assert printed["binary_crossentropy"] == pytest.approx(results[-1]["binary_crossentropy"])


TUNE_TF_MNIST = [
    ("    from tensorflow.keras.datasets.mnist import load_data\n",
     "    load_data = _tuneplat_mnist  # tuneplat port: generated MNIST, no network\n"),
]


@pytest.mark.slow  # 3 Tune trials each building a TensorFlow model in a fresh worker process
def test_ray_tune_tf_mnist_example(tmp_path):
    # a Trainable class written for Keras 2 (metric.reset_states()); its trials are not TensorflowTrainer ranks,
    # which would choose Keras 2 themselves, so the environment chooses it, as Ray's CI does for this example
    out = run_example("tune/examples/tf_mnist_example.py", TUNE_TF_MNIST, tmp_path, "--smoke-test",
                      env_extra={"TF_USE_LEGACY_KERAS": "1"})
    trials = trial_results(tmp_path)
    assert len(trials) == 3  # grid_search over hiddens [32, 64, 128]
    for results in trials.values():  # stop={"training_iteration": 5} in the smoke test
        assert [r["training_iteration"] for r in results] == [1, 2, 3, 4, 5]
        assert all(0.0 <= r["mean_accuracy"] <= 100.0 for r in results)
    # metric="test_loss", mode="min", scope "last": the printed config is the trial with the lowest last test_loss
    best = min(trials, key=lambda t: trials[t][-1]["test_loss"])
    with open(os.path.join(best, "params.json"), encoding="utf-8") as f:
        best_config = json.load(f)
    printed = ast.literal_eval(out.split("Best hyperparameters found were: ", 1)[1].strip().splitlines()[0])
    assert set(printed) == {"hiddens"}
    if sorted(rs[-1]["test_loss"] for rs in trials.values())[:2].count(trials[best][-1]["test_loss"]) == 1:
        assert printed == best_config  # (a tie may pick either)


def _tensorflow_trainer_docstring() -> str:
    """The ``TensorflowTrainer`` docstring's example (Ray's), its imports pointed here and Ray Data -> pandas."""
    import textwrap

    pytest.importorskip("ray", reason="ray is not installed: the example is read from its docstring")
    from ray.train.tensorflow import TensorflowTrainer as RayTrainer

    doc = RayTrainer.__doc__ or ""
    block = doc.split("Example:\n", 1)[1].split(".. testcode::", 1)[1].split(".. testoutput::", 1)[0]
    code = textwrap.dedent(block).strip() + "\n"
    old = 'train_dataset = ray.data.from_items([{"x": x, "y": x + 1} for x in range(32)])'
    assert code.count(old) == 1, "Ray's TensorflowTrainer docstring changed; update this port"
    code = code.replace(old, 'import pandas as pd  # tuneplat port: Ray Data -> pandas\n'
                             'train_dataset = pd.DataFrame([{"x": x, "y": x + 1} for x in range(32)])')
    return ported_imports(code) + "print('CHECKPOINT', sorted(os.listdir(result.checkpoint.path)))\n"


def test_ray_tensorflow_trainer_docstring_example(tmp_path):
    # the default lane's TensorFlow example: 32 rows, 2 epochs. Its ScalingConfig(num_workers=3) is kept; the
    # embedded cluster gets 3 worker slots from TUNEPLAT_NUM_CPUS (the environment, not the script)
    script = tmp_path / "docstring_example.py"
    script.write_text(_tensorflow_trainer_docstring(), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=840,
                          env=_env(tmp_path, {"TUNEPLAT_NUM_CPUS": "3"}), cwd=str(tmp_path))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    (trial, results), = trial_results(tmp_path).items()
    assert [r["training_iteration"] for r in results] == [1, 2]  # num_epochs=2: train.report({}, checkpoint=...)
    assert len(checkpoints(trial)) == 2
    # model.save_weights(".../my_checkpoint") (Keras 2's TensorFlow format, chosen for the ranks): its index file
    files = ast.literal_eval(proc.stdout.split("CHECKPOINT ", 1)[1].splitlines()[0])
    assert "my_checkpoint.index" in files, files


MNIST_LOAD = ("(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()",
              "(x_train, y_train), _ = _tuneplat_mnist()  # tuneplat port: generated MNIST, no network")


@pytest.mark.slow  # TensorFlow in the driver and 4 worker processes
def test_ray_tensorflow_quick_start(tmp_path):
    from tuneplat import Result

    # its ScalingConfig(num_workers=4) is kept: the embedded cluster gets 4 worker slots from TUNEPLAT_NUM_CPUS
    out = run_example("train/examples/tf/tensorflow_quick_start.py", [MNIST_LOAD], tmp_path,
                      env_extra={"TUNEPLAT_NUM_CPUS": "4"})
    assert "Epoch 3/3" in out  # train_func() alone in the driver first (epochs=3)
    (trial,) = trial_dirs(tmp_path)  # then TensorflowTrainer: its function reports nothing; the trial ended well
    result = Result.from_path(trial)
    assert result.error is None, result.error


@pytest.mark.slow  # TensorFlow in a fresh driver and 2 fresh worker processes
def test_ray_tensorflow_mnist_example(tmp_path):
    run_example("train/examples/tf/tensorflow_mnist_example.py", [MNIST_LOAD], tmp_path, "--smoke-test")
    (trial, results), = trial_results(tmp_path).items()
    # epochs=4 (the smoke test's), steps_per_epoch=70: ReportCheckpointCallback reports each epoch's end, with the
    # model saved by every rank into that epoch's checkpoint
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in results)
    ckpts = checkpoints(trial)
    assert len(ckpts) == 4 and all("model.keras" in os.listdir(os.path.join(trial, c)) for c in ckpts)


TUNE_MNIST_KERAS = [
    ("    from tensorflow.keras.datasets import mnist\n",
     "    mnist = _tuneplat_mnist_module  # tuneplat port: generated MNIST, no network\n"),
]


@pytest.mark.slow  # 10 Tune trials each building a Keras model
def test_ray_tune_mnist_keras(tmp_path):
    # written for Keras 2 (SGD(lr=...)); its Tune trials are not TensorflowTrainer ranks, which would choose it
    out = run_example("tune/examples/tune_mnist_keras.py", TUNE_MNIST_KERAS, tmp_path, "--smoke-test",
                      env_extra={"TF_USE_LEGACY_KERAS": "1"})
    trials = trial_results(tmp_path)
    assert len(trials) == 10  # num_samples=10
    # stop={"mean_accuracy": 0.99, "training_iteration": 2} in the smoke test; TuneReportCheckpointCallback
    # reports each epoch's end ({"mean_accuracy": "accuracy"})
    for results in trials.values():
        assert 1 <= len(results) <= 2 and [r["training_iteration"] for r in results] == list(range(1, len(results) + 1))
        assert len(results) == 2 or results[-1]["mean_accuracy"] >= 0.99
    assert set(ast.literal_eval(out.split("Best hyperparameters found were: ", 1)[1].strip().splitlines()[0])) == {
        "threads", "lr", "momentum", "hidden"}
