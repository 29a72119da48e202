"""A real ``mlflow server`` (sqlite backend, local artifact root, 127.0.0.1) for the tracking tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from procs import popen, stop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started with start_new_session=True and everything it spawned (never raises)."""
    stop(proc)


def start_mlflow(args: list[str], port: int, log_path: str, timeout: float = 120.0) -> subprocess.Popen:
    """Start an mlflow CLI process on 127.0.0.1:port and return once /health answers."""
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(log_path, "wb")  # noqa: SIM115 - kept open for the server's lifetime
    proc = popen([sys.executable, "-m", "mlflow", *args, "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{port}/health"
    while True:  # readiness probe of an external process
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow {args[0]} exited with {proc.returncode}; see {log_path}:\n"
                               + open(log_path, errors="replace").read()[-3000:])
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_group(proc)
            raise RuntimeError(f"mlflow {args[0]} did not answer {url} within {timeout}s; see {log_path}")
        time.sleep(0.25)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """URI of a running ``mlflow server`` (stopped, with its process group, at the end of the session)."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    proc = start_mlflow(["server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
                         "--artifacts-destination", str(root / "artifacts")], port, str(root / "server.log"))
    yield f"http://127.0.0.1:{port}"
    stop_group(proc)
