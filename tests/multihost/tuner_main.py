"""The tuner's process on the simulated "tuner" host: runs one experiment, prints one JSON line.

Usage: tuner_main.py '<json settings>'; prints ``RESULT {...}`` or ``ERROR {...}``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time


def forward(target: tuple[str, int]) -> int:
    """A local port-forward (as ``kubectl port-forward`` / ``ssh -L``): 127.0.0.1:<port> -> target."""
    deadline = time.monotonic() + 60
    while True:  # a port-forward to a scheduler that is not up yet would hand the client a dead stream
        try:
            socket.create_connection(target, timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    server = socket.create_server(("127.0.0.1", 0))

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            try:
                up = socket.create_connection(target)
            except OSError:  # the scheduler is not up yet: the client tries again
                conn.close()
                continue
            threading.Thread(target=pipe, args=(conn, up), daemon=True).start()
            threading.Thread(target=pipe, args=(up, conn), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def main() -> None:
    opts = json.loads(sys.argv[1])
    import mh_trainables
    from distributed import Client
    from distributed.security import Security

    from tuneplat import FailureConfig, RunConfig, ScalingConfig, TuneConfig, Tuner, grid_search

    security = None
    if opts.get("certs"):
        c = opts["certs"]
        security = {"tls_ca_file": c["ca"], "tls_client_cert": c["cert"], "tls_client_key": c["key"],
                    "require_encryption": True}
    address = opts["address"]
    if opts.get("port_forward"):
        proto, rest = address.split("://")
        host, port = rest.rsplit(":", 1)
        address = f"{proto}://127.0.0.1:{forward((host, int(port)))}"
    with Client(address, security=Security(**security) if security else None, timeout=60) as probe:
        probe.wait_for_workers(opts.get("workers", 2), timeout=90)
    rc = RunConfig(storage_path=opts["storage"], mlflow=False, verbose=opts.get("verbose", 0), address=address,
                   security=security,
                   tuner_port=opts.get("tuner_port"))
    t0 = time.monotonic()
    try:
        if opts["mode"] == "ddp":
            grid = Tuner(mh_trainables.ddp, param_space={}, tune_config=TuneConfig(metric="loss", mode="min"),
                         run_config=rc, scaling_config=ScalingConfig(num_workers=2, placement_strategy="SPREAD")).fit()
        elif opts["mode"] == "hostloss":
            rc.failure_config = FailureConfig(max_failures=1)
            grid = Tuner(mh_trainables.host_dies, param_space={"x": grid_search([0.0, 1.0]), "marker": opts["marker"]},
                         tune_config=TuneConfig(metric="loss", mode="min"), run_config=rc,
                         scaling_config=ScalingConfig(num_workers=1)).fit()
        elif opts["mode"] == "pathloss":
            rc.failure_config = FailureConfig(max_failures=2)
            grid = Tuner(mh_trainables.path_lost, param_space={"x": grid_search([0.0, 1.0]), "marker": opts["marker"]},
                         tune_config=TuneConfig(metric="loss", mode="min"), run_config=rc,
                         scaling_config=ScalingConfig(num_workers=1)).fit()
        elif opts["mode"] == "pathloss-group":
            rc.failure_config = FailureConfig(max_failures=2)
            grid = Tuner(mh_trainables.path_lost_group,
                         param_space={"x": grid_search([0.0, 1.0]), "marker": opts["marker"]},
                         tune_config=TuneConfig(metric="loss", mode="min"), run_config=rc,
                         scaling_config=ScalingConfig(num_workers=2, placement_strategy="SPREAD")).fit()
        elif opts["mode"] == "elastic":
            rc.failure_config = FailureConfig(max_failures=1)
            rc.name = "elastic"
            grid = Tuner(mh_trainables.elastic_hosts,
                         param_space={"steps": 6, "marker_lost": opts["marker_lost"],
                                      "marker_shrunk": opts["marker_shrunk"]},
                         tune_config=TuneConfig(metric="loss", mode="min"), run_config=rc,
                         scaling_config=ScalingConfig(num_workers=(1, 2), placement_strategy="SPREAD")).fit()
        elif opts["mode"] == "checkpoint":
            grid = Tuner(mh_trainables.checkpointing, param_space={"x": grid_search([0.0, 1.0])},
                         tune_config=TuneConfig(metric="loss", mode="min"), run_config=rc).fit()
        else:
            grid = Tuner(getattr(mh_trainables, opts.get("fn", "sweep")), param_space={"x": grid_search([0.0, 1.0, 2.0, 3.0]),
                                                           "canary": opts.get("canary", "")},
                         tune_config=TuneConfig(metric="loss", mode="min"), run_config=rc).fit()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        print("ERROR " + json.dumps({"type": type(exc).__name__, "message": str(exc),
                                     "seconds": time.monotonic() - t0}), flush=True)
        return
    if opts.get("journal"):
        from tuneplat import read_journal

        for e in read_journal(os.path.join(grid.experiment_path, "journal.jsonl")):
            print("JOURNAL", json.dumps(e, default=str)[:300], flush=True)
    journal = os.path.join(opts["storage"], "elastic", "journal.jsonl")
    resizes = []
    if opts["mode"] == "elastic" and os.path.exists(journal):
        with open(journal) as f:
            resizes = [e for e in map(json.loads, f) if e.get("event") == "resize"]
    print("RESULT " + json.dumps({"seconds": time.monotonic() - t0, "resizes": resizes, "trials": [
        {"error": None if r.error is None else str(r.error), "metrics": {k: v for k, v in r.metrics.items()
                                                                          if isinstance(v, (str, int, float, bool))}}
        for r in grid]}), flush=True)


if __name__ == "__main__":
    main()
