"""Connecting to Dask, or starting an embedded LocalCluster, and gang placement of ranks."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from .._init import local_cpus, requested
from .._mainguard import embedded_workers
from .._settings import env_seconds, env_str
from ._channel import TunerUnreachable
from ._errors import PlacementError
from ._local_procs import (
    embedded_cluster_class,
    end_processes,
    lean_worker_config,
    local_gpu_count,
    quiet_distributed,
    spawned_workers,
    tracked_nanny_class,
)
from ._placement import Assignment, Ledger, Slot
from ._runner import channel_client_context, connect_timeout_s
from ._security import local_tls, make_security, temporary_security

__all__ = ["Assignment", "Cluster", "Ledger", "PlacementError", "Slot", "make_security"]

logger = logging.getLogger("tuneplat")


_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


_PRELOAD = "tuneplat.execution._worker_preload"

#: imports slow enough to name while the workers start (seconds each on a small machine)
HEAVY_IMPORTS = frozenset({"torch", "transformers", "lightning", "pytorch_lightning", "tensorflow", "jax", "sklearn",
                            "xgboost", "lightgbm"})


def trainable_imports(*objects: Any) -> list[str]:
    """The modules a trainable will import in a worker: its own module and the modules its code refers to.

    Only modules already imported in this process are named (so they exist here). ``__main__`` is never
    named: the embedded cluster's workers do not run the user's script.
    """
    import sys
    import types

    found: list[str] = []

    def add(name: Any) -> None:
        if isinstance(name, str) and name and name != "__main__" and not name.startswith("__main__."):
            top = name if name in sys.modules else None
            if top and top not in found:
                found.append(top)

    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > 2 or id(obj) in seen:
            return
        seen.add(id(obj))
        fn = getattr(obj, "__func__", obj)
        for attr in ("func", "fn", "_fn", "train_loop_per_worker", "trainable", "_trainable", "__wrapped__"):
            inner = getattr(obj, attr, None)
            if inner is not None and inner is not obj and callable(inner):
                visit(inner, depth + 1)
        add(getattr(fn, "__module__", None))
        code = getattr(fn, "__code__", None)
        globs = getattr(fn, "__globals__", None)
        if code is None or not isinstance(globs, dict):
            return
        for name in code.co_names:
            value = globs.get(name)
            if name in HEAVY_IMPORTS:  # `import torch` inside the function
                add(name)
            if isinstance(value, types.ModuleType):
                add(value.__name__)
            elif value is not None and not isinstance(value, (int, float, str, bytes, bool)):
                add(getattr(value, "__module__", None))

    for obj in objects:
        if obj is not None:
            visit(obj, 0)
    return found


def scheduler_workers(client: Any) -> dict[str, dict[str, Any]]:
    """Every worker the scheduler of ``client`` knows now, by address, with its info (resources, nthreads, host, nanny).

    Not ``Client.scheduler_info(n_workers=-1)``: that refreshes the client's
    cached identity and then returns the cache, which the client's periodic
    refresh (every ``distributed.client.scheduler-info-interval``, on its event
    loop) may overwrite in between with an identity that lists no workers
    (distributed 2025+ fetches only the totals there). On this machine 72 of
    2,000 calls saw an empty cluster with that refresh every 5 ms. The tuner read
    that as every worker gone: it forgot which workers ran ranks and failed a
    trial with "the cluster has no workers". The identity fetched here is
    returned as it came, never through the shared cache.
    """
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1)
    except TypeError:  # distributed before identity(n_workers=...) (2024.x): it always lists every worker
        info = client.sync(client.scheduler.identity)
    return dict(info.get("workers") or {})


class Cluster:
    """The Dask cluster trials run on: given, found, or started here.

    Order (Dask's convention): an explicit ``client``; else ``address``; else
    the process's active ``distributed.Client``; else an embedded
    ``LocalCluster`` (one single-threaded worker process per core, or per
    ``cpus_per_rank`` cores when a rank needs more than one; all listeners on
    127.0.0.1; TLS with temporary certificates unless ``TUNEPLAT_LOCAL_TLS=0``,
    so that no other local user can connect to its scheduler or workers),
    which :meth:`close` shuts down. Clusters that were given are left running.

    The embedded cluster's workers start in parallel; with ``wait=False`` the
    constructor returns once its scheduler is up, and the workers join as they
    come up (:attr:`workers_ready`, :meth:`pending_slots`, :attr:`on_change`):
    the tuner starts a trial as soon as one worker can run it. With
    ``wait=True`` (the default) it returns once they are all up, as
    ``LocalCluster(n_workers=...)`` does, and raises if one cannot start.
    """

    def __init__(self, client: Any = None, address: str | None = None, cpus_per_rank: float = 1.0,
                 say: Callable[[str], None] | None = None, imports: Sequence[str] = (),
                 security: Any = None, wait: bool = True) -> None:
        import dask
        from distributed import Client

        security = make_security(security)
        self.local_cluster = None
        self.owns_client = False
        self.local_gpus = 0
        #: the embedded cluster's worker processes (0: not ours), and how its start went
        self.expected_workers = 0
        self._per_cpu = 1.0
        self._start: Any = None  # concurrent.futures.Future of the workers' start
        self._started_at = 0.0
        #: called (from Dask's event loop thread) when a worker joins the embedded cluster or its start ends
        self.on_change: Callable[[], None] | None = None
        asked = requested()  # tuneplat.init(num_cpus=, num_gpus=, address=)
        address = address if address is not None or client is not None else asked.address
        if client is None and address is None:
            try:
                from distributed import get_client

                client = get_client()
            except ValueError:
                client = None
        if client is not None:
            self.client = client
        elif address is not None:
            if address.startswith("tls://") and security is None and not dask.config.get("distributed.comm.tls.ca-file",
                                                                                          None):
                raise ValueError(f"RunConfig(address={address!r}) is a TLS scheduler but no certificates were given: "
                                 "pass RunConfig(security=distributed.security.Security(tls_ca_file=..., "
                                 "tls_client_cert=..., tls_client_key=..., require_encryption=True)) (CLI: "
                                 "--tls-ca-file, --tls-cert, --tls-key), or set Dask's distributed.comm.tls config")
            self.client = Client(address, set_as_default=False, security=security)
            self.owns_client = True
        else:
            cores = local_cpus() or max(os.cpu_count() or 1, 1)
            # a rank needing k whole CPUs gets a worker process of k CPUs (cores // k of them), as Ray would
            # pack trials; a need beyond this machine is left to PlacementError to explain
            per = int(cpus_per_rank) if float(cpus_per_rank).is_integer() and 1 < cpus_per_rank <= cores else 1
            self.local_gpus = local_gpu_count() if asked.num_gpus is None else asked.num_gpus
            if security is None and local_tls():
                security = temporary_security()  # in memory; every process of the cluster gets it from us
            # its workers never run the user's __main__ script (Ray's workers don't): see tuneplat/_mainguard.py
            self._no_main = contextlib.ExitStack()  # (a failed start leaves it held: harmless)
            self._no_main.enter_context(embedded_workers())
            # for the cluster's whole life, not only its start: a nanny reads this each time it (re)starts a worker
            # process (after a crash), and a daemonic worker cannot start DataLoader worker processes
            self._no_main.enter_context(dask.config.set({"distributed.worker.daemon": False}))
            n_workers = cores // per
            heavy = [m for m in imports if m.split(".")[0] in HEAVY_IMPORTS]
            if say is not None:
                say(f"tuneplat: starting {n_workers} worker process{'es' if n_workers != 1 else ''}"
                    + (f" (importing {', '.join(sorted({m.split('.')[0] for m in heavy}))})" if heavy else "")
                    + "…")
            # the preload makes worker processes ignore Ctrl-C (the tuner ends trials and closes the cluster), and
            # imports what the trainable needs in the background while the cluster and the tuner get ready. Given
            # to the workers explicitly (after the user's own Dask preloads): they are made after this block
            preload = [p for p in (dask.config.get("distributed.worker.preload", None) or [])
                       if p != _PRELOAD] + [_PRELOAD]
            worker_env: dict[str, str] = {}
            if imports:
                from ._worker_preload import IMPORTS_ENV

                worker_env[IMPORTS_ENV] = ",".join(imports)
            from distributed.worker_memory import parse_memory_limit

            with dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": 0}):
                # the scheduler now, the workers asked for and not waited for (see _start_workers): a trial
                # starts as soon as one worker can run it, the others join as they come up
                # (a LocalCluster that brings back a worker whose restart outlasts Dask's lost-worker-timeout)
                self.local_cluster = embedded_cluster_class()(
                    n_workers=0, threads_per_worker=1, processes=True, host="127.0.0.1",
                    worker_class=tracked_nanny_class(),
                    dashboard_address="127.0.0.1:0", resources={"CPU": per}, silence_logs=logging.ERROR,
                    security=security, preload=preload, env=worker_env, config=lean_worker_config(),
                    # (what LocalCluster(n_workers=n) gives each worker: the machine's memory split n ways)
                    memory_limit=parse_memory_limit("auto", 1, n_workers, logger=logger),
                )
            self.expected_workers = n_workers
            self._per_cpu = float(per)
            self._start_workers(n_workers)
            # by its address: a Client given the cluster object would wait for every worker (it awaits the cluster)
            self.client = Client(self.local_cluster.scheduler_address, set_as_default=False, security=security)
            self.owns_client = True
            if wait:
                try:
                    self._await_start()
                except BaseException:
                    self.close()
                    raise

    def _start_workers(self, n: int) -> None:
        """Ask the embedded cluster for its ``n`` workers, in parallel, without waiting for them.

        What ``LocalCluster.scale(n)`` does (the spec of ``n`` workers, then
        ``_correct_state`` on the cluster's event loop), except that the start
        is a future here: a worker that cannot start is an error the tuner can
        report (``scale()`` would only log it). A scheduler plugin says when each
        worker joins, so that placement looks again at once.
        """
        import concurrent.futures

        from distributed.diagnostics.plugin import SchedulerPlugin

        cluster = self.local_cluster
        assert cluster is not None
        changed = self._changed

        class _Joined(SchedulerPlugin):
            def add_worker(self, scheduler: Any, worker: str) -> None:
                changed()

        cluster.scheduler.add_plugin(_Joined(), name="tuneplat-worker-joined")
        for _ in range(n):
            cluster.worker_spec.update(cluster.new_worker_spec())

        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def start() -> None:
            try:
                await cluster._correct_state()
            except BaseException as exc:  # noqa: BLE001 - the tuner reports it (start_error)
                done.set_exception(exc)
            else:
                done.set_result(None)

        self._started_at = time.monotonic()
        self._start = done
        done.add_done_callback(lambda _f: changed())
        assert cluster.loop is not None
        cluster.loop.add_callback(start)

    def _await_start(self) -> None:
        """Until every worker of the embedded cluster is up; raises why one could not start."""
        if self._start is not None:
            self._start.result()

    def _changed(self) -> None:
        callback = self.on_change
        if callback is not None:
            callback()

    @property
    def workers_ready(self) -> tuple[int, int] | None:
        """``(workers up, workers asked for)`` while the embedded cluster's workers are still starting, else None."""
        if self._start is None or self._start.done():
            return None
        cluster = self.local_cluster
        ready = len(getattr(getattr(cluster, "scheduler", None), "workers", {}) or {})
        return (ready, self.expected_workers) if ready < self.expected_workers else None

    @property
    def start_seconds(self) -> float:
        """Seconds since the embedded cluster's workers were asked for."""

        return time.monotonic() - self._started_at if self._started_at else 0.0

    def start_error(self) -> BaseException | None:
        """Why the embedded cluster's workers did not all start (None: they did, or are still starting)."""
        if self._start is None or not self._start.done() or self._start.cancelled():
            return None
        return self._start.exception()  # type: ignore[no-any-return]

    def planned_capacity(self) -> dict[str, float]:
        """The embedded cluster's CPUs and GPUs once all its workers are up (empty for a cluster not ours)."""
        if not self.expected_workers:
            return {}
        return {"CPU": self.expected_workers * self._per_cpu, "GPU": float(self.local_gpus)}

    def pending_slots(self) -> list[Slot]:
        """The embedded cluster's workers asked for and not up yet, as the slots they will be.

        Only for deciding whether a trial can *ever* fit: a request that needs
        more workers than have joined so far waits for them instead of being
        refused. Every worker of the embedded cluster is alike (127.0.0.1, the
        same CPUs, this machine's GPUs), so its slots are known in advance.
        """
        starting = self.workers_ready
        if starting is None:
            return []
        ready, expected = starting
        gpus = [1.0] * self.local_gpus
        pool = "host:127.0.0.1" if self.local_gpus else None
        return [Slot(f"(worker {i + 1} of {expected}, starting)", "127.0.0.1", self._per_cpu, {}, pool, list(gpus))
                for i in range(ready, expected)]

    def wait_for_workers(self) -> None:
        """Wait (bounded) until the cluster has the workers it is meant to have.

        A LocalCluster (ours or the user's) says how many workers it runs: a
        worker being restarted by its nanny is waited for, so that a trial is
        not refused as impossible while the cluster is only catching up. Other
        clusters (and adaptive ones, which start at zero) are waited for by
        :meth:`wait_to_fit`, which also asks for the workers a trial needs.
        """
        if self.local_cluster is not None:
            return  # ours: trials start as its workers come up (see _start_workers)
        spec = getattr(getattr(self.client, "cluster", None), "worker_spec", None)
        if not spec:
            return
        expected = len(spec)
        timeout = env_seconds("TUNEPLAT_WORKER_WAIT_S", 60)
        try:
            self.client.wait_for_workers(expected, timeout=timeout)
        except TimeoutError:
            logger.warning("tuneplat: the cluster has fewer than %d worker(s) after %.0fs; going on with what is there",
                           expected, timeout)

    @property
    def may_grow(self) -> bool:
        """Whether workers may still join: not for the embedded cluster, nor for a fixed-size cluster object whose
        workers are all up; yes for an adaptive one, and for a scheduler known only by its address."""
        if self.local_cluster is not None:
            return False
        cluster = getattr(self.client, "cluster", None)
        if cluster is None:
            return True
        if getattr(cluster, "_adaptive", None) is not None:
            return True
        spec = getattr(cluster, "worker_spec", None)
        if spec is None:
            return True
        return len(spec) > len(scheduler_workers(self.client))

    def wait_to_fit(self, fits: Callable[[], bool], request: Mapping[str, float], n: int, say: Any,
                    timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until ``fits()``: workers still joining, an adaptive cluster at zero.

        Meanwhile one short task per rank, asking for the rank's resources, is
        kept queued, so that Dask's adaptive scaling (``cluster.adapt(minimum=0,
        ...)``, dask-jobqueue, dask-kubernetes) sees the demand and starts
        workers. Returns whether the group fits now.
        """

        need = ", ".join(f"{k}={v:g}" for k, v in request.items())
        if say is not None:
            say(f"tuneplat: waiting up to {timeout:.0f}s for {n} worker(s) with {{{need}}} to join the cluster "
                "(TUNEPLAT_WORKER_WAIT_S sets this limit)")
        deadline = time.monotonic() + timeout
        resources = {k: v for k, v in request.items() if v > 0}
        futures: list[Any] = []
        try:
            while not fits():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                futures = [f for f in futures if not f.done()]
                while len(futures) < n:  # demand an adaptive cluster can see (the tasks only wait briefly)
                    futures.append(self.client.submit(_demand, 0.5, resources=resources or None, pure=False,
                                                      key=f"tuneplat-demand-{len(futures)}-{time.monotonic_ns()}"))
                try:
                    futures[0].result(timeout=min(0.5, left))  # (a demand task ends in 0.5 s once it runs)
                except Exception:  # noqa: BLE001 - a timeout, a worker that left: look again
                    pass
        finally:
            for f in futures:
                f.cancel()
        return True

    @property
    def dashboard_link(self) -> str | None:
        try:
            return self.client.dashboard_link
        except Exception:  # noqa: BLE001 - cosmetic
            return None

    def workers(self) -> dict[str, dict[str, Any]]:
        return scheduler_workers(self.client)

    def slots(self) -> list[Slot]:
        slots = []
        for addr, info in sorted(self.workers().items()):
            resources = dict(info.get("resources") or {})
            cpu = float(resources.pop("CPU", info.get("nthreads", 1)))
            gpu = resources.pop("GPU", None)
            host = info.get("host") or urlparse(addr).hostname or addr
            if gpu is not None:
                pool = f"worker:{addr}"
                gpus = [1.0] * int(max(1, round(gpu))) if gpu >= 1 else [float(gpu)]
            elif self.local_cluster is not None and self.local_gpus:
                pool, gpus = f"host:{host}", [1.0] * self.local_gpus
            else:
                pool, gpus = None, []
            slots.append(Slot(addr, host, cpu, {k: float(v) for k, v in resources.items()}, pool, gpus,
                              info.get("pid"), info.get("nanny") or None, info.get("local_directory") or None))
        return slots

    @property
    def tls(self) -> bool:
        """The cluster's scheduler speaks TLS: so does the tuner's result port."""
        return str(self.client.scheduler.address).startswith("tls://")

    def channel_server_context(self) -> Any:
        """The TLS context the tuner's result port serves with (the client's certificates), or None."""
        if not self.tls:
            return None
        ctx = self.client.security.get_listen_args("client").get("ssl_context")
        if ctx is None:
            raise ValueError("the Dask scheduler is tls:// but this client has no TLS certificate of its own to serve "
                             "the tuner's result port with: give the client's Security tls_client_cert and "
                             "tls_client_key (RunConfig(security=...), CLI --tls-cert/--tls-key)")
        ctx.num_tickets = 0  # ranks never resume sessions: no tickets to send
        return ctx

    def tuner_host(self, explicit: str | None = None) -> str:
        """The address ranks use to reach the tuner.

        ``explicit`` (``RunConfig(tuner_host=...)``), else ``TUNEPLAT_TUNER_HOST``;
        loopback when every worker is on this machine; else the local address
        that routes to the scheduler, or, when that is loopback (the scheduler
        reached through a port-forward or an SSH tunnel), the one that routes to
        the workers. No such address: a ValueError that says what to set.
        """
        chosen = explicit or env_str("TUNEPLAT_TUNER_HOST")
        if chosen:
            return chosen
        hosts = {s.host for s in self.slots()}
        if hosts <= _LOOPBACK:
            return "127.0.0.1"
        sched = urlparse(self.client.scheduler.address)
        targets = [(sched.hostname or "127.0.0.1", sched.port or 8786)]
        targets += [(h, 9) for h in sorted(hosts - _LOOPBACK)]  # a port-forwarded scheduler: route to the workers
        for target in targets:
            addr = _source_address(target)
            if addr is not None and addr not in _LOOPBACK:
                return addr
        raise ValueError(
            f"the Dask workers run on {sorted(hosts)} but this machine has no address they can reach it at (the "
            f"scheduler {self.client.scheduler.address} is reached through a port-forward or tunnel, and no route "
            "leads to the workers). Give the tuner an address the workers can connect to: "
            "RunConfig(tuner_host=...) or TUNEPLAT_TUNER_HOST, and open its port (RunConfig(tuner_port=...))")

    def check_reachable(self, address: tuple[str, int], ledger: Ledger,
                        serving: Callable[[Callable[[], Any]], Any] = lambda fn: fn()) -> None:
        """Once, before any trial: can every worker host open the tuner's result port?

        Skipped when every worker is on this machine. Workers on hosts that
        cannot connect are quarantined (no trial is placed there); when none
        can, :class:`~tuneplat.execution._channel.TunerUnreachable` is raised
        naming the address, the hosts and what to set. ``serving(fn)`` calls
        ``fn`` while the tuner's port answers (a TLS handshake needs the tuner).
        """

        slots = list(ledger.slots.values())
        if not slots or {s.host for s in slots} <= _LOOPBACK:
            return
        tls = self.tls
        try:
            answers = serving(lambda: self.client.run(_probe_tuner, tuple(address), tls, on_error="return"))
        except Exception as exc:  # noqa: BLE001 - the probe is advice; trials still report their own failures
            logger.warning("tuneplat: could not check that the workers reach the tuner at %s:%d: %s", *address, exc)
            return
        bad: dict[str, str] = {}
        for addr, answer in answers.items():
            if isinstance(answer, BaseException):
                answer = f"{type(answer).__name__}: {answer}"
            if answer:
                bad[addr] = str(answer)
                ledger.quarantine(addr)
        if not bad:
            return
        hosts = sorted({(ledger.slots[a].host if a in ledger.slots else a) for a in bad})
        example = next(iter(bad.values()))
        if len(bad) >= len(answers):
            raise TunerUnreachable(f"no Dask worker can reach the tuner's result port at {address[0]}:{address[1]} "
                                   f"(hosts {hosts}): {example}. Open that port to the workers in the firewall (fix "
                                   "it with RunConfig(tuner_port=...) or TUNEPLAT_TUNER_PORT, a port or a range "
                                   "'8790-8799'), or give an address of this machine that the workers can reach: "
                                   "RunConfig(tuner_host=...) or TUNEPLAT_TUNER_HOST")
        logger.warning("tuneplat: the workers on %s cannot reach the tuner at %s:%d; no trial is placed there (%s)",
                       hosts, address[0], address[1], example)

    def close(self) -> None:
        procs = self._embedded_processes()
        address = self.local_cluster.scheduler_address if self.local_cluster is not None else None
        try:
            self._close()
        finally:
            # and every worker process its nannies spawned (one restarted while the cluster closed is not in the
            # snapshot above): they would outlive fit(). Only this cluster's: another cluster in this process (a
            # user's LocalCluster) keeps its workers, restarted ones too.
            if address is not None:
                end_processes(procs + spawned_workers(address))

    def _embedded_processes(self) -> list[Any]:
        """The embedded cluster's worker processes and everything they started (DataLoader workers, ...)."""
        if self.local_cluster is None:
            return []
        import psutil  # a dependency of distributed

        pids: set[int] = set()
        for nanny in list(getattr(self.local_cluster, "workers", {}).values()):
            pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
            if pid:
                pids.add(pid)
        # workers that joined while others still start are not in `workers` yet: the scheduler knows them
        try:
            known = list((getattr(getattr(self.local_cluster, "scheduler", None), "workers", None) or {}).values())
        except RuntimeError:  # (changed meanwhile, on the cluster's event loop)
            known = []
        pids.update(ws.pid for ws in known if getattr(ws, "pid", None))
        procs: list[Any] = []
        for pid in sorted(pids):
            try:
                proc = psutil.Process(pid)
                procs += [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
        return procs

    def _close(self) -> None:
        with quiet_distributed(self.local_cluster is not None):
            if self.local_cluster is not None:
                self.local_cluster.keep_workers = False  # they leave for good now: none is started again
                # Workers first, so none heartbeats into a closing scheduler (a noisy traceback otherwise).
                try:
                    self.client.retire_workers(close_workers=True)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            if self.owns_client:
                self.client.close()
            if self.local_cluster is not None:
                self.local_cluster.close()
                self._no_main.close()

def _demand(seconds: float) -> None:
    """A placeholder task standing for a rank that waits to be placed (see :meth:`Cluster.wait_to_fit`)."""

    time.sleep(seconds)


def _source_address(target: tuple[str, int]) -> str | None:
    """The local address the kernel would send from to reach ``target`` (nothing is sent)."""
    try:
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(target)
            return str(s.getsockname()[0])
    except OSError:
        return None


def _probe_tuner(address: tuple[str, int], tls: bool, dask_worker: Any = None) -> str | None:
    """Runs on each worker: None when a TCP (and TLS) connection to the tuner opens, else why not."""
    import ssl


    where = f"{address[0]}:{address[1]}"
    host = socket.gethostname()
    try:
        raw = socket.create_connection(address, timeout=min(connect_timeout_s(), 5.0))
    except OSError as exc:
        return f"{host} cannot connect to the tuner at {where}: {type(exc).__name__}: {exc}"
    try:
        ctx = channel_client_context(tls, dask_worker)
        if ctx is not None:
            raw = ctx.wrap_socket(raw)
    except (ssl.SSLError, OSError, RuntimeError) as exc:
        return f"{host}: TLS to the tuner at {where} failed: {exc}"
    finally:
        raw.close()
    return None


