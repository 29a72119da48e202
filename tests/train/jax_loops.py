"""JAX loops for the JAX tests, importable by Dask workers; ``python jax_loops.py LOOP N CONFIG`` is the library's
own launch: N processes that each call ``jax.distributed.initialize`` by hand (coordinator on process 0).

Inside a trial a loop reports with ``tuneplat.train.report``; outside one it appends each step to
``<out>/rank<R>.jsonl``. Data are generated from fixed seeds.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

import tuneplat as tune
from tuneplat import train

FEATURES = 8


def _in_trial() -> bool:
    return train.get_context().get_trial_id() is not None


def _batch(step: int, global_batch: int, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + step)
    x = rng.normal(size=(global_batch, FEATURES)).astype("float32")
    y = (x @ np.linspace(-1.0, 1.0, FEATURES).astype("float32") + 0.1 * rng.normal(size=global_batch)).astype("float32")
    return x[rank::world], y[rank::world]


def linear_pmap(config: dict[str, Any]) -> None:
    """SGD on a linear model; the gradient is ``pmean``-ed over every process's device (one per rank on CPU)."""
    import jax
    import jax.numpy as jnp

    rank, world = jax.process_index(), jax.process_count()

    def loss_fn(w: Any, x: Any, y: Any) -> Any:
        return jnp.mean((x @ w - y) ** 2)

    @functools.partial(jax.pmap, axis_name="ranks")
    def step_fn(w: Any, x: Any, y: Any) -> Any:
        loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
        grad = jax.lax.pmean(grad, "ranks")
        return w - config.get("lr", 0.05) * grad, jax.lax.pmean(loss, "ranks")

    w = np.zeros(FEATURES, dtype="float32")
    start = 0
    ckpt = train.get_checkpoint() if _in_trial() else None
    if ckpt is not None:
        with ckpt.as_directory() as d:
            saved = np.load(os.path.join(d, "params.npz"))
            w, start = saved["w"], int(saved["step"]) + 1
    local = jax.local_device_count()
    w_rep = jnp.stack([jnp.asarray(w)] * local)
    for step in range(start, config["steps"]):
        x, y = _batch(step, config["global_batch"], rank, world)
        w_rep, loss = step_fn(w_rep, x.reshape(local, -1, FEATURES), y.reshape(local, -1))
        metrics = {"step": step, "loss": float(loss[0]), "processes": world, "devices": len(jax.devices())}
        if _in_trial():
            with tempfile.TemporaryDirectory(prefix="jax-ckpt-") as d:
                if rank == 0:
                    np.savez(os.path.join(d, "params.npz"), w=np.asarray(w_rep[0]), step=step)
                train.report(metrics, checkpoint=tune.Checkpoint.from_directory(d) if rank == 0 else None)
        else:
            with open(os.path.join(config["out"], f"rank{rank}.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps(metrics) + "\n")
    if rank == 0:
        folder = train.get_context().get_trial_dir() if _in_trial() else config["out"]
        np.save(os.path.join(folder, "final.npy"), np.asarray(w_rep[0]))


# ------------------------------------------------------------------ the library's own launch, by hand
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_by_hand(loop: str, n: int, config: dict[str, Any], out: str, timeout: float = 300) -> list[dict]:
    """``n`` processes of ``loop`` that call ``jax.distributed.initialize`` themselves; rank 0's recorded steps."""
    os.makedirs(out, exist_ok=True)
    coordinator = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), loop, coordinator, str(n), str(i),
                               json.dumps({**config, "out": str(out)})],
                              env={**os.environ, "TMPDIR": str(out), "OMP_NUM_THREADS": "1"}, cwd=str(out),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(n)]
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    with open(os.path.join(out, "rank0.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


if __name__ == "__main__":
    import jax

    name, coordinator, n, index, cfg = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if n > 1:
        jax.distributed.initialize(coordinator, n, index)
    try:
        globals()[name](json.loads(cfg))
    finally:
        if n > 1:
            jax.distributed.shutdown()


# ------------------------------------------------------------------ for the observability test
def parked_in_jax_group(trial_dir: str) -> None:
    """Waits (bounded) for the test to drop ``release`` in the trial folder: the rank is alive, inside its group."""
    import time

    with open(os.path.join(trial_dir, f"parked-{train.get_context().get_world_rank()}"), "w") as f:  # test's probe
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(trial_dir, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)  # JAX-PARKED-LINE


def psum_then_park(config: dict[str, Any]) -> None:
    """One cross-process ``psum`` (the group is formed), then parks until the test has looked at the ranks."""
    import jax
    import jax.numpy as jnp

    total = jax.pmap(lambda v: jax.lax.psum(v, "ranks"), axis_name="ranks")(jnp.ones(jax.local_device_count()))
    parked_in_jax_group(train.get_context().get_trial_dir())
    train.report({"processes": jax.process_count(), "psum": float(total[0])})


# ------------------------------------------------------------------ for the crash-retry test
def psum_steps_one_rank_fails_once(config: dict[str, Any]) -> None:
    """``psum`` steps; in the first attempt rank ``fail_rank`` raises at step 2 while the other is inside that
    step's ``psum``."""
    import jax
    import jax.numpy as jnp

    rank = jax.process_index()
    psum = jax.pmap(lambda v: jax.lax.psum(v, "ranks"), axis_name="ranks")
    for step in range(config["steps"]):
        if step == 2 and rank == config["fail_rank"] and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError(f"rank {rank} fails at step 2")
        total = psum(jnp.ones(jax.local_device_count()))
        train.report({"step": step, "psum": float(total[0])})
