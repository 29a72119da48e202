"""The tuner's control loop: one thread, one selector, events in, decisions out.

Ranks connect to a TCP listener owned by the loop (on 127.0.0.1 unless the
cluster spans hosts). Every ``report()`` is a small frame; the loop answers
it with the decision at once, so a result reaches the scheduler within
milliseconds and the worker obeys the decision at that very report. Dask
futures tell the loop when a rank's task has ended (through a socketpair that
wakes the selector). Nothing sleeps or polls.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import pickle
import secrets
import selectors
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schedulers import Decision, FIFOScheduler, Launch, Resume, Stop, TrialScheduler

from ._checkpoint import Checkpoint
from ._config import RunConfig, ScalingConfig, TuneConfig
from ._journal import Journal, to_jsonable
from ._progress import ProgressReporter
from ._storage import (
    ExperimentSync,
    checkpoint_name,
    clean_staging,
    commit_checkpoint,
    remote_clean_staging,
    remote_commit_checkpoint,
    remote_copy_checkpoint,
    remote_delete_checkpoint,
    retain,
    rjoin,
    stage_checkpoint,
)
from ._trial import Trial, TrialStatus
from .execution._cluster import Assignment, Cluster, Ledger
from .execution._runner import run_rank
from .execution._wire import FrameReader, send_msg
from .search._searcher import BasicVariantGenerator, Searcher
from .train._session import RankSpec

logger = logging.getLogger("tuneplat")

__all__ = ["Controller", "TuneError"]

#: seconds for every rank of a group to connect after its tasks were submitted
START_TIMEOUT_S = float(os.environ.get("TUNEPLAT_START_TIMEOUT_S", "90"))


def _heartbeat_timeout_s() -> float:
    """A rank silent this long (no report, no heartbeat) is hung: SIGSTOP, a wedged process or host."""
    return float(os.environ.get("TUNEPLAT_HEARTBEAT_TIMEOUT_S", "30"))


def _abort_grace_s() -> float:
    """How long an aborted rank's user code may take to unwind before its worker process is ended."""
    return float(os.environ.get("TUNEPLAT_ABORT_GRACE_S", "15"))


class TuneError(RuntimeError):
    """The experiment could not go on (e.g. fail_fast='raise')."""


@dataclass
class _Rank:
    index: int
    assignment: Assignment
    future: Any = None
    conn: socket.socket | None = None
    finished: str | None = None  # "done" | "error" | "dead"
    task_done: bool = False
    released: bool = False
    last_seen: float = 0.0
    ever_connected: bool = False
    pid: int | None = None
    hostname: str | None = None
    channel: _Conn | None = None  # the connection's reader state (``conn`` is its socket)
    offers_next: bool = False  # its runner said "done"/"error" and waits for ("next", spec) or ("bye",)
    parked: bool = False  # an idle runner holding its slot until the loop gives it a trial or "bye"
    chained: bool = False  # started by ("next", spec) on a runner that ran an earlier trial
    started_ack: bool = True  # a chained rank acknowledged "next" (user code runs): False until then
    conn_shut: bool = False  # we shut its connection down (group aborted): its runner cannot take more


@dataclass
class _Group:
    trial: Trial
    attempt: int
    token: bytes
    ranks: list[_Rank]
    started: float = field(default_factory=time.monotonic)
    reports: dict[int, dict[int, tuple[Any, bool]]] = field(default_factory=dict)
    rendezvous: tuple[Any, ...] | None = None
    failure: tuple[str, str | None] | None = None
    decision: Decision | None = None
    stop_requested: Decision | None = None
    aborted: bool = False
    ended: bool = False
    lost_before_start: bool = False

    started_ok: bool = False  # every rank connected once

    @property
    def connected(self) -> bool:
        self.started_ok = self.started_ok or all(r.conn is not None or r.finished for r in self.ranks)
        return self.started_ok


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = FrameReader()
        self.group: _Group | None = None
        self.rank: _Rank | None = None


