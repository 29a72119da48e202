"""Elastic worker groups (``ScalingConfig(num_workers=(1, 2))``): how fast a group resizes, and what it loses.

Three events, each on a fresh cluster (a LocalCluster scheduler on 127.0.0.1 and ``dask worker --no-nanny``
processes, so that a killed worker stays dead as when its host is gone):

  * **host lost**: rank 1's worker process dies (``os._exit``) in the middle of a step; measured: the time from
    its death to the first step reported by the smaller group, and the steps lost (trained again from the
    checkpoint);
  * **worker joins**: a worker is started while a 1-rank group trains; measured: the time from the worker's
    registration to the first step of the larger group (it includes the wait for the next checkpoint
    boundary, reported separately), and the steps lost (0 by design: the group restarts from the checkpoint it
    just committed);
  * **preemption**: ``client.retire_workers`` on rank 1's worker; measured: the time from the call to the
    checkpoint the group commits for it and to the first step of the smaller group, and the steps lost.

The trainable does ``--step-s`` seconds of work per step (a sleep standing for compute) and checkpoints every
``--every`` steps (and when ``tuneplat.train.should_checkpoint()`` says so). Times come from the experiment
journal (``time`` of each event) and the results' ``timestamp``. Ray Tune is not installed here (its elastic
training needs Ray Train V2 and a Ray cluster whose nodes come and go), so no peer figure is printed.

Usage:
  python benchmarks/elastic.py [--repeats 3] [--step-s 0.05] [--every 5]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

logger = logging.getLogger("benchmarks.elastic")


def train(config):
    """Steps of ``step_s`` seconds; a checkpoint every ``every`` steps and when asked; an event hook per step."""
    import tempfile

    from tuneplat.train import Checkpoint, get_checkpoint, get_context, report, should_checkpoint

    ctx = get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    start = 0
    ckpt = get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d, open(os.path.join(d, "step"), encoding="utf-8") as f:
            start = int(f.read())
    for step in range(start, config["steps"]):
        time.sleep(config["step_s"])
        config["hook"](config, step + 1, rank, world)
        metrics = {"step": step + 1, "world_size": world}
        if (step + 1) % config["every"] == 0 or should_checkpoint():
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "step"), "w", encoding="utf-8") as f:
                    f.write(str(step + 1))
                report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            report(metrics)


def kill_hook(config, step, rank, world):
    if step == config["event_step"] and rank == 1 and world == 2:
        with open(config["mark"], "w", encoding="utf-8") as f:
            f.write(repr(time.time()))
        os._exit(1)


def join_hook(config, step, rank, world):
    from distributed import Event

    if step == config["event_step"] and world == 1:
        Event("bench-elastic-at").set()
        Event("bench-elastic-go").wait(timeout=300)


def preempt_hook(config, step, rank, world):
    from distributed import Event, Variable, get_worker

    if step == config["event_step"] and world == 2:
        if rank == 1:
            Variable("bench-elastic-rank1").set(get_worker().address)
            Event("bench-elastic-at").set()
        else:
            Event("bench-elastic-go").wait(timeout=300)


class Cluster:
    def __init__(self, workdir: str) -> None:
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(n_workers=0, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                    silence_logs=logging.ERROR)
        self.client = Client(self.cluster, set_as_default=False)
        self.procs: list[subprocess.Popen] = []
        self.log = open(os.path.join(workdir, "workers.log"), "a")  # noqa: SIM115 - closed in close()

    def add_worker(self) -> None:
        env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False")
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", self.cluster.scheduler_address, "--no-nanny",
             "--nthreads", "1", "--resources", "CPU=1", "--host", "127.0.0.1", "--dashboard-address",
             "127.0.0.1:0", "--preload", "torch"], env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True))

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.client.close()
        self.cluster.close()
        self.log.close()


def run(kind: str, args: argparse.Namespace, workdir: str) -> dict:
    from distributed import Event, Variable

    from tuneplat import FailureConfig, RunConfig, ScalingConfig
    from tuneplat.train import TorchTrainer

    c = Cluster(workdir)
    try:
        n = 1 if kind == "join" else 2
        for _ in range(n):
            c.add_worker()
        c.client.wait_for_workers(n, timeout=120)
        mark = os.path.join(workdir, f"{kind}-{time.monotonic_ns()}.mark")
        hook = {"loss": kill_hook, "join": join_hook, "preempt": preempt_hook}[kind]
        times: dict[str, float] = {}
        at, go = Event("bench-elastic-at", client=c.client), Event("bench-elastic-go", client=c.client)
        at.clear()
        go.clear()

        def driver() -> None:
            if not at.wait(timeout=300):
                return
            if kind == "join":
                c.add_worker()
                c.client.wait_for_workers(2, timeout=120)
                times["event"] = time.time()  # the new worker is registered with the scheduler
            else:
                address = Variable("bench-elastic-rank1", client=c.client).get(timeout=30)
                times["event"] = time.time()
                c.client.retire_workers([address], close_workers=True)
            go.set()

        thread = threading.Thread(target=driver, daemon=True)
        if kind != "loss":
            thread.start()
        name = f"{kind}-{time.monotonic_ns()}"
        trainer = TorchTrainer(
            train, train_loop_config={"steps": args.steps, "every": args.every, "step_s": args.step_s,
                                      "event_step": args.event_step, "hook": hook, "mark": mark},
            scaling_config=ScalingConfig(num_workers=(1, 2)), client=c.client,
            run_config=RunConfig(storage_path=os.path.join(workdir, "results"), name=name, mlflow=False, verbose=0,
                                 failure_config=FailureConfig(max_failures=1)))
        result = trainer.fit()
        thread.join(timeout=60) if kind != "loss" else None
        if kind == "loss":
            with open(mark, encoding="utf-8") as f:
                times["event"] = float(f.read())
        exp = os.path.dirname(result.path)
        with open(os.path.join(exp, "journal.jsonl"), encoding="utf-8") as f:
            events = [json.loads(line) for line in f if line.strip()]
        rows = [e["result"] for e in events if e.get("event") == "result"]
        resize = next(e for e in events if e.get("event") == "resize")
        old_size, new_size = resize["from_world_size"], resize["to_world_size"]
        first_new = next(r for r in rows if r["world_size"] == new_size and r["step"] > resize["iteration"])
        last_old = max(r["step"] for r in rows if r["world_size"] == old_size)
        # steps the old group trained after the checkpoint the new group started from (+ the one in progress
        # when its host died) are trained again
        lost = last_old - resize["iteration"] + (1 if kind == "loss" else 0)
        out = {"from": old_size, "to": new_size, "restart_iteration": resize["iteration"],
               "event_to_first_step_s": round(first_new["timestamp"] - times["event"], 3), "steps_lost": lost,
               "trial_error": str(result.error) if result.error else None}
        requeued = next(e for e in events if e.get("event") == "trial_requeued" or e.get("event") == "trial_failure")
        out["event_to_group_ended_s"] = round(requeued["time"] - times["event"], 3)
        restart = next(e for e in events if e.get("event") == "trial_start" and e.get("attempt", 0) > 0)
        out["restart_to_first_step_s"] = round(first_new["timestamp"] - restart["time"], 3)
        if kind == "preempt":
            notice = next(e for e in events if e.get("event") == "preempt_notice")
            ck = next(e for e in events if e.get("event") == "checkpoint" and e["iteration"] == resize["iteration"])
            out["event_to_notice_s"] = round(notice["time"] - times["event"], 3)
            out["event_to_checkpoint_s"] = round(ck["time"] - times["event"], 3)
        return out
    finally:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--event-step", type=int, default=12)
    parser.add_argument("--kinds", default="loss,join,preempt")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import dask

    report: dict = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                "load_1min": os.getloadavg()[0]},
                    "settings": {"step_s": args.step_s, "every": args.every, "steps": args.steps,
                                 "event_step": args.event_step, "repeats": args.repeats},
                    "peer": "Ray is not installed here: no peer figure"}
    with tempfile.TemporaryDirectory() as workdir, dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        for kind in args.kinds.split(","):
            runs = [run(kind, args, workdir) for _ in range(args.repeats)]
            summary = {"runs": runs}
            for key in ("event_to_first_step_s", "event_to_group_ended_s", "restart_to_first_step_s"):
                summary[f"median_{key}"] = round(statistics.median(r[key] for r in runs), 3)
            summary["steps_lost"] = [r["steps_lost"] for r in runs]
            report[kind] = summary
    report["machine"]["load_1min_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
