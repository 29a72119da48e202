"""Shared fixtures: one real Dask LocalCluster (worker processes) for the whole session."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import pytest
from procs import kept_note, popen, stop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Worker processes import test modules' functions by reference: make the repo importable there.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.path.join(ROOT, "tests"), os.environ.get("PYTHONPATH")) if p)

# ---------------------------------------------------------------- litter check
# The session's temporary files go to a folder of its own (TMPDIR, inherited by Dask workers, the MLflow uploader
# and every subprocess), so that what a test leaves behind can be told apart from other processes' files. At the
# end, anything left there (beyond pytest's own tmp_path folders and caches that libraries keep on purpose) and
# any new file in the checkout fails the session, naming the paths.
_SYSTEM_TMP = tempfile.gettempdir()
SESSION_TMP = tempfile.mkdtemp(prefix="tuneplat-tests-", dir=_SYSTEM_TMP)
os.environ["TMPDIR"] = SESSION_TMP
tempfile.tempdir = SESSION_TMP
# the key that signs experiment pickles (tuneplat/_signing.py): the session's own, never the user's ~/.config
KEY_DIR = os.path.join(SESSION_TMP, "tuneplat-keys")
os.environ["TUNEPLAT_KEY_DIR"] = KEY_DIR
#: left on purpose by libraries, not by tests: pytest's tmp_path root, Dask's scratch root, compiler caches
_KEPT_IN_TMP = ("pytest-of-", "dask-scratch-space", "torchinductor_", "matplotlib-",
                "__autograph_generated_file")  # (TensorFlow's autograph writes its code there, for the process's life)
#: build and tool outputs in the checkout that are not litter
_SKIPPED_IN_CHECKOUT = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints"}


def _checkout_files() -> set[str]:
    found = set()
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_IN_CHECKOUT and not d.endswith(".egg-info")]
        found.update(os.path.relpath(os.path.join(top, n), ROOT) for n in files)
        found.update(os.path.relpath(os.path.join(top, d), ROOT) + "/" for d in dirs)
    return found


_CHECKOUT_BEFORE = _checkout_files()


def litter() -> list[str]:
    """What the session left: paths in its temporary folder and new paths in the checkout."""
    left = [os.path.join(SESSION_TMP, n) for n in sorted(os.listdir(SESSION_TMP)) if not n.startswith(_KEPT_IN_TMP)]
    new = sorted(_checkout_files() - _CHECKOUT_BEFORE)
    tops = sorted({p.split("/", 1)[0] + ("/" if "/" in p else "") for p in new})
    return left + [os.path.join(ROOT, t) for t in tops]


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks
        return
    from procs import stop_leftovers

    shutil.rmtree(KEY_DIR, ignore_errors=True)  # (the session's signing key: not a test's litter)
    stopped = stop_leftovers()  # a test that failed before its clean-up: its processes end here, said by name
    if stopped:
        print("\ntuneplat tests: stopped processes a test left running:\n  " + "\n  ".join(stopped), file=sys.stderr)
    left = litter()
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nFAILED litter check: the tests left {len(left)} path(s) behind (each test must clean up: use "
              "tmp_path, never the checkout or the bare temporary folder):\n  " + "\n  ".join(left[:30]),
              file=sys.stderr)
        print(kept_note(SESSION_TMP), file=sys.stderr)
        return
    if exitstatus == 0 and not stopped:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)
    else:  # keep pytest's tmp_path folders of a failed session for a look, and say where they are
        print(kept_note(SESSION_TMP), file=sys.stderr)


@pytest.fixture(scope="session")
def dask_client():
    """A 2-worker LocalCluster (one single-threaded process per slot), as tuneplat starts by default."""
    from cluster_fixtures import local_client

    with local_client(2) as client:
        yield client


@pytest.fixture
def storage(tmp_path):
    """A fresh storage_path for one test."""
    return str(tmp_path / "results")


def pytest_configure(config):
    sys.path.insert(0, ROOT)


# ---------------------------------------------------------------- a real S3 endpoint (remote storage tests)
# moto's S3 server in its own process on 127.0.0.1; tuneplat reaches it through s3fs, the fsspec
# filesystem users install for s3:// URLs: the same code path as AWS S3 or MinIO.

def _free_port_s3() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _MotoServer:
    """moto's S3 server on 127.0.0.1:port, started again on the same port if it is no longer running (it should
    not stop: tests/test_suite_cleanup.py ended it mid-session by calling the session-end clean-up, until that test
    set the session's process list aside)."""

    def __init__(self, log_dir: Any) -> None:
        self.port = _free_port_s3()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "moto.log"
        self.proc: Any = None

    def ensure(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            return self.url
        if self.proc is not None:
            logging.getLogger("tuneplat.tests").warning("moto.server had exited (%s); starting it again",
                                                        self.proc.returncode)
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the server's lifetime
        self.proc = popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                          stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:  # readiness probe of an external process
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto.server exited with {self.proc.returncode}: "
                                   f"{open(self.log_path).read()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2):
                    return self.url
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # readiness probe of an external process: nothing to block on


@pytest.fixture(scope="session")
def _moto_server(tmp_path_factory):
    try:  # part of the test extras: a missing one is an error to fix, not a reason to skip
        import moto.server  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the remote-storage tests need s3fs and moto[server]: pip install -e '.[test]' ({exc})")
    server = _MotoServer(tmp_path_factory.mktemp("s3"))
    yield server
    if server.proc is not None:
        stop(server.proc)


@pytest.fixture
def s3_endpoint(_moto_server):
    """The URL of a running S3 server (one for the session, stopped at its end)."""
    return _moto_server.ensure()


_BUCKETS = iter(range(10**6))


@pytest.fixture
def s3(s3_endpoint):
    """``(filesystem, "s3://bucket")``: an s3fs filesystem on the test server and a fresh bucket."""
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing",
                           client_kwargs={"region_name": "eu-west-1"})
    bucket = f"tuneplat-test-{next(_BUCKETS)}-{os.getpid()}"
    fs.mkdir(bucket)
    return fs, f"s3://{bucket}"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh local cache for remote experiments (the tuner's side only)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("TUNEPLAT_CACHE_DIR", str(d))
    return d



@pytest.fixture(autouse=True)
def _tuneplat_logger_as_found():
    """``tuneplat.cli.main()`` run in-process configures the ``tuneplat`` logger for a terminal (its own handler,
    no propagation): put it back after each test, so later tests' ``caplog`` sees tuneplat's warnings."""
    log = logging.getLogger("tuneplat")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved[0], saved[1], saved[2]
