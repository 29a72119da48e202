"""Steps/s of a 2-rank tuneplat group vs the same loop under the framework's own launcher, per framework.

    python benchmarks/frameworks.py                        # fsdp, accelerate, tensorflow, jax; 40 timed steps
    python benchmarks/frameworks.py --frameworks deepspeed --steps 100
    python benchmarks/frameworks.py --frameworks deepspeed --steps 400 --repeat 6 --bare-dask --dask-child

For each framework the same training loop (an MLP on generated data, a fixed global batch split over 2 ranks) runs
(a) as a ``TorchTrainer``/``TensorflowTrainer``/``JaxTrainer`` with ``ScalingConfig(num_workers=2)`` on a 2-worker
Dask LocalCluster started beforehand (with the embedded cluster's Dask worker settings unless ``--dask-defaults``),
and (b) launched by hand with the library's own launcher on the same machine:
``torchrun --standalone --nproc-per-node 2`` (FSDP2, DeepSpeed), ``accelerate launch`` (Accelerate), 2 processes
with ``TF_CONFIG`` set by hand (TensorFlow), 2 processes calling ``jax.distributed.initialize`` (JAX). Rank 0 times
``--steps`` steps after ``--warmup`` steps inside the loop itself, so start-up (imports, rendezvous, compilation) is
left out of both figures: the ratio is the group's steady-state cost. Prints one JSON object; the goal is a ratio
>= 0.95.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
FEATURES, HIDDEN = 64, 256


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _finish(config: dict[str, Any], rank: int, steps_per_s: float) -> None:
    """Report (inside tuneplat) or write (hand launch) rank 0's steps/s."""
    if os.environ.get("TUNEPLAT_BENCH_HAND"):
        if rank == 0:
            with open(config["out"], "w", encoding="utf-8") as f:
                json.dump({"steps_per_s": steps_per_s}, f)
        return
    from tuneplat import train

    train.report({"steps_per_s": steps_per_s})


def _timed(step: Any, config: dict[str, Any]) -> float:
    for i in range(config["warmup"]):
        step(i)
    t0 = time.perf_counter()
    for i in range(config["steps"]):
        step(config["warmup"] + i)
    return config["steps"] / (time.perf_counter() - t0)


def torch_loop(config: dict[str, Any]) -> None:
    """FSDP2, DeepSpeed ZeRO-2 or Accelerate (``config["kind"]``) on an MLP."""
    import torch

    rank, world = _rank_world()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                                torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    local = config["global_batch"] // world
    g = torch.Generator().manual_seed(rank)
    xs = torch.randn(8, local, FEATURES, generator=g)
    ys = torch.randn(8, local, 1, generator=g)
    kind = config["kind"]
    if kind == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)

        def step(i: int) -> None:
            loss = torch.nn.functional.mse_loss(model(xs[i % 8]), ys[i % 8])
            opt.zero_grad()
            loss.backward()
            opt.step()
    elif kind == "deepspeed":
        import deepspeed

        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config={
            "train_micro_batch_size_per_gpu": local, "zero_optimization": {"stage": 2}, "steps_per_print": 10**9})

        def step(i: int) -> None:
            loss = torch.nn.functional.mse_loss(engine(xs[i % 8]), ys[i % 8])
            engine.backward(loss)
            engine.step()
    else:
        from accelerate import Accelerator

        acc = Accelerator(cpu=True)
        model, opt = acc.prepare(model, opt)

        def step(i: int) -> None:
            loss = torch.nn.functional.mse_loss(model(xs[i % 8]), ys[i % 8])
            opt.zero_grad()
            acc.backward(loss)
            opt.step()

    _finish(config, rank, _timed(step, config))