class Controller:
    """Runs one experiment to the end (see module docstring)."""

    def __init__(self, *, trainable: Callable[..., Any], param_space: Mapping[str, Any], tune_config: TuneConfig,
                 run_config: RunConfig, scaling_config: ScalingConfig, experiment_dir: str, experiment_name: str,
                 trainable_name: str, client: Any = None, callbacks: list[Any] | None = None,
                 trials: list[Trial] | None = None, resume: bool = False, storage_fs: Any = None,
                 remote_dir: str | None = None) -> None:
        self.trainable = trainable
        self.storage_fs = storage_fs  # remote storage: checkpoints live there, small files are synced there
        self.remote_dir = remote_dir
        self.syncer = ExperimentSync(experiment_dir, storage_fs, remote_dir) if remote_dir is not None else None
        self.param_space = dict(param_space or {})
        self.tc = tune_config
        self.rc = run_config
        self.sc = scaling_config
        self.experiment_dir = experiment_dir
        self.experiment_name = experiment_name
        self.trainable_name = trainable_name
        self.client_arg = client
        self.callbacks = list(callbacks or [])
        self.metric = tune_config.metric
        self.mode = tune_config.mode
        self.request = scaling_config.per_worker()
        self.world_size = scaling_config.num_workers
        self.resume = resume

        self.searcher: Searcher = tune_config.search_alg or BasicVariantGenerator()
        self.scheduler: TrialScheduler = tune_config.scheduler or FIFOScheduler()
        self.trials: list[Trial] = list(trials or [])
        self.by_id: dict[str, Trial] = {t.trial_id: t for t in self.trials}
        self.queue: collections.deque[Trial] = collections.deque()
        self.groups: dict[str, _Group] = {}  # trial_id -> live group
        self.idle: list[_Rank] = []  # parked runners of ended single-rank trials (see _park)
        self.task_owner: dict[str, tuple[_Group, _Rank]] = {}  # Dask task key -> the rank it runs now
        self.tokens: dict[bytes, _Group] = {}
        self.searcher_done = False
        self.searcher_blocked = False
        self.search_finished_told = False
        self.suggested = 0
        self.stopping = False
        self.interrupted = False
        self.fail_fast_error: str | None = None
        self._exp_tag = secrets.token_hex(3)[:5]
        self._wake_events: collections.deque[tuple[str, Any]] = collections.deque()
        self._deferred_actions: dict[str, list[Resume | Launch | Stop]] = {}  # wait for the group to end
        self._ready_actions: list[Resume | Launch | Stop] = []
        self._result_files: dict[str, Any] = {}
        self._stop_fn = self._make_stopper(run_config.stop)
        # stop-dict keys every result must carry (Ray raises on a missing one); an absent "done" is False
        self._stop_keys = [k for k in run_config.stop if k != "done"] if isinstance(run_config.stop, Mapping) else []
        stop_all = getattr(run_config.stop, "stop_all", None) if not isinstance(run_config.stop, Mapping) else None
        self._stop_all_fn: Callable[[], bool] | None = stop_all if callable(stop_all) else None
        self._deadline: float | None = None  # set once the cluster is up: the budget is for trials
        self.reporter = ProgressReporter(self.metric, self.mode, run_config.verbose, run_config.progress_interval_s)
        self.hang_timeout_s = _heartbeat_timeout_s()
        self.max_slots = 0
        self._last_refresh = 0.0
        self._starved_since: float | None = None  # nothing runs and nothing can be placed, since
        self.starve_timeout_s = float(os.environ.get("TUNEPLAT_WORKER_WAIT_S", "60"))
        self._refresh_at: float | None = None
        self.abort_grace_s = _abort_grace_s()

    # ------------------------------------------------------------------ setup
    @staticmethod
    def _make_stopper(stop: Any) -> Callable[[str, Mapping[str, Any]], bool] | None:
        if stop is None:
            return None
        if callable(stop):
            return lambda tid, result: bool(stop(tid, result))
        criteria = dict(stop)

        def check(tid: str, result: Mapping[str, Any]) -> bool:
            for key, threshold in criteria.items():
                v = result.get(key)
                if isinstance(v, (int, float)) and v >= threshold:  # bools too: stop={"done": True}
                    return True
            return False

        return check

    def _setup_search(self) -> None:
        metric, mode = self.metric, self.mode
        if (isinstance(metric, list) and self.scheduler.requires_objective()
                and getattr(self.scheduler, "metric", None) is None):
            raise ValueError(
                f"TuneConfig(metric={metric!r}, mode={mode!r}) is multi-objective, but "
                f"{type(self.scheduler).__name__} decides on one metric: pass it one, e.g. "
                f"{type(self.scheduler).__name__}(metric={metric[0]!r}, mode={mode[0]!r}, ...), "
                "or leave TuneConfig.scheduler unset (FIFO) for a multi-objective search.")
        self.scheduler.set_objective(metric if not isinstance(metric, list) else None,
                                     mode if not isinstance(mode, list) else None)
        if self.metric is None and getattr(self.scheduler, "metric", None):
            self.metric, self.mode = self.scheduler.metric, self.scheduler.mode
        ok = self.searcher.set_search_properties(
            self.metric, self.mode, self.param_space, num_samples=self.tc.num_samples, seed=self.tc.seed,
            experiment_dir=self.experiment_dir, resume=self.resume,
        )
        if ok is False:
            raise ValueError(f"{type(self.searcher).__name__} was set up with its own search space; "
                             "don't pass param_space to the Tuner as well.")
        if self.metric is None and getattr(self.searcher, "metric", None):
            self.metric, self.mode = self.searcher.metric, self.searcher.mode
        self.reporter = ProgressReporter(self.metric, self.mode, self.rc.verbose, self.rc.progress_interval_s)
        if self.trials:
            self._replay()

    def _replay(self) -> None:
        """Restore: rebuild searcher and scheduler state from the trials in the journal."""
        self._exp_tag = self.trials[0].trial_id.rsplit("_", 1)[0]
        self.suggested = len(self.trials)
        self.searcher.restore_trials([
            {"trial_id": t.trial_id, "config": t.config, "status": t.status.value, "result": t.last_result or None}
            for t in self.trials
        ])
        for t in self.trials:
            self.scheduler.on_trial_add(t.trial_id, t.config)
            for r in t.results:
                self.scheduler.on_trial_result(t.trial_id, r)
            if t.status == TrialStatus.TERMINATED:
                self.scheduler.on_trial_complete(t.trial_id, t.last_result or None)
            elif t.status == TrialStatus.ERROR:
                self.scheduler.on_trial_error(t.trial_id)
            else:
                self.queue.append(t)
        self.scheduler.pop_actions()  # decisions of the past were already carried out

    # ------------------------------------------------------------------ run
    def run(self) -> None:
        os.makedirs(self.experiment_dir, exist_ok=True)
        self.journal = Journal(os.path.join(self.experiment_dir, "journal.jsonl"))
        self._setup_search()
        self.cluster = Cluster(self.client_arg, self.rc.address, cpus_per_rank=self.request.get("CPU", 1.0))
        self._trainable_deps: tuple[Any, ...] = ()
        bind = getattr(self.trainable, "_tuneplat_bind", None)
        if bind is not None:  # tune.with_parameters: its objects go to the cluster once, not with every task
            self.trainable, self._trainable_deps = bind(self.cluster.client)
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        old_handler = None
        try:
            self.ledger = Ledger()
            self.cluster.wait_for_workers()
            if self.tc.time_budget_s:
                self._deadline = time.monotonic() + self.tc.time_budget_s
            self._refresh_ledger()
            self.ledger.check_fits_empty(self.request, self.world_size, self.sc.placement_strategy)
            host = self.cluster.tuner_host()
            self.listener = socket.create_server((host, 0), backlog=128)
            self.listener.setblocking(False)
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")
            self.tuner_addr = (host, self.listener.getsockname()[1])
            if self.cluster.dashboard_link:
                self.reporter.say(f"tuneplat: Dask dashboard at {self.cluster.dashboard_link}")
            self.reporter.say(f"tuneplat: experiment folder {self.experiment_dir}")
            self.journal.append({"event": "experiment", "name": self.experiment_name,
                                 "metric": self.metric, "mode": self.mode, "num_samples": self.tc.num_samples,
                                 "scheduler": to_jsonable(self.scheduler.describe()),
                                 "searcher": type(self.searcher).__name__, "resume": self.resume,
                                 "scaling": {"num_workers": self.world_size, "resources_per_worker": self.request}})
            for cb in self.callbacks:
                cb.on_experiment_start(self)
            if threading.current_thread() is threading.main_thread():
                old_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
            self._loop()
        except KeyboardInterrupt:
            self.interrupted = True
            logger.warning("tuneplat: interrupted; ending running trials. Resume with Tuner.restore(%r, trainable).",
                           self.experiment_dir)
            self._teardown_all("experiment interrupted")
        finally:
            if old_handler is not None:
                signal.signal(signal.SIGTERM, old_handler)
            self._close()

    def _close(self) -> None:
        status = "interrupted" if self.interrupted else ("failed" if self.fail_fast_error else "finished")
        try:
            for cb in self.callbacks:
                try:
                    cb.on_experiment_end(self, status)
                except Exception:  # noqa: BLE001 - a callback must not lose the results
                    logger.exception("tuneplat: callback %r failed at experiment end", cb)
            self.journal.append({"event": "experiment_end", "status": status})
            self.reporter.maybe_report(self.trials, force=True)
        finally:
            for f in self._result_files.values():
                f.close()
            self._result_files.clear()
            self.journal.close()
            self.searcher.close()
            if self.syncer is not None:
                self._final_sync()
            selector = getattr(self, "selector", None)
            if selector is not None:
                # ranks still connected (e.g. one that said hello while an interrupt tore the experiment
                # down) must see the tuner go now, not when this object is garbage-collected: a rank
                # waiting for "go" would hold its Dask worker until then
                for key in list(selector.get_map().values()):
                    if isinstance(key.data, _Conn):
                        try:
                            key.data.sock.close()
                        except OSError:
                            pass
                selector.close()
            for s in (getattr(self, "listener", None), self._wake_r, self._wake_w):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass
            self.cluster.close()

    def _final_sync(self) -> None:
        assert self.syncer is not None
        error = self.syncer.close()
        if error:
            logger.warning("tuneplat: could not upload the experiment's files to %s (%s); they are complete in %s. "
                           "Copy that folder there, or run Tuner.restore on it.", self.remote_dir, error,
                           self.experiment_dir)

    def _loop(self) -> None:
        while True:
            self._drain_actions()
            if not self.stopping:
                self._launch_what_fits()
            self._dismiss_idle()  # runners no trial was given to in this pass leave their slots
            # (after launching: a journal fsync, ~2 ms, never delays the start of a trial that a runner waits for)
            self._sync_files()
            self.reporter.maybe_report(self.trials)
            if self._finished():
                break
            timeout = self._next_timeout()
            for key, _mask in self.selector.select(timeout):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                else:
                    self._read(key.data)
            self._drain_wake_events()
            self._check_deadlines()

    def _finished(self) -> bool:
        if self.groups or (self.queue and not self.stopping):
            return False  # (when stopping, queued trials stay PENDING: restorable)
        if not (self.searcher_done or self.stopping):
            return False
        if not self.search_finished_told:
            self.search_finished_told = True
            self.scheduler.on_search_finished()
            self._drain_actions()
            if self.queue:
                return False
        paused = [t for t in self.trials if t.status == TrialStatus.PAUSED and not self.interrupted]
        for t in paused:  # nothing will ever resume them
            t.stop_reason = t.stop_reason or "left paused when the experiment ended"
            self._end_trial(t, TrialStatus.TERMINATED)
        return True

    def _next_timeout(self) -> float:
        now = time.monotonic()
        deadlines = [self.reporter.due()] if self.reporter.verbose else []
        if self._deadline is not None and not self.stopping:
            deadlines.append(self._deadline)
        for g in self.groups.values():
            if not g.started_ok and not g.connected:
                deadlines.append(g.started + START_TIMEOUT_S)
            for r in g.ranks:
                if r.conn is not None and not r.finished:
                    deadlines.append(r.last_seen + self.hang_timeout_s + 0.01)
        if self.journal._dirty:
            deadlines.append(now + self.journal.sync_interval_s)
        if self._refresh_at is not None:
            deadlines.append(self._refresh_at)
        if self._starved_since is not None:
            deadlines.append(self._starved_since + self.starve_timeout_s + 0.01)
        if self._stop_all_fn is not None and not self.stopping:
            deadlines.append(now + 1.0)  # e.g. a TimeoutStopper: ask it even while no trial reports
        if not deadlines:
            return 5.0
        return max(0.0, min(deadlines) - now)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        self._check_hangs(now)
        if self._refresh_at is not None and now >= self._refresh_at:
            self._refresh_ledger()
        if self._starved_since is not None and not self.groups and now - self._starved_since > self.starve_timeout_s:
            self._starve(now - self._starved_since)
        if self._deadline is not None and now >= self._deadline and not self.stopping:
            self.reporter.say(f"tuneplat: time budget of {self.tc.time_budget_s}s reached; stopping trials.")
            self.journal.append({"event": "time_budget_reached"})
            self._stop_everything("time budget reached")
        self._check_stop_all()
        for g in list(self.groups.values()):
            if not g.started_ok and not g.connected and now - g.started > START_TIMEOUT_S:
                missing = [r.index for r in g.ranks if r.conn is None and not r.finished]
                for r in g.ranks:
                    if r.conn is None and not r.finished:
                        self.ledger.quarantine(r.assignment.address)  # until it leaves or restarts
                self._fail_group(g, f"rank(s) {missing} did not start within {START_TIMEOUT_S:.0f}s of being placed. "
                                    "Look at the Dask workers' logs: a worker that cannot import the trainable's "
                                    "module logs 'Failed to deserialize' (install your code where the workers run, "
                                    "or set PYTHONPATH for them); a dead worker is replaced by its nanny. "
                                    "TUNEPLAT_START_TIMEOUT_S sets this limit")
                for r in g.ranks:
                    if r.conn is None and not r.finished:
                        r.finished = "dead"
                        self._forget_rank(r)
                self._maybe_end_group(g)

    def _stop_everything(self, reason: str) -> None:
        """Stop running trials at their next report; end queued ones; start nothing more."""
        self.stopping = True
        for g in self.groups.values():
            g.stop_requested = Decision.STOP
            g.trial.stop_reason = reason
        while self.queue:
            t = self.queue.popleft()
            t.stop_reason = f"{reason} before it could resume"
            self._end_trial(t, TrialStatus.TERMINATED)

    def _check_stop_all(self) -> bool:
        """``RunConfig(stop=stopper)``: the stopper's ``stop_all()`` ends the experiment (as in Ray)."""
        if self._stop_all_fn is None or self.stopping or not self._stop_all_fn():
            return False
        self.reporter.say(f"tuneplat: {type(self.rc.stop).__name__}.stop_all() is true; stopping every trial.")
        self.journal.append({"event": "stop_all", "stopper": type(self.rc.stop).__name__})
        self._stop_everything(f"{type(self.rc.stop).__name__}.stop_all()")
        return True

    def _lose_unstarted_ranks_on(self, gone: set[str]) -> None:
        """Ranks placed on workers that left before they started will never start: place them again."""
        for g in list(self.groups.values()):
            hit = [r for r in g.ranks if r.assignment.address in gone and r.conn is None and not r.finished
                   and not r.ever_connected]
            if not hit:
                continue
            for r in hit:
                r.finished = "lost"
                if r.future is not None:
                    try:
                        r.future.cancel()
                    except Exception:  # noqa: BLE001
                        pass
                    r.future = None
                r.task_done = True
                self._release(r)
            g.lost_before_start = True
            self._abort_group(g, "a rank's worker left the cluster before the trial started")
            self._maybe_end_group(g)

    def _starve(self, waited: float) -> None:
        """No worker can take a trial and nothing runs that could free one: end, saying why."""
        message = (f"no worker could take this trial for {waited:.0f}s (the cluster has {self.ledger.describe()}, "
                   f"{len(self.ledger.quarantined)} quarantined); TUNEPLAT_WORKER_WAIT_S sets this limit")
        self.reporter.say(f"tuneplat: {message}; ending the experiment (restorable)")
        self.journal.append({"event": "starved", "message": message})
        self.stopping = True
        self.interrupted = True  # what did not run stays restorable
        self.fail_fast_error = message
        self._starved_since = None

    def _check_hangs(self, now: float) -> None:
        for g in list(self.groups.values()):
            for r in g.ranks:
                if r.conn is None or r.finished or now - r.last_seen <= self.hang_timeout_s:
                    continue
                silent = now - r.last_seen
                if r.started_ack:
                    r.finished = "dead"
                    self._fail_group(g, f"rank {r.index} on {r.assignment.address} sent nothing for {silent:.0f}s "
                                        f"(hung or stopped, e.g. SIGSTOP; TUNEPLAT_HEARTBEAT_TIMEOUT_S="
                                        f"{self.hang_timeout_s:g}); its worker process is restarted")
                else:  # a chained rank whose runner never took it (stuck after its previous trial)
                    r.finished = "lost"
                    g.lost_before_start = True
                    self._abort_group(g, "the rank's runner did not take the trial")
                conn_sock = r.conn
                r.conn = None
                r.channel = None
                try:
                    self.selector.unregister(conn_sock)
                    conn_sock.close()
                except (KeyError, ValueError, OSError):
                    pass
                self.ledger.quarantine(r.assignment.address)
                self._restart_worker(r)
                self._forget_rank(r)
                self._maybe_end_group(g)

    def _restart_worker(self, rank: _Rank) -> None:
        """End a hung worker process so its nanny starts a fresh one.

        On this host the process is SIGKILLed directly (a SIGSTOPped process
        ignores the nanny's polite SIGTERM); elsewhere the nanny is asked to
        restart it, in the background because it can take seconds.
        """
        address = rank.assignment.address
        if rank.pid and rank.hostname == socket.gethostname():
            try:
                os.kill(rank.pid, signal.SIGKILL)
                return
            except OSError:
                pass
        client = self.cluster.client

        def restart() -> None:
            try:
                client.restart_workers([address], timeout=60, raise_for_error=False)
            except Exception as exc:  # noqa: BLE001 - best effort; the ledger drops the worker anyway
                logger.warning("tuneplat: could not restart hung worker %s: %s", address, exc)
            self._wake(("cluster_changed", address))

        threading.Thread(target=restart, name="tuneplat-restart-worker", daemon=True).start()

    def _sync_files(self) -> None:
        if self.journal._dirty and time.monotonic() - self.journal._last_sync >= self.journal.sync_interval_s:
            for f in self._result_files.values():
                f.flush()
            self.journal.sync()
        if self.syncer is not None:
            self.syncer.maybe_sync()

    # ------------------------------------------------------------------ launching
    def _new_trial(self, config: dict[str, Any]) -> Trial:
        index = len(self.trials)
        trial_id = f"{self._exp_tag}_{index:05d}"
        name = f"{self.trainable_name}_{trial_id}"
        trial = Trial(trial_id=trial_id, config=config, path=os.path.join(self.experiment_dir, name), name=name)
        trial.trainable_name = self.trainable_name  # type: ignore[attr-defined]  # Ray's creators read it
        if self.tc.trial_name_creator is not None:
            trial.name = str(self.tc.trial_name_creator(trial))
        if self.tc.trial_dirname_creator is not None:
            dirname = str(self.tc.trial_dirname_creator(trial)).replace(os.sep, "_")
            path = os.path.join(self.experiment_dir, dirname)
            trial.path = path if not os.path.exists(path) else f"{path}_{trial_id}"
        os.makedirs(trial.path, exist_ok=True)
        path = trial.path
        with open(os.path.join(path, "params.json"), "w", encoding="utf-8") as f:
            json.dump(to_jsonable(config), f, indent=2, sort_keys=True)
        self.trials.append(trial)
        self.by_id[trial_id] = trial
        self.journal.append({"event": "trial_add", "trial_id": trial_id, "config": to_jsonable(config),
                             "path": path, "name": trial.name, "config_pickle": _pickle_hex(config)})
        self.scheduler.on_trial_add(trial_id, config)
        for cb in self.callbacks:
            cb.on_trial_add(self, trial)
        return trial

    def _suggest(self) -> Trial | None:
        if self.searcher_done or self.searcher_blocked:
            return None
        limit = self.tc.num_samples
        if not isinstance(self.searcher, BasicVariantGenerator) and limit != -1 and self.suggested >= limit:
            self.searcher_done = True
            return None
        trial_id_hint = f"{self._exp_tag}_{len(self.trials):05d}"
        config = self.searcher.suggest(trial_id_hint)
        if config is None:
            self.searcher_blocked = True
            return None
        if config == Searcher.FINISHED or not isinstance(config, dict):
            self.searcher_done = True
            return None
        self.suggested += 1
        return self._new_trial(config)

    def _launch_what_fits(self) -> None:
        limit = self.tc.max_concurrent_trials
        while True:
            if not self.queue and (self.searcher_done or self.searcher_blocked):
                return
            if limit is not None and len(self.groups) >= limit:
                return
            # an idle runner first: its trial starts now, in the Dask task that is already running there
            runner = self._take_idle()
            placement = None
            if runner is None:
                placement = self.ledger.allocate(self.request, self.world_size, self.sc.placement_strategy)
                if placement is None and not self.groups:  # nothing running will free a slot: the cluster changed
                    self.ledger.refresh(self.cluster.slots())
                    placement = self.ledger.allocate(self.request, self.world_size, self.sc.placement_strategy)
                if placement is None:
                    if not self.groups and self._starved_since is None:
                        self._starved_since = time.monotonic()
                    return
            self._starved_since = None
            trial = self.queue.popleft() if self.queue else self._suggest()
            if trial is None:
                if runner is not None:
                    self.idle.append(runner)  # dismissed at the end of this pass unless a trial comes
                else:
                    for a in placement or ():
                        self.ledger.release(a)
                continue
            if runner is not None:
                self._start_group(trial, [runner.assignment], runner=runner)
            else:
                assert placement is not None
                self._start_group(trial, placement)

    # ------------------------------------------------------------------ chained trials (idle runners)
    def _park(self, rank: _Rank) -> None:
        """A single-rank trial ended on a healthy runner that waits for more: keep it, and its slot, for now.

        The loop gives it the next trial in this same pass (``_launch_what_fits``)
        or sends it "bye" (``_dismiss_idle``); the slot stays reserved meanwhile.
        """
        rank.released = True  # the slot passes to whatever this runner does next (see _unpark)
        rank.parked = True
        self.idle.append(rank)
        if self.stopping:
            self._dismiss_idle()

    def _unpark(self, rank: _Rank, bye: bool) -> None:
        """The runner leaves: "bye" (or nothing, its connection is gone) and its slot is free."""
        self.idle = [r for r in self.idle if r is not rank]
        rank.parked = False
        if bye and rank.conn is not None:
            try:
                send_msg(rank.conn, ("bye",))
            except OSError:
                pass
        if rank.channel is not None:
            self._drop_conn(rank.channel)
        rank.conn = None
        rank.channel = None
        self.ledger.release(rank.assignment)

    def _take_idle(self) -> _Rank | None:
        """An idle runner that can take a trial: its connection is open and its worker still placeable."""
        while self.idle:
            rank = self.idle.pop()
            addr = rank.assignment.address
            if (rank.conn is not None and rank.future is not None and addr in self.ledger.slots
                    and addr not in self.ledger.quarantined):
                return rank
            self._unpark(rank, bye=True)
        return None

    def _dismiss_idle(self) -> None:
        while self.idle:
            self._unpark(self.idle[-1], bye=True)

    def _start_group(self, trial: Trial, placement: list[Assignment], runner: _Rank | None = None) -> None:
        """Start an attempt of ``trial``: one Dask task per rank, or on ``runner`` (an idle single-rank runner)."""
        trial.attempts += 1
        attempt = trial.attempts - 1
        clean_staging(trial.path)  # what a crashed attempt left half-staged must not leak into this one
        if self.remote_dir is not None:
            remote_clean_staging(self.storage_fs, self._remote_trial(trial))
        token = secrets.token_bytes(16)
        checkpoint = trial.checkpoint
        start_iteration = trial.iteration
        if trial.checkpoint is not None and trial.results:
            # a retry or resume: continue from the checkpoint, later results are superseded
            ck_it = trial.checkpoint_iteration()
            if ck_it < start_iteration:
                moved = trial.supersede_after(ck_it)
                self.journal.append({"event": "superseded", "trial_id": trial.trial_id, "after_iteration": ck_it,
                                     "count": moved})
                for cb in self.callbacks:
                    cb.on_trial_superseded(self, trial, ck_it)
            start_iteration = ck_it
        elif trial.checkpoint is None and trial.results:
            moved = trial.supersede_after(0)
            self.journal.append({"event": "superseded", "trial_id": trial.trial_id, "after_iteration": 0,
                                 "count": moved})
            for cb in self.callbacks:
                cb.on_trial_superseded(self, trial, 0)
            start_iteration = 0
        time_offset = float(trial.last_result.get("time_total_s", 0.0)) if trial.results else 0.0
        hosts: list[str] = []
        for a in placement:
            if a.host not in hosts:
                hosts.append(a.host)
        ranks = [_Rank(i, a) for i, a in enumerate(placement)]
        group = _Group(trial, attempt, token, ranks)
        self.groups[trial.trial_id] = group
        self.tokens[token] = group
        trial.status = TrialStatus.RUNNING
        trial.pending_decision = None
        self.journal.append({"event": "trial_start", "trial_id": trial.trial_id, "attempt": attempt,
                             "start_iteration": start_iteration, "workers": [a.address for a in placement],
                             "checkpoint": checkpoint.path if checkpoint else None})
        for cb in self.callbacks:
            cb.on_trial_start(self, trial)
        self.reporter.event(f"trial {trial.trial_id} started (attempt {attempt}) on {[a.address for a in placement]}")
        metric = self.metric
        for r in ranks:
            a = r.assignment
            same_host = [x for x in placement if x.host == a.host]
            spec = RankSpec(
                trial_id=trial.trial_id, trial_name=trial.name, experiment_name=self.experiment_name,
                trial_dir=trial.path, attempt=attempt, rank=r.index, world_size=self.world_size,
                local_rank=same_host.index(a), local_world_size=len(same_host), node_rank=hosts.index(a.host),
                tuner_addr=self.tuner_addr, token=token, config=trial.config, start_iteration=start_iteration,
                time_offset=time_offset, checkpoint_path=checkpoint.path if checkpoint else None,
                backend=self.sc.backend, gpu_ids=list(a.gpu_ids), host=a.host, metric=metric,
                heartbeat_s=max(0.1, min(5.0, self.hang_timeout_s / 10)), abort_grace_s=self.abort_grace_s,
                storage_fs=self.storage_fs,
                remote_trial_dir=self._remote_trial(trial) if self.remote_dir is not None else None,
            )
            if runner is not None:
                self._chain(runner, group, r, spec)
                continue
            key = f"tuneplat-{trial.trial_id}-a{attempt}-r{r.index}-{token.hex()[:6]}"
            r.future = self.cluster.client.submit(run_rank, self.trainable, spec, *self._trainable_deps, key=key,
                                                  workers=[a.address],
                                                  allow_other_workers=False, pure=False, retries=0)
            self.task_owner[r.future.key] = (group, r)
            r.future.add_done_callback(lambda fut: self._wake(("task_done", fut)))

    def _chain(self, runner: _Rank, group: _Group, rank: _Rank, spec: RankSpec) -> None:
        """Run ``group``'s single rank in the Dask task of ``runner`` (an idle runner of an ended trial).

        The rank takes over the runner's task, connection and slot; ("next", spec)
        counts as "hello" + "go" of a submitted rank, and the runner acknowledges it
        with ("started",) before user code runs (until then a lost worker is not the
        trial's failure: see ``_lost_before_start``).
        """
        runner.parked = False
        rank.future, runner.future = runner.future, None
        rank.conn, runner.conn = runner.conn, None
        rank.channel, runner.channel = runner.channel, None
        rank.pid, rank.hostname = runner.pid, runner.hostname
        rank.ever_connected = True
        rank.chained = True
        rank.started_ack = False
        rank.last_seen = time.monotonic()
        assert rank.channel is not None and rank.future is not None
        rank.channel.group, rank.channel.rank = group, rank
        self.task_owner[rank.future.key] = (group, rank)
        self._send(rank, ("next", spec))

    # ------------------------------------------------------------------ I/O
    def _wake(self, event: tuple[str, Any]) -> None:
        self._wake_events.append(event)
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.selector.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _drop_conn(self, conn: _Conn) -> None:
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            self._drop_conn(conn)
            if conn.rank is not None and conn.rank.parked:  # an idle runner left (its worker died, it timed out)
                self._unpark(conn.rank, bye=False)
                return
            if conn.rank is not None and conn.group is not None:
                conn.rank.conn = None
                conn.rank.channel = None
                if conn.rank.finished is None and conn.group.aborted and conn.group.failure is None:
                    conn.rank.finished = "aborted"  # we ended it (a lost peer before start, an interrupt)
                elif conn.rank.finished is None and not conn.rank.started_ack:
                    # a chained rank's runner went away before it acknowledged "next": no user code ran
                    self._lost_before_start(conn.group, conn.rank)
                    return
                elif conn.rank.finished is None:
                    conn.rank.finished = "dead"
                    g = conn.group
                    self._fail_group(g, f"rank {conn.rank.index} on {conn.rank.assignment.address} lost its "
                                        "connection (its process or Dask worker died)")
                    self._forget_rank(conn.rank)
                self._maybe_end_group(conn.group)
            return
        try:
            frames = conn.reader.feed(data)
        except ValueError:
            self._drop_conn(conn)
            return
        if conn.rank is not None:
            conn.rank.last_seen = time.monotonic()
        for frame in frames:
            if not conn.reader.authenticated:
                group = self.tokens.get(frame)
                if group is None or group.ended:
                    self._drop_conn(conn)  # unknown peer: unpickle nothing from it
                    return
                conn.reader.authenticated = True
                conn.group = group
                continue
            self._on_message(conn, pickle.loads(frame))

    def _send(self, rank: _Rank, msg: Any) -> None:
        if rank.conn is None:
            return
        try:
            send_msg(rank.conn, msg)
        except OSError:
            pass

    def _on_message(self, conn: _Conn, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "ping":  # (a chained runner's last ping of its previous trial may come after "done")
            return
        group = conn.group
        assert group is not None
        if kind == "hello":
            rank = group.ranks[msg[1]]
            rank.conn = conn.sock
            rank.channel = conn
            rank.pid, rank.hostname = msg[2], msg[3]
            rank.ever_connected = True
            rank.last_seen = time.monotonic()
            conn.rank = rank
            not_started = group.trial.status == TrialStatus.PENDING
            if self.stopping and not_started and not group.aborted:
                group.aborted = True
                group.trial.stop_reason = group.trial.stop_reason or "the experiment stopped before it started"
            if group.aborted:
                self._send(rank, ("abort", "the trial's group is being torn down"))
                if not_started:
                    rank.finished = "done"  # it runs no user code; its closing connection is expected
                return
            group.trial.status = TrialStatus.RUNNING
            self._send(rank, ("go",))
            if rank.index > 0 and group.rendezvous is not None:
                self._send(rank, group.rendezvous)
        elif kind == "rendezvous":
            group.rendezvous = msg
            for r in group.ranks[1:]:
                self._send(r, msg)
        elif kind == "report":
            _, iteration, result, staged = msg
            assert conn.rank is not None
            group.reports.setdefault(iteration, {})[conn.rank.index] = (result, staged)
            if len(group.reports[iteration]) == len(group.ranks):
                self._on_step(group, iteration, group.reports.pop(iteration))
        elif kind == "started":
            assert conn.rank is not None
            conn.rank.started_ack = True
        elif kind == "done":
            assert conn.rank is not None
            conn.rank.finished = "done"
            conn.rank.offers_next = len(msg) > 1 and bool(msg[1])
            self._maybe_end_group(group)
        elif kind == "error":
            assert conn.rank is not None
            conn.rank.finished = "error"
            conn.rank.offers_next = len(msg) > 3 and bool(msg[3])
            self._fail_group(group, f"rank {conn.rank.index}: {msg[1]}", msg[2])
            self._maybe_end_group(group)

    def _drain_wake_events(self) -> None:
        while self._wake_events:
            kind, payload = self._wake_events.popleft()
            if kind == "cluster_changed":
                self._refresh_ledger()
                continue
            if kind == "task_done":
                owner = self.task_owner.pop(payload.key, None)
                if owner is None:
                    continue
                group, rank = owner
                if rank.future is not payload:
                    continue  # (the task was handed on; its owner's record says so)
                if rank.parked:  # an idle runner's task ended: it takes no trial; its slot is free
                    rank.future = None
                    self._unpark(rank, bye=False)
                    continue
                rank.task_done = True
                fut, rank.future = rank.future, None
                if rank.finished is None and not rank.started_ack:
                    # a chained rank whose task ended before it acknowledged "next": no user code ran
                    self._lost_before_start(group, rank)
                    continue
                self._release(rank)
                if fut is not None and fut.status == "error" and rank.finished is None:
                    exc = fut.exception()
                    if rank.conn is None and not rank.ever_connected and type(exc).__name__ == "KilledWorker":
                        # Its worker died before this rank ran any user code: not the trial's failure; place
                        # it again.
                        self._lost_before_start(group, rank)
                        continue
                    rank.finished = "error"
                    tb = "".join(__import__("traceback").format_exception(exc)) if exc else None
                    self._fail_group(group, f"rank {rank.index} failed on its Dask worker: {type(exc).__name__}: {exc}", tb)
                elif rank.finished is None:
                    rank.finished = "dead" if fut is not None and fut.status == "cancelled" else "done"
                self._maybe_end_group(group)

    def _lost_before_start(self, group: _Group, rank: _Rank) -> None:
        """``rank``'s worker or runner went away before any of its user code ran: the trial is placed again
        (not a failure of the trial; see ``_maybe_end_group``)."""
        rank.finished = "lost"
        group.lost_before_start = True
        if rank.channel is not None:
            self._drop_conn(rank.channel)
        rank.conn = None
        rank.channel = None
        self._forget_rank(rank)
        self._abort_group(group, "a rank's worker was lost before the trial started")
        self._maybe_end_group(group)

    def _release(self, rank: _Rank) -> None:
        if rank.released:
            return
        rank.released = True
        self.ledger.release(rank.assignment)

    def _forget_rank(self, rank: _Rank) -> None:
        """A rank whose process died: its task will never report done; free its slot now."""
        if rank.future is not None and not rank.task_done:
            try:
                rank.future.cancel()
            except Exception:  # noqa: BLE001
                pass
        rank.task_done = True
        self._release(rank)
        self._refresh_ledger()

    def _refresh_ledger(self) -> None:
        """Re-read the cluster's workers; while it has fewer than before (a nanny restarting a
        worker, a node coming back), look again shortly."""
        before = set(self.ledger.slots)
        self.ledger.refresh(self.cluster.slots())
        self._last_refresh = time.monotonic()
        gone = before - set(self.ledger.slots)
        if gone:
            self._lose_unstarted_ranks_on(gone)
        self.max_slots = max(self.max_slots, len(self.ledger.slots))
        if len(self.ledger.slots) < self.max_slots:
            self._refresh_at = time.monotonic() + 0.25
        else:
            self._refresh_at = None

    # ------------------------------------------------------------------ results and decisions
    def _on_step(self, group: _Group, iteration: int, reports: dict[int, tuple[Any, bool]]) -> None:
        trial = group.trial
        result = reports[0][0]
        staged = any(s for _, s in reports.values())
        if group.failure or group.aborted:
            for r in group.ranks:
                self._send(r, ("abort", "the trial's group is being torn down"))
            return
        if staged:
            path = self._commit(trial, checkpoint_name(iteration))
            if path is not None:
                ckpt = Checkpoint(path, self.storage_fs)
                trial.checkpoints.append((ckpt, result))
                self.journal.append({"event": "checkpoint", "trial_id": trial.trial_id, "iteration": iteration,
                                     "path": path, "metrics": to_jsonable(result)})
                for cb in self.callbacks:
                    cb.on_checkpoint(self, trial, ckpt, result)
                self._apply_retention(trial)
        if trial.results and trial.results[-1].get("training_iteration", 0) >= iteration:
            moved = trial.supersede_after(iteration - 1)
            self.journal.append({"event": "superseded", "trial_id": trial.trial_id, "after_iteration": iteration - 1,
                                 "count": moved})
        trial.results.append(result)
        trial.time_total_s = float(result.get("time_total_s", 0.0))
        try:
            line = json.dumps(result)
        except (TypeError, ValueError):
            line = json.dumps(to_jsonable(result))
        self.journal.append_line(f'{{"event": "result", "trial_id": "{trial.trial_id}", "result": {line}}}')
        self._write_result(trial, line)
        problem = self._check_metric(trial, result)
        if problem:
            self._fail_group(group, problem)
            for r in group.ranks:
                self._send(r, ("abort", problem))
            return
        self.searcher.on_trial_result(trial.trial_id, result)
        for cb in self.callbacks:
            cb.on_trial_result(self, trial, result)
        decision, reason = self._decide(group, result)
        if decision is not Decision.CONTINUE:
            group.decision = decision
            trial.pending_decision = decision.value
            if decision is Decision.STOP:
                trial.stop_reason = trial.stop_reason or reason
            self.journal.append({"event": "decision", "trial_id": trial.trial_id, "iteration": iteration,
                                 "decision": decision.value, "reason": reason})
            self.reporter.event(f"trial {trial.trial_id}: {decision.value} at iteration {iteration} ({reason})")
        reply = ("decision", decision.value)
        for r in group.ranks:
            self._send(r, reply)

    def _remote_trial(self, trial: Trial) -> str:
        assert self.remote_dir is not None
        return rjoin(self.remote_dir, os.path.basename(trial.path))

    def _commit(self, trial: Trial, name: str) -> str | None:
        if self.remote_dir is not None:
            return remote_commit_checkpoint(self.storage_fs, self._remote_trial(trial), name)
        return commit_checkpoint(trial.path, name)

    def _apply_retention(self, trial: Trial) -> None:
        cc = self.rc.checkpoint_config
        assert cc is not None
        for pair in retain(trial.checkpoints, cc.num_to_keep, cc.checkpoint_score_attribute, cc.checkpoint_score_order):
            trial.checkpoints.remove(pair)
            if pair[0].filesystem is not None:
                try:
                    remote_delete_checkpoint(pair[0].filesystem, pair[0].path)
                except Exception as exc:  # noqa: BLE001 - a leftover folder costs space, not correctness
                    logger.warning("tuneplat: could not delete checkpoint %s: %s", pair[0].path, exc)
            else:
                shutil.rmtree(pair[0].path, ignore_errors=True)
            self.journal.append({"event": "checkpoint_deleted", "trial_id": trial.trial_id, "path": pair[0].path})

    def _check_metric(self, trial: Trial, result: Mapping[str, Any]) -> str | None:
        metrics = self.metric if isinstance(self.metric, list) else ([self.metric] if self.metric else [])
        if self._stop_keys:
            missing = [k for k in self._stop_keys if k not in result]
            if missing:  # Ray raises too: a misspelt stop key would otherwise never stop anything
                user_keys = sorted(k for k in result if k not in _AUTO_KEYS)
                return (f"RunConfig(stop=...) names {missing}, which trial {trial.trial_id} did not report (it "
                        f"reported {user_keys} and the automatic keys such as 'training_iteration'); fix the "
                        "spelling, or report that key in every report() call.")
        for m in metrics:
            if m not in result:
                user_keys = sorted(k for k in result if k not in _AUTO_KEYS)
                return (f"trial {trial.trial_id} reported {user_keys} without the metric {m!r} that "
                        f"TuneConfig(metric={self.metric!r}) expects; include {m!r} in every report() call "
                        "(or change TuneConfig.metric).")
            v = result[m]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return (f"trial {trial.trial_id} reported metric {m!r} = {v!r} ({type(v).__name__}); "
                        "it must be a number (int or float).")
            if not math.isfinite(v):
                logger.warning("tuneplat: trial %s reported non-finite %s=%r at iteration %s; schedulers count it "
                               "as the worst value", trial.trial_id, m, v, result.get("training_iteration"))
                self.journal.append({"event": "warning", "trial_id": trial.trial_id,
                                     "message": f"non-finite metric {m}={v!r}"})
        return None

    def _decide(self, group: _Group, result: Mapping[str, Any]) -> tuple[Decision, str]:
        trial = group.trial
        if group.stop_requested is not None:
            return group.stop_requested, trial.stop_reason or "stop requested"
        done = result.get("done")
        if isinstance(done, (bool, int)) and done:  # Ray: a result that says done ends the trial (classes too)
            return Decision.STOP, "the trial reported done=True"
        if self._stop_fn is not None and self._stop_fn(trial.trial_id, result):
            self._check_stop_all()
            return Decision.STOP, "stop criteria met"
        if self._check_stop_all():
            return Decision.STOP, trial.stop_reason or "stop_all()"
        decision = self.scheduler.on_trial_result(trial.trial_id, result)
        if decision is Decision.STOP:
            trial.stopped_by_scheduler = not self._reached_scheduler_budget(result)
            reason = getattr(self.scheduler, "stop_reason", lambda _t: None)(trial.trial_id)
            return decision, reason or f"stopped by {self.scheduler.name}"
        if decision is Decision.PAUSE:
            return decision, f"paused by {self.scheduler.name}"
        return decision, ""

    def _reached_scheduler_budget(self, result: Mapping[str, Any]) -> bool:
        """Whether ``result`` reached the scheduler's ``max_t`` (a STOP there ends a trial, it does not prune it)."""
        max_t = getattr(self.scheduler, "max_t", None)
        attr = getattr(self.scheduler, "time_attr", None)
        value = result.get(attr) if isinstance(attr, str) else None
        return (isinstance(max_t, (int, float)) and isinstance(value, (int, float))
                and not isinstance(value, bool) and value >= max_t)

    def _write_result(self, trial: Trial, line: str) -> None:
        f = self._result_files.get(trial.trial_id)
        if f is None:
            f = self._result_files[trial.trial_id] = open(os.path.join(trial.path, "result.json"), "a", encoding="utf-8")  # noqa: SIM115
        f.write(line + "\n")

    # ------------------------------------------------------------------ group end
    def _fail_group(self, group: _Group, message: str, tb: str | None = None) -> None:
        if group.failure is None:
            group.failure = (message, tb)
            self.journal.append({"event": "rank_failure", "trial_id": group.trial.trial_id,
                                 "attempt": group.attempt, "message": message})
        self._abort_group(group, "another rank of this trial failed")

    def _abort_group(self, group: _Group, reason: str) -> None:
        if group.aborted:
            return
        group.aborted = True
        for r in group.ranks:
            if r.finished is None and r.conn is not None:
                self._send(r, ("abort", reason))
                r.conn_shut = True
                try:
                    r.conn.shutdown(socket.SHUT_RDWR)  # a rank blocked in recv() wakes up at once
                except OSError:
                    pass

    def _maybe_end_group(self, group: _Group) -> None:
        if group.ended or not all(r.finished for r in group.ranks):
            return
        # A single-rank runner that offers to take more is parked (the loop hands it the next trial or
        # "bye"); other ranks that said "done"/"error" are leaving run_rank: their slots are free now.
        parked = False
        for r in group.ranks:
            if (r.offers_next and not r.conn_shut and r.conn is not None and r.channel is not None
                    and r.future is not None and len(group.ranks) == 1):
                self._park(r)  # its runner waits for the next trial (Ray's reuse_actors): see _launch_what_fits
                parked = True
            elif r.finished in ("done", "error", "aborted"):
                self._release(r)
        group.ended = True
        trial = group.trial
        self.groups.pop(trial.trial_id, None)
        if not parked and time.monotonic() - self._last_refresh > 1.0:
            self._refresh_ledger()  # workers may have left: look before placing more (a parked runner's is there)
        self.tokens.pop(group.token, None)
        self.searcher_blocked = False
        f = self._result_files.pop(trial.trial_id, None)
        if f is not None:
            f.close()
        if group.lost_before_start and group.failure is None and not self.stopping:
            trial.attempts -= 1
            trial.status = TrialStatus.PENDING
            self.journal.append({"event": "trial_requeued", "trial_id": trial.trial_id,
                                 "reason": "a worker was lost before the trial started"})
            self.queue.appendleft(trial)
        elif group.failure is not None and not self.interrupted and group.decision is None:
            self._on_group_failure(group)
        elif group.failure is not None and self.interrupted:
            trial.status = TrialStatus.PENDING
        elif group.decision is Decision.PAUSE:
            trial.status = TrialStatus.PAUSED
            self.journal.append({"event": "trial_paused", "trial_id": trial.trial_id, "iteration": trial.iteration})
        elif self.interrupted and group.decision is None:
            trial.status = TrialStatus.PENDING  # restorable
        else:
            self._end_trial(trial, TrialStatus.TERMINATED)
        self._ready_actions.extend(self._deferred_actions.pop(trial.trial_id, []))
        self._drain_actions()

    def _on_group_failure(self, group: _Group) -> None:
        trial = group.trial
        message, tb = group.failure or ("unknown failure", None)
        trial.num_failures += 1
        max_failures = self.rc.failure_config.max_failures  # type: ignore[union-attr]
        retry = not self.stopping and (max_failures == -1 or trial.num_failures <= max_failures)
        self.journal.append({"event": "trial_failure", "trial_id": trial.trial_id, "attempt": group.attempt,
                             "message": message, "traceback": tb, "retry": retry})
        for cb in self.callbacks:
            cb.on_trial_failure(self, trial, message, retry)
        if retry:
            self.reporter.event(f"trial {trial.trial_id} failed ({message}); retrying from its latest checkpoint")
            trial.status = TrialStatus.PENDING
            self.queue.append(trial)
            return
        trial.error, trial.error_traceback = message, tb
        self._end_trial(trial, TrialStatus.ERROR)
        fail_fast = self.rc.failure_config.fail_fast  # type: ignore[union-attr]
        if fail_fast:
            self.fail_fast_error = f"trial {trial.trial_id} failed: {message}"
            self.reporter.say(f"tuneplat: fail_fast: {self.fail_fast_error}; ending the experiment")
            self.stopping = True
            self.interrupted = True  # leave the others restorable
            self._teardown_all("fail_fast: another trial failed")

    def _end_trial(self, trial: Trial, status: TrialStatus) -> None:
        trial.status = status
        self.journal.append({"event": "trial_end", "trial_id": trial.trial_id, "status": status.value,
                             "error": trial.error, "traceback": trial.error_traceback,
                             "stop_reason": trial.stop_reason, "iteration": trial.iteration})
        if status is TrialStatus.ERROR:
            self.scheduler.on_trial_error(trial.trial_id)
            self.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None, error=True)
            self.reporter.event(f"trial {trial.trial_id} ERROR: {trial.error}")
        else:
            self.scheduler.on_trial_complete(trial.trial_id, trial.last_result or None)
            info = {"pruned": True} if trial.stopped_by_scheduler else {}
            self.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None, error=False, **info)
        for cb in self.callbacks:
            cb.on_trial_complete(self, trial)

    def _teardown_all(self, reason: str) -> None:
        """End every running group (Ctrl-C, SIGTERM, fail_fast) and wait for their tasks."""
        self.stopping = True
        self._dismiss_idle()
        for g in list(self.groups.values()):
            self._abort_group(g, reason)
            for r in g.ranks:
                if r.conn is None and not r.task_done and r.future is not None:
                    try:
                        r.future.cancel()
                    except Exception:  # noqa: BLE001
                        pass
        deadline = time.monotonic() + 30
        while self.groups and time.monotonic() < deadline:
            for key, _ in self.selector.select(max(0.0, deadline - time.monotonic())):
                if key.data == "wake":
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                elif key.data == "accept":
                    self._accept()
                else:
                    self._read(key.data)
            self._drain_wake_events()
        for g in list(self.groups.values()):
            g.trial.status = TrialStatus.PENDING
            self.groups.pop(g.trial.trial_id, None)
        self._dismiss_idle()

    # ------------------------------------------------------------------ scheduler actions
    def _drain_actions(self) -> None:
        actions = self.scheduler.pop_actions()
        if self._ready_actions:
            actions, self._ready_actions = self._ready_actions + actions, []
        for action in actions:
            trial = self.by_id.get(action.trial_id)
            if trial is None:
                logger.warning("tuneplat: scheduler asked for unknown trial %s", action.trial_id)
                continue
            group = self.groups.get(trial.trial_id)
            if group is not None and not group.ended and group.decision is Decision.PAUSE:
                # PAUSE was answered but the group is still leaving its workers (PBT queues
                # Launch in the same call as PAUSE; HyperBand may queue Resume/Stop before the
                # paused group ended). Its checkpoint of the paused iteration is committed
                # already, so a Launch clones the source's checkpoint now (the one the
                # scheduler judged); the requeue waits until the trial is PAUSED.
                if isinstance(action, Launch):
                    self._exploit(trial, action)
                    action = Resume(trial.trial_id)
                self._deferred_actions.setdefault(trial.trial_id, []).append(action)
                continue
            if isinstance(action, Stop):
                if trial.status in (TrialStatus.PAUSED, TrialStatus.PENDING):
                    if trial in self.queue:
                        self.queue.remove(trial)
                    trial.stop_reason = action.reason or f"stopped by {self.scheduler.name}"
                    trial.stopped_by_scheduler = True
                    self._end_trial(trial, TrialStatus.TERMINATED)
                elif trial.trial_id in self.groups:
                    self.groups[trial.trial_id].stop_requested = Decision.STOP
            elif isinstance(action, Resume):
                if trial.status == TrialStatus.PAUSED:
                    trial.status = TrialStatus.PENDING
                    self.journal.append({"event": "trial_resume", "trial_id": trial.trial_id})
                    self.queue.appendleft(trial)
            elif isinstance(action, Launch):
                if trial.status != TrialStatus.PAUSED:
                    logger.warning("tuneplat: scheduler asked to relaunch trial %s which is %s", trial.trial_id,
                                   trial.status)
                    continue
                self._exploit(trial, action)
                trial.status = TrialStatus.PENDING
                self.queue.appendleft(trial)

    def _exploit(self, trial: Trial, action: Launch) -> None:
        """PBT's exploit: ``trial`` takes ``action.config`` and a copy of the source's latest checkpoint.

        The copy becomes ``trial``'s own latest checkpoint (at ``trial``'s
        iteration, so its training_iteration count goes on), and the event is
        recorded in the journal and ``trial.lineage``.
        """
        old = trial.config
        trial.config = dict(action.config)
        from_iteration = None
        if action.from_trial and action.from_trial != trial.trial_id:
            src = self.by_id.get(action.from_trial)
            if src is not None and src.checkpoint is not None:
                # copy, so the source may delete its own checkpoints meanwhile
                from_iteration = src.checkpoint_iteration()
                name = checkpoint_name(trial.iteration)
                if self.remote_dir is not None:
                    path = remote_copy_checkpoint(self.storage_fs, src.checkpoint.path, self._remote_trial(trial), name)
                else:
                    stage_checkpoint(src.checkpoint.path, trial.path, name)
                    path = commit_checkpoint(trial.path, name)
                assert path is not None
                metrics = dict(trial.last_result)
                # the copy replaced the trial's own checkpoint of this iteration, if any
                clone = Checkpoint(path, self.storage_fs)
                trial.checkpoints = [p for p in trial.checkpoints if p[0] != clone]
                trial.checkpoints.append((clone, metrics))
                self.journal.append({"event": "checkpoint", "trial_id": trial.trial_id,
                                     "iteration": trial.iteration, "path": path,
                                     "metrics": to_jsonable(metrics), "cloned_from": src.trial_id,
                                     "cloned_iteration": from_iteration})
            else:
                logger.warning("tuneplat: trial %s exploits trial %s, which has no checkpoint; it restarts with the "
                               "new config from its own latest checkpoint (report checkpoints for PBT to clone)",
                               trial.trial_id, action.from_trial)
        event = {"event": "exploit", "trial_id": trial.trial_id, "from_trial": action.from_trial,
                 "iteration": trial.iteration, "from_iteration": from_iteration, "old_config": to_jsonable(old),
                 "new_config": to_jsonable(trial.config), "config_pickle": _pickle_hex(trial.config),
                 "info": to_jsonable(dict(action.info))}
        trial.lineage.append({k: v for k, v in event.items() if k not in ("event", "config_pickle")})
        self.journal.append(event)
        for cb in self.callbacks:
            cb.on_trial_exploit(self, trial, event)


_AUTO_KEYS = frozenset({"training_iteration", "time_this_iter_s", "time_total_s", "timestamp",
                        "iterations_since_restore", "trial_id", "pid", "hostname"})


def _pickle_hex(obj: Any) -> str | None:
    try:
        import cloudpickle

        return cloudpickle.dumps(obj).hex()
    except Exception:  # noqa: BLE001 - only needed to restore exotic configs
        return None


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
