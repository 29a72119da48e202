"""Every ``TUNEPLAT_*`` environment variable, read in one place.

They are read when asked (not at import), so a test or a notebook can change
one before a ``fit()``. A value that is not what it should be is an error that
names the variable, its value and the form expected.

| variable | default | what |
|---|---|---|
| ``TUNEPLAT_START_TIMEOUT_S`` | 90 | every rank of a group connects within this after being placed |
| ``TUNEPLAT_HEARTBEAT_TIMEOUT_S`` | 30 | a rank silent this long (no report, no heartbeat) is hung |
| ``TUNEPLAT_ABORT_GRACE_S`` | 15 | an aborted rank's user code may take this long to unwind before its process ends |
| ``TUNEPLAT_WORKER_WAIT_S`` | 60 | how long ``fit()`` waits for workers a trial needs to join; nothing runs and nothing can be placed this long: the experiment ends (a trial that ran and lost its worker: ERROR) |
| ``TUNEPLAT_STOP_GRACE_S`` | 5 | after the time budget or fail-fast asked trials to stop, a trial that does not report is aborted |
| ``TUNEPLAT_SYNC_PERIOD_S`` | 10 | remote storage: how often the experiment's small files are uploaded |
| ``TUNEPLAT_MLFLOW_FLUSH_TIMEOUT_S`` | 30 | how long ``fit()`` waits at its end for MLflow logging to finish |
| ``TUNEPLAT_RUNNER_IDLE_S`` | 60 | how long a chained-trial runner waits for its next trial |
| ``TUNEPLAT_TUNER_HOST`` | (chosen) | the address ranks use to reach the tuner |
| ``TUNEPLAT_AUTH_TIMEOUT_S`` | 10 | a peer of the tuner's port must finish TLS and authentication within this |
| ``TUNEPLAT_MAX_REPORT_BYTES`` | 1073741824 (1 GiB) | the largest message (a report, pickled) a rank may send the tuner; a larger report fails its trial naming its size and this limit |
| ``TUNEPLAT_JOURNAL_FULL_S`` | 60 | how long the journal waits for disk space (``ENOSPC``, retried with backoff) before the experiment ends, resumable |
| ``TUNEPLAT_KEY_DIR`` | ``~/.config/tuneplat`` | where the per-user key (0600) that signs ``tuner.pkl``, ``trainer.pkl`` and the journal's pickles is kept |
| ``TUNEPLAT_CACHE_DIR`` | ``~/.cache/tuneplat`` | the local cache of experiments on remote storage |
| ``TUNEPLAT_TUNER_PORT`` | (any free port) | the tuner's result port, or a range ``a-b`` (a firewall that opens only these) |
| ``TUNEPLAT_CONNECT_TIMEOUT_S`` | 10 | a rank reaches the tuner's result port within this, or fails naming the address |
| ``TUNEPLAT_UNREACHABLE_RETRY_S`` | 15 | a worker whose rank could not reach the tuner takes no trial for this long, doubled at each new failure (up to 600 s; reset once a rank there connects): a path lost for a while comes back, a firewall does not |
| ``TUNEPLAT_LOCAL_TLS`` | 1 | the embedded cluster (and the rank channel) use TLS with temporary certificates; 0 turns it off |
| ``TUNEPLAT_PRELOAD_IMPORTS`` | 0 | 1: the embedded cluster's workers import the trainable's modules in a background thread as they start (off by default: no gain measured on 2 cores, and a race with a task importing torch at the same moment) |
| ``TUNEPLAT_LOCAL_SOCKET`` | 1 | ranks on the tuner's host reach it through a local (Linux abstract) socket, token-authenticated, instead of TCP/TLS; 0: TCP (TLS where the cluster has TLS) for every rank |
| ``TUNEPLAT_SKLEARN_IDLE_S`` | 300 | ``tuneplat.sklearn``: how long the embedded cluster is kept between searches (0: closed after each) |
| ``TUNEPLAT_NUM_CPUS`` | (cores) | worker slots of the embedded cluster, over ``init(num_cpus=)`` (Ray's ``RAY_OVERRIDE_RESOURCES``): oversubscribe a laptop |
| ``TUNEPLAT_PLAIN_PROGRESS`` | (unset) | set: the live view prints plain lines even on a terminal |
| ``TUNEPLAT_REPORT_TIMEOUT_S`` | 1800 | a rank that has not reached ``report()`` this long after another rank of its group did is hung (a deadlock): the stacks are captured and the trial fails |
| ``TUNEPLAT_TASK_LOST_GRACE_S`` | 2 | an elastic rank whose Dask task was declared lost while its connection lives: how long a preemption notice may take before the rank counts as lost |
| ``TUNEPLAT_OOM_CHECK_S`` | 5 | how long the tuner waits for a live worker of another host to read whether the kernel's OOM killer ended a rank there |
| ``TUNEPLAT_RETIRE_POLL_S`` | 0.1 | how often an elastic group's rank looks whether its Dask worker is closing |
| ``TUNEPLAT_STORE_LINGER_S`` | 60 | the longest rank 0 keeps its group's rendezvous store (torch's backend) open for ranks that have not finished |
| ``TUNEPLAT_STALE_LOCK_S`` | 60 | a rank waiting this long for a torch extension's build lock that no process on its host holds (left by a killed build: DeepSpeed's ops) makes the tuner warn, naming the file to delete |
| ``TUNEPLAT_SYSTEM_METRICS_S`` | 5 | how often a rank samples CPU, memory and GPU (0: system metrics off) |
| ``TUNEPLAT_SYSTEM_METRICS_JOURNAL_S`` | 60 | system metrics reach the journal at most this often per trial (every sample reaches the callbacks) |
| ``TUNEPLAT_WORKERS_FILE_S`` | 2 | how often the live per-rank table (``tuneplat status --workers``) is written |
| ``TUNEPLAT_DATA_TIMEOUT_S`` | 120 (0: no bound) | how long a rank waits for its dataset shard's next batch |
| ``TUNEPLAT_CHDIR_TO_TRIAL_DIR`` | 1 | each trial's function runs in its trial folder (Ray's ``RAY_CHDIR_TO_TRIAL_DIR``); 0: in the tuner's folder |
| ``TUNEPLAT_REUSE_WORKERS`` | 0 | 1: a worker process that ran a rank of a backend that asks for new processes (``Backend.reuses_worker_process = False``: TensorFlow's; ``reuses_worker_process_after_failure = False``: JAX's, after a failed group) is used again as it is, not restarted after the group |
| ``TUNEPLAT_FORK_GUARD`` | 1 | on Pythons with CPython's fork bug gh-112275 (3.10.0-3.10.14, 3.11.0-3.11.9), a process a rank forks (``DataLoader`` workers) waits until no thread holds the interpreter's thread-state lock, which the child would otherwise inherit held and hang on; 0: forks as they are |
| ``TUNEPLAT_FRAMES_GUARD`` | 1 | on CPython 3.11, ``sys._current_frames()`` in a worker process running ranks (the embedded cluster's: from its start) runs with the garbage collector off (CPython gh-106883: a collection inside it can stop the process for good; Dask's worker profiler calls it every 10 ms); 0: as it is |
| ``TUNEPLAT_WORKER_IMPORTS`` | (unset) | modules the embedded cluster's workers import as they start (set by the tuner for them) |

Each is read where it is used, each time (``tests/test_settings.py`` checks that every ``TUNEPLAT_*`` name the
package reads is in this table, and that none is read when a module is imported).
"""

from __future__ import annotations

import math
import os

__all__ = ["env_seconds", "env_str"]


def env_seconds(name: str, default: float) -> float:
    """A duration in seconds from the environment (``default`` when unset or empty)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds; set it to e.g. {name}={default:g}, "
                         "or unset it for the default") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={raw!r} must be a finite number of seconds >= 0")
    return value


def env_str(name: str) -> str | None:
    """A string setting (None when unset or empty)."""
    raw = os.environ.get(name, "").strip()
    return raw or None