def tf_loop(config: dict[str, Any]) -> None:
    """Keras under ``MultiWorkerMirroredStrategy``; steps timed by a callback."""
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(config["global_batch"] * 8, FEATURES)).astype("float32")
    y = rng.normal(size=(config["global_batch"] * 8, 1)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(config["global_batch"]).repeat()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(HIDDEN, "relu"),
                                     tf.keras.layers.Dense(HIDDEN, "relu"), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(ds, epochs=1, steps_per_epoch=config["warmup"], verbose=0)
    t0 = time.perf_counter()
    model.fit(ds, epochs=1, steps_per_epoch=config["steps"], verbose=0)
    _finish(config, rank, config["steps"] / (time.perf_counter() - t0))


def jax_loop(config: dict[str, Any]) -> None:
    """An MLP's SGD step under ``pmap`` with the gradient ``pmean``-ed over the processes."""
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    rank, world, local = jax.process_index(), jax.process_count(), jax.local_device_count()
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = [jax.random.normal(k1, (FEATURES, HIDDEN)) * 0.05, jax.random.normal(k2, (HIDDEN, HIDDEN)) * 0.05,
              jax.random.normal(k3, (HIDDEN, 1)) * 0.05]

    def loss_fn(p: Any, x: Any, y: Any) -> Any:
        h = jax.nn.relu(x @ p[0])
        h = jax.nn.relu(h @ p[1])
        return jnp.mean((h @ p[2] - y) ** 2)

    @functools.partial(jax.pmap, axis_name="r")
    def train_step(p: Any, x: Any, y: Any) -> Any:
        g = jax.lax.pmean(jax.grad(loss_fn)(p, x, y), "r")
        return [w - 1e-3 * gw for w, gw in zip(p, g)]

    rep = [jnp.stack([w] * local) for w in params]  # replicated over this process's devices
    rng = np.random.default_rng(rank)
    per = config["global_batch"] // world
    x = rng.normal(size=(local, per // local, FEATURES)).astype("float32")
    y = rng.normal(size=(local, per // local, 1)).astype("float32")
    state = {"p": rep}

    def step(i: int) -> None:
        state["p"] = train_step(state["p"], x, y)
        jax.block_until_ready(state["p"])

    _finish(config, rank, _timed(step, config))


LOOPS = {"fsdp": torch_loop, "deepspeed": torch_loop, "accelerate": torch_loop, "tensorflow": tf_loop,
         "jax": jax_loop}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def by_hand(kind: str, config: dict[str, Any], workdir: str) -> float:
    """The loop under the framework's own launcher; rank 0's steps/s."""
    out = os.path.join(workdir, f"hand-{kind}.json")
    cfg = json.dumps({**config, "kind": kind, "out": out})
    env = {**os.environ, "TUNEPLAT_BENCH_HAND": "1", "OMP_NUM_THREADS": "1", "TMPDIR": workdir,
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    me = [HERE, "--rank-loop", kind, cfg]
    if kind in ("fsdp", "deepspeed"):
        cmds = [[sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *me]]
    elif kind == "accelerate":
        cmds = [[sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                 "--num_machines", "1", "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port()),
                 "--mixed_precision", "no", "--dynamo_backend", "no", *me]]
    elif kind == "tensorflow":
        workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
        cmds = []
        for i in range(2):
            tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
            cmds.append(["env", f"TF_CONFIG={tf_config}", "TF_USE_LEGACY_KERAS=1", sys.executable, *me])
    else:
        coordinator = f"127.0.0.1:{_free_port()}"
        cmds = [["env", f"BENCH_JAX={coordinator},2,{i}", sys.executable, *me] for i in range(2)]
    procs = [subprocess.Popen(c, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    errors = [p.communicate(timeout=1200)[1] for p in procs]
    for p, err in zip(procs, errors):
        if p.returncode != 0:  # the traceback, not the last lines of the libraries' warnings (DeepSpeed's are long)
            start = err.find("Traceback (most recent call last)")
            raise RuntimeError(f"{kind} by hand failed (exit {p.returncode}):\n"
                               f"{err[start:][:6000] if start >= 0 else err[-6000:]}")
    with open(out, encoding="utf-8") as f:
        return float(json.load(f)["steps_per_s"])


def _bare_rank(kind: str, config: dict[str, Any], rank: int, world: int, port: int) -> float | None:
    """One rank of the loop as a plain Dask task: torch.distributed joined by hand (env://), no tuneplat."""
    import torch.distributed as dist

    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "TUNEPLAT_BENCH_HAND": "1"})
    dist.init_process_group("gloo")
    try:
        LOOPS[kind](config)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(config["out"], encoding="utf-8") as f:
            return float(json.load(f)["steps_per_s"])
    return None


def _one_task_per_worker(rank_fn: Any, side: str, kind: str, config: dict[str, Any], client: Any,
                         workdir: str) -> list[Any]:
    """``rank_fn(kind, config, rank, world, port)`` as one plain Dask task pinned to each worker of ``client``
    (torch frameworks only: the process group is joined by hand over env://); the tasks' results."""
    if kind not in ("fsdp", "deepspeed", "accelerate"):
        raise SystemExit(f"--{side} measures the torch frameworks only, not {kind}")
    workers = sorted(client.scheduler_info()["workers"])
    cfg = {**config, "kind": kind, "out": os.path.join(workdir, f"{side}-{kind}.json")}
    port = _free_port()
    futures = [client.submit(rank_fn, kind, cfg, i, len(workers), port, workers=[w], pure=False,
                             allow_other_workers=False) for i, w in enumerate(workers)]
    return list(client.gather(futures))


def bare_dask(kind: str, config: dict[str, Any], client: Any, workdir: str) -> float:
    """The loop as one plain Dask task per worker of ``client`` (no tuneplat): what the Dask worker process alone
    costs the ranks."""
    try:
        results = _one_task_per_worker(_bare_rank, "bare-dask", kind, config, client, workdir)
    finally:
        # new worker processes for the next run, as each hand launch gets (DeepSpeed keeps its process groups in
        # module globals: a second initialize in the same process finds the first run's destroyed group)
        client.restart(wait_for_workers=True)
    return float(results[0])


def _child_rank(kind: str, config: dict[str, Any], rank: int, world: int, port: int) -> float | None:
    """One rank of the loop in a child process of a Dask worker (the worker's environment, torch.distributed's
    env:// variables set), the task thread waiting for it: the hand launch's process, started by a Dask task."""
    env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
           "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TUNEPLAT_BENCH_HAND": "1", "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, HERE, "--rank-loop", kind, json.dumps(config)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"rank {rank} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    if rank == 0:
        with open(config["out"], encoding="utf-8") as f:
            return float(json.load(f)["steps_per_s"])
    return None


def dask_child(kind: str, config: dict[str, Any], client: Any, workdir: str) -> float:
    """The loop in one child process per worker of ``client``, each started by a plain Dask task: the Dask
    worker's environment and neighbours without sharing its process."""
    return float(_one_task_per_worker(_child_rank, "dask-child", kind, config, client, workdir)[0])


def in_tuneplat(kind: str, config: dict[str, Any], client: Any, storage: str) -> float:
    import tuneplat as tune
    from tuneplat.train import ScalingConfig

    cfg = {**config, "kind": kind}
    run = tune.RunConfig(name=f"bench-{kind}-{config.get('run', 0)}", storage_path=storage, verbose=0, mlflow=False)
    scaling = ScalingConfig(num_workers=2)
    if kind == "tensorflow":
        from tuneplat.train.tensorflow import TensorflowTrainer

        trainer: Any = TensorflowTrainer(tf_loop, train_loop_config=cfg, scaling_config=scaling, run_config=run,
                                         client=client)
    elif kind == "jax":
        from tuneplat.train.jax import JaxTrainer

        trainer = JaxTrainer(jax_loop, train_loop_config=cfg, scaling_config=scaling, run_config=run, client=client)
    else:
        from tuneplat.train.torch import TorchTrainer

        trainer = TorchTrainer(torch_loop, train_loop_config=cfg, scaling_config=scaling, run_config=run,
                               client=client)
    return float(trainer.fit().metrics["steps_per_s"])


def _rank_main(kind: str, cfg: str) -> None:
    config = json.loads(cfg)
    if kind == "jax":
        import jax

        coordinator, n, i = os.environ["BENCH_JAX"].split(",")
        jax.distributed.initialize(coordinator, int(n), int(i))
        try:
            jax_loop(config)
        finally:
            jax.distributed.shutdown()
        return
    if kind == "fsdp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        try:
            torch_loop(config)
        finally:
            dist.destroy_process_group()
        return
    LOOPS[kind](config)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", default="fsdp,accelerate,tensorflow,jax",
                        help="comma-separated: fsdp, deepspeed, accelerate, tensorflow, jax")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=1,
                        help="run tuneplat's side and the hand launch this many times, interleaved (ABBA); the median "
                             "ratio is reported (on a shared machine one pair is dominated by its neighbours)")
    parser.add_argument("--dask-defaults", action="store_true",
                        help="start the cluster with Dask's worker profiler and tick at Dask's defaults (10 ms, 20 ms) "
                             "instead of the embedded cluster's settings (100 ms, 500 ms)")
    parser.add_argument("--bare-dask", action="store_true",
                        help="also run the loop as plain Dask tasks on a second cluster of the same settings "
                             "(torch.distributed joined by hand, no tuneplat): separates what the Dask worker "
                             "process costs from what tuneplat's rank adds (torch frameworks only)")
    parser.add_argument("--dask-child", action="store_true",
                        help="also run the loop in child processes started by plain Dask tasks on a second cluster "
                             "(the worker's environment, not its process): with --bare-dask, separates the worker "
                             "process's thread from its environment and neighbours (torch frameworks only)")
    parser.add_argument("--rank-loop", nargs=2, metavar=("KIND", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_loop:
        _rank_main(*args.rank_loop)
        return
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import dask
    from cluster_fixtures import local_client

    from tuneplat.execution._local_procs import LEAN_WORKER_SETTINGS

    # the worker settings tuneplat's embedded cluster starts its workers with (a user's own cluster keeps its own:
    # docs/multi-host.md), unless --dask-defaults
    worker_settings = {k: (default if args.dask_defaults else ours)
                       for k, (default, ours) in LEAN_WORKER_SETTINGS.items()}
    config = {"steps": args.steps, "warmup": args.warmup, "global_batch": args.global_batch}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-frameworks-") as work, dask.config.set(worker_settings), \
            contextlib.ExitStack() as stack:
        client = stack.enter_context(local_client(2))
        # the plain-Dask side runs on a cluster of its own (state a framework leaves in a worker process must not
        # reach tuneplat's trials); both clusters stay up for every side, so each side has the same idle neighbours
        bare_client = stack.enter_context(local_client(2)) if args.bare_dask or args.dask_child else None
        for kind in [k.strip() for k in args.frameworks.split(",") if k.strip()]:
            sides: dict[str, Any] = {
                "tuneplat": lambda i, kind=kind: in_tuneplat(kind, {**config, "run": i}, client,
                                                             os.path.join(work, "results")),
                "by_hand": lambda i, kind=kind: by_hand(kind, config, work)}
            if args.bare_dask:
                sides["bare_dask"] = lambda i, kind=kind: bare_dask(kind, config, bare_client, work)
            if args.dask_child:
                sides["dask_child"] = lambda i, kind=kind: dask_child(kind, config, bare_client, work)
            names = list(sides)
            runs: dict[str, list[float]] = {n: [] for n in names}
            for i in range(max(args.repeat, 1)):
                # the sides' order rotates with each repeat (with two: tuneplat first, then the hand launch first):
                # no side always runs in another's wake (page cache, the cores' clocks, a neighbour's job ending)
                for name in names[i % len(names):] + names[:i % len(names)]:
                    runs[name].append(sides[name](i))
                print(json.dumps({kind: {"run": i, **{n: round(v[-1], 2) for n, v in runs.items()}}}),
                      file=sys.stderr, flush=True)
            ratios = [o / t for o, t in zip(runs["tuneplat"], runs["by_hand"])]
            results[kind] = {"tuneplat_2_ranks_steps_per_s": [round(o, 2) for o in runs["tuneplat"]],
                             "by_hand_steps_per_s": [round(t, 2) for t in runs["by_hand"]],
                             "ratio": round(_median(ratios), 3), "ratios": [round(r, 3) for r in ratios]}
            if "bare_dask" in runs:
                bare = runs["bare_dask"]
                results[kind]["bare_dask_steps_per_s"] = [round(b, 2) for b in bare]
                results[kind]["bare_dask_vs_by_hand"] = round(_median([b / t for b, t in zip(bare, runs["by_hand"])]), 3)
                results[kind]["tuneplat_vs_bare_dask"] = round(_median([o / b for o, b in zip(runs["tuneplat"], bare)]), 3)
            if "dask_child" in runs:
                child = runs["dask_child"]
                results[kind]["dask_child_steps_per_s"] = [round(c, 2) for c in child]
                results[kind]["dask_child_vs_by_hand"] = round(_median([c / t for c, t in zip(child, runs["by_hand"])]), 3)
    with open("/proc/loadavg", encoding="utf-8") as f:
        load = f.read().split()[:3]
    print(json.dumps({"config": config, "dask_worker_settings": worker_settings, "loadavg": load,
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
