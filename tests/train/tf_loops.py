"""TensorFlow/Keras loops for the TensorFlow tests, importable by Dask workers; ``python tf_loops.py`` is the
library's own launch: N processes, each given ``TF_CONFIG`` by hand (what ``MultiWorkerMirroredStrategy`` reads).

    python tests/train/tf_loops.py keras_mwms 2 '{"epochs": 3, "steps": 4, "global_batch": 32, "out": "/tmp/x"}'

Inside a trial a loop reports with ``ReportCheckpointCallback``; outside one it appends each epoch's logs to
``<out>/rank<R>.jsonl``. Data are generated from fixed seeds (no download).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from typing import Any

import numpy as np

from tuneplat import train


def _in_trial() -> bool:
    return train.get_context().get_trial_id() is not None


def data(rows: int = 512, features: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype("float32")
    y = (x @ np.linspace(-1.0, 1.0, features).astype("float32") + 0.1 * rng.normal(size=rows)).astype("float32")
    return x, y.reshape(-1, 1)


def _rank() -> int:
    return int(json.loads(os.environ["TF_CONFIG"])["task"]["index"]) if "TF_CONFIG" in os.environ else 0


def keras_mwms(config: dict[str, Any]) -> None:
    """A Keras regression under ``MultiWorkerMirroredStrategy``; checkpoint each epoch, resume from the latest."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(config["global_batch"]).repeat()
    start = 0
    ckpt = train.get_checkpoint() if _in_trial() else None
    with strategy.scope():
        if ckpt is not None:
            from tuneplat.train.tensorflow import TensorflowCheckpoint

            model = TensorflowCheckpoint(ckpt.path).get_model()  # weights and optimizer state
            start = int(model.optimizer.iterations.numpy()) // config["steps"]
        else:
            model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="tanh"),
                                         tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=config.get("lr", 0.05)), loss="mse")
    if _in_trial():
        from tuneplat.train.tensorflow.keras import ReportCheckpointCallback

        callbacks: list[Any] = [ReportCheckpointCallback(metrics={"loss": "loss"})]
    else:
        callbacks = [_record(tf.keras.callbacks.Callback, config["out"])]
    # a resumed run goes on where the data were: the batches the earlier epochs used are skipped
    model.fit(ds.skip(start * config["steps"]), epochs=config["epochs"], steps_per_epoch=config["steps"],
              initial_epoch=start, verbose=0, callbacks=callbacks)
    if _rank() == 0:
        folder = train.get_context().get_trial_dir() if _in_trial() else config["out"]
        np.savez(os.path.join(folder, "final.npz"), *[w for w in model.get_weights()])


def keras3_mwms(config: dict[str, Any]) -> None:
    """Keras 3 (``import keras``) regression, under ``MultiWorkerMirroredStrategy`` unless ``config["strategy"]`` is
    False (the single-process run with the same global batch); reports (or records) each epoch's loss, then rank 0
    saves the final weights, an ``evaluate`` and a ``predict`` (``final.npz``)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if config.get("strategy", True) else None
    x, y = data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(config["global_batch"]).repeat()
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        # seeded initializers: Keras 3 seeds an unseeded one from Python's process-wide `random`, which the Dask
        # worker process shares with its other code (set_random_seed alone gave other weights in a rank)
        init = keras.initializers.GlorotUniform
        model = keras.Sequential([keras.Input(shape=(8,)),
                                  keras.layers.Dense(16, activation="tanh", kernel_initializer=init(seed=1)),
                                  keras.layers.Dense(1, kernel_initializer=init(seed=2))])
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=config["lr"]), loss="mse")
    if _in_trial():
        from tuneplat.train.tensorflow.keras import ReportCheckpointCallback

        callbacks: list[Any] = [ReportCheckpointCallback(checkpoint_on=[], metrics={"loss": "loss"})]
    else:
        callbacks = [_record(keras.callbacks.Callback, config["out"])]
    model.fit(ds, epochs=config["epochs"], steps_per_epoch=config["steps"], verbose=0, callbacks=callbacks)
    # evaluate and predict go through the same multi-worker reductions (every rank takes part: collectives)
    evaluated = np.array(model.evaluate(ds, steps=2, verbose=0))
    predicted = model.predict(tf.data.Dataset.from_tensor_slices(x[:64]).batch(config["global_batch"]), verbose=0)
    if _rank() == 0:
        folder = train.get_context().get_trial_dir() if _in_trial() else config["out"]
        np.savez(os.path.join(folder, "final.npz"), *[w for w in model.get_weights()], evaluated=evaluated,
                 predicted=predicted)


def keras3_trial(config: dict[str, Any]) -> None:
    """A Tune trial training a Keras 3 model (``import keras``, whatever ``TF_USE_LEGACY_KERAS`` says)."""
    import keras
    from tuneplat.tune.integration.keras import TuneReportCheckpointCallback

    keras.utils.set_random_seed(0)
    x, y = data()
    model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=config["lr"]), loss="mse")
    callback = TuneReportCheckpointCallback(metrics=["loss"])
    assert isinstance(callback, keras.callbacks.Callback)  # Keras 3's base, chosen from this function's imports
    model.fit(x, y, batch_size=32, epochs=config["epochs"], verbose=0, callbacks=[callback])


def keras_on_shard(config: dict[str, Any]) -> None:
    """Ray's data path: ``get_dataset_shard("train").to_tf(...)`` (+ ``prepare_dataset_shard`` unless
    ``config["prepare"]`` is False, as Ray's regression example does), then Keras ``fit``."""
    import tensorflow as tf

    from tuneplat.train.tensorflow import prepare_dataset_shard
    from tuneplat.train.tensorflow.keras import ReportCheckpointCallback

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    shard = train.get_dataset_shard("train")
    ds = shard.to_tf("x", "y", batch_size=16).map(lambda x, y: (tf.reshape(x, (-1, 1)), y))
    if config.get("prepare", True):
        ds = prepare_dataset_shard(ds)
    rows = sum(int(x.shape[0]) for x, _ in ds)  # one pass: one epoch of this rank's shard
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    model.fit(ds, epochs=config.get("epochs", 2), verbose=0,
              callbacks=[_rows_in_logs(tf, rows), ReportCheckpointCallback(checkpoint_on=[])])  # (rows first: reported)


