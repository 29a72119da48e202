"""For ``benchmarks/cold_start.py --slow-worker S``: one Dask worker process of the run starts S seconds late.

Imported at the start of every Python process that has this folder on its path. Only a process started by
``multiprocessing``'s spawn (a nanny's worker process) that is first to claim the run's file waits: it stands for a
worker on a slow or busy node, so that a build that waits for every worker and one that starts trials on the first
can be told apart. A benchmark input, not part of tuneplat.
"""

import os
import sys
import time

_seconds = float(os.environ.get("TUNEPLAT_BENCH_SLOW_WORKER_S") or 0)
_claim = os.environ.get("TUNEPLAT_BENCH_SLOW_WORKER_CLAIM")
if _seconds > 0 and _claim and "--multiprocessing-fork" in getattr(sys, "orig_argv", []):
    try:
        os.close(os.open(_claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        pass
    else:
        time.sleep(_seconds)  # the slow node's start (the benchmark's input)
