"""Runs one of ``fw_loops``' loops under the library's own launcher (no tuneplat worker group).

    torchrun --nproc-per-node 2 tests/train/fw_launch.py fsdp2 '{"steps": 4, "global_batch": 32, "out": "/tmp/x"}'

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; this script joins the gloo group from
them (``init_method="env://"``) when launched with more than one process, then calls the loop as tuneplat would.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(launcher: list[str], loop: str, config: dict, out: str, timeout: float = 420) -> list[dict]:
    """Run ``loop`` under ``launcher`` (the library's own command, up to the script); rank 0's recorded metrics."""
    import subprocess

    os.makedirs(out, exist_ok=True)
    cmd = [*launcher, os.path.abspath(__file__), loop, json.dumps({**config, "out": str(out)})]
    env = {**os.environ, "TMPDIR": str(out)}  # torchrun's and DeepSpeed's scratch folders go with the output
    for attempt in (1, 2):
        if os.path.exists(os.path.join(out, "rank0.jsonl")):
            os.remove(os.path.join(out, "rank0.jsonl"))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(out), env=env)
        # the reference launch is the library's own, not tuneplat's: once in a while a torchrun rank aborts in
        # gloo's teardown ("terminate called without an active exception", seen once in ~50 default lanes); such
        # a launch is run again once, and a second failure fails the test
        if proc.returncode == 0 or attempt == 2 or "terminate called without an active exception" not in (
                proc.stdout + proc.stderr):
            break
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    with open(os.path.join(out, "rank0.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def torchrun(nproc: int = 2) -> list[str]:
    """``torchrun --standalone --nproc-per-node N`` (a free port on 127.0.0.1)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]


def main() -> None:
    import fw_loops
    import torch.distributed as dist

    name, config = sys.argv[1], json.loads(sys.argv[2])
    joined = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not config.get("no_group")
    if joined:
        dist.init_process_group("gloo")
    try:
        getattr(fw_loops, name)(config)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
