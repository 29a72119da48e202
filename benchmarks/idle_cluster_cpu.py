"""What an idle embedded-style cluster costs the machine: CPU of its scheduler, nannies and workers while nothing runs.

    python benchmarks/idle_cluster_cpu.py              # 2 workers, 20 s
    python benchmarks/idle_cluster_cpu.py --workers 4 --seconds 60

A ``LocalCluster`` as tuneplat embeds it (one single-threaded worker process per slot, the embedded cluster's
worker settings: ``tuneplat.execution._local_procs.lean_worker_config``), with its scheduler in this process, is
left idle; psutil reads the user + system CPU seconds of this process and every process it started over the
window. Prints JSON: the share of one core they used. On a machine whose cores the ranks keep busy, that share is
taken from the ranks (issue #30's DeepSpeed ratio on 2 cores, benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    import dask
    import psutil
    from distributed import Client, LocalCluster

    from tuneplat.execution._local_procs import lean_worker_config

    with dask.config.set(lean_worker_config()):
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None)
    client = Client(cluster)
    try:
        client.wait_for_workers(args.workers)
        time.sleep(3.0)  # (the workers' start-up is not idle time)
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]

        def cpu_s() -> float:
            return sum(sum(p.cpu_times()[:2]) for p in procs)

        t0, c0 = time.monotonic(), cpu_s()
        time.sleep(args.seconds)
        t1, c1 = time.monotonic(), cpu_s()
    finally:
        client.close()
        cluster.close()
    share = (c1 - c0) / (t1 - t0)
    print(json.dumps({"benchmark": "idle_cluster_cpu", "workers": args.workers, "processes": len(procs),
                      "seconds": round(t1 - t0, 1), "cpu_share_of_one_core": round(share, 4),
                      "cpu_share_of_machine": round(share / (os.cpu_count() or 1), 4),
                      "loadavg": open("/proc/loadavg").read().split()[:3]}, indent=2))


if __name__ == "__main__":
    main()