def _rows_in_logs(tf: Any, rows: int) -> Any:
    class Rows(tf.keras.callbacks.Callback):
        """Puts the shard's rows and the batches Keras trained on this epoch into the logs (reported)."""

        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            self.batches = 0

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.batches += 1

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            if logs is not None:
                logs["rows"] = rows
                logs["batches"] = self.batches

    return Rows()


def _record(base: type, out: str) -> Any:
    """A callback (``base``: the ``Callback`` class of the model's Keras) appending each epoch's loss."""

    class Record(base):  # type: ignore[misc, valid-type]
        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            with open(os.path.join(out, f"rank{_rank()}.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps({"epoch": epoch, "loss": float(logs["loss"])}) + "\n")

    return Record()


# ------------------------------------------------------------------ the library's own launch, by hand
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_by_hand(loop: str, n: int, config: dict[str, Any], out: str, timeout: float = 600) -> list[dict]:
    """``n`` processes of ``loop``, each with the ``TF_CONFIG`` of its index; rank 0's recorded epochs."""
    os.makedirs(out, exist_ok=True)
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
    procs = []
    for i in range(n):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TMPDIR": str(out),
               "TF_USE_LEGACY_KERAS": os.environ.get("TF_USE_LEGACY_KERAS", "1"), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), loop,
                                       json.dumps({**config, "out": str(out)})], env=env, cwd=str(out),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    with open(os.path.join(out, "rank0.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


if __name__ == "__main__":
    globals()[sys.argv[1]](json.loads(sys.argv[2]))


# ------------------------------------------------------------------ for the observability test
def parked_in_tf_group(trial_dir: str) -> None:
    """Waits (bounded) for the test to drop ``release`` in the trial folder: the rank is alive, inside its group."""
    import time

    with open(os.path.join(trial_dir, f"parked-{train.get_context().get_world_rank()}"), "w") as f:  # test's probe
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 300
    while not os.path.exists(os.path.join(trial_dir, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)  # TF-PARKED-LINE


def all_reduce_then_park(config: dict[str, Any]) -> None:
    """One all-reduce over ``MultiWorkerMirroredStrategy``'s group, then parks until the test has looked."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
    parked_in_tf_group(train.get_context().get_trial_dir())
    train.report({"replicas": strategy.num_replicas_in_sync, "sum": float(total.numpy())})


def all_reduce_steps_one_rank_fails_once(config: dict[str, Any]) -> None:
    """All-reduce steps over ``MultiWorkerMirroredStrategy``; in the first attempt rank ``fail_rank`` raises at step
    2 while the other rank is inside that step's all-reduce."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = train.get_context().get_world_rank()
    for step in range(config["steps"]):
        if step == 2 and rank == config["fail_rank"] and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError(f"rank {rank} fails at step 2")
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
        train.report({"step": step, "sum": float(total.numpy())})
