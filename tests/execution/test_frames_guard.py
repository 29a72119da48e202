"""sys._current_frames() in a rank's process runs without the garbage collector on CPython 3.11 (gh-106883).

Dask's worker profiler calls it every 10 ms; on 3.11 a collection inside it can stop the process for good (seen in
CI: a data-path rank "sent nothing for 30s", faulthandler showing ``Garbage-collecting`` in ``trigger_profile``).
The child script makes that collection happen at each of several points of the call, with and without the guard.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tuneplat as tune
from tuneplat.execution import _frames_guard

SCRIPT = Path(__file__).with_name("frames_guard_child.py")
ROOT = Path(__file__).resolve().parents[2]
OFFSETS = range(8)

needs_affected_python = pytest.mark.skipif(
    not _frames_guard.affected(), reason=f"CPython {sys.version.split()[0]} never collects inside the call (3.11 does)")


def _run_all(mode: str, bound_s: float) -> dict[int, bool]:
    """Whether the call returned, per offset (the children run side by side; one still running after ``bound_s``
    is stuck: a normal run takes a fraction of a second)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("TUNEPLAT_FRAMES_GUARD", None)
    procs = {o: subprocess.Popen([sys.executable, str(SCRIPT), mode, str(o)], stdout=subprocess.PIPE, text=True,
                                 env=env, cwd=ROOT) for o in OFFSETS}
    returned = {}
    for o, p in procs.items():
        try:
            out, _ = p.communicate(timeout=bound_s)
            returned[o] = p.returncode == 0 and out.startswith("returned")
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            returned[o] = False
    return returned


@pytest.mark.skipif(not _frames_guard.affected() or sys.version_info[:3] >= (3, 11, 9),
                    reason="the deadlock is reproduced on CPython 3.11.0-3.11.8 (3.11.7 here, 3.11.8 in gh-116969); "
                           "later 3.11 releases keep the guard but are not known to need it")
def test_without_the_guard_a_collection_inside_the_call_never_returns():
    # the CPython bug, reproduced: at some offsets the collector frees the thread-local inside the lock it needs
    returned = _run_all("no-guard", 5)
    assert not all(returned.values()), returned


@needs_affected_python
def test_with_the_guard_the_call_returns_at_every_offset():
    assert all(_run_all("guard", 60).values())


def test_affected_versions():
    assert _frames_guard.affected((3, 11, 7), "cpython") and _frames_guard.affected((3, 11, 14), "cpython")
    assert not _frames_guard.affected((3, 10, 14), "cpython") and not _frames_guard.affected((3, 12, 0), "cpython")
    assert not _frames_guard.affected((3, 11, 7), "pypy")


def _which_current_frames(config):
    tune.report({"module": sys._current_frames.__module__})


@needs_affected_python
def test_a_rank_runs_with_the_guard_in_place(dask_client, tmp_path):
    grid = tune.Tuner(_which_current_frames, run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0,
                                                                      mlflow=False), client=dask_client).fit()
    assert grid[0].error is None and grid[0].metrics["module"] == "tuneplat.execution._frames_guard"


def _guard_module() -> str:
    return sys._current_frames.__module__


@needs_affected_python
def test_the_embedded_clusters_workers_have_the_guard_from_their_start():
    """Before any rank: a worker's start imports the user's modules in a thread that ends, with the profiler on."""
    from tuneplat.execution._cluster import Cluster

    cluster = Cluster()
    try:
        found = cluster.client.run(_guard_module)
    finally:
        cluster.close()
    assert found and set(found.values()) == {"tuneplat.execution._frames_guard"}, found
