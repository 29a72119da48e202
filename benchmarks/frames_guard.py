"""What the frames guard costs, and what it prevents (CPython gh-106883, ``tuneplat/execution/_frames_guard.py``).

    python benchmarks/frames_guard.py                 # 5 rounds of 20,000 calls, 10 threads
    python benchmarks/frames_guard.py --threads 50 --rounds 3

Cost: microseconds per ``sys._current_frames()`` call, plain and guarded, interleaved rounds in one process with
``--threads`` threads parked (the call makes a frame per thread); Dask's worker profiler makes 100 calls a second.
Prevents: the child script of ``tests/execution/test_frames_guard.py``, which starts a collection at each of several
points of the call, run without and with the guard; a run still going after 5 s is counted stuck. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = os.path.join(ROOT, "tests", "execution", "frames_guard_child.py")


def cost(threads: int, rounds: int, calls: int) -> dict:
    sys.path.insert(0, ROOT)
    from tuneplat.execution import _frames_guard

    parked = threading.Event()
    for _ in range(threads):
        threading.Thread(target=parked.wait, daemon=True).start()
    plain, guarded = [], []
    try:
        for _ in range(rounds):
            plain.append(timeit.timeit(_frames_guard._original, number=calls) / calls * 1e6)
            guarded.append(timeit.timeit(_frames_guard.current_frames, number=calls) / calls * 1e6)
    finally:
        parked.set()
    extra = statistics.median(guarded) - statistics.median(plain)
    return {"threads": threads + 1, "calls_per_round": calls, "rounds": rounds,
            "plain_us": round(statistics.median(plain), 3), "guarded_us": round(statistics.median(guarded), 3),
            "guard_active": _frames_guard.affected(),
            "share_of_a_core_at_100_calls_per_s": round(max(0.0, extra) * 100 / 1e6, 8)}


def stuck(mode: str, offsets: range) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    env.pop("TUNEPLAT_FRAMES_GUARD", None)
    procs = {o: subprocess.Popen([sys.executable, CHILD, mode, str(o)], stdout=subprocess.PIPE, text=True, env=env)
             for o in offsets}
    hung = []
    for o, p in procs.items():
        try:
            out, _ = p.communicate(timeout=5)
            if not out.startswith("returned"):
                hung.append(o)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            hung.append(o)
    return {"runs": len(offsets), "stuck": len(hung), "stuck_offsets": hung}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=9, help="threads parked beside the caller")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    offsets = range(8)
    print(json.dumps({"python": sys.version.split()[0], "cost": cost(args.threads, args.rounds, args.calls),
                      "without_guard": stuck("no-guard", offsets), "with_guard": stuck("guard", offsets)}, indent=1))


if __name__ == "__main__":
    main()
