"""``tuneplat.init()`` / ``tuneplat.shutdown()``: Ray's ``ray.init(num_cpus=..., num_gpus=...)`` for the embedded cluster.

tuneplat starts its Dask cluster when ``fit()`` needs one; ``init`` only says
how big it is (``num_cpus`` worker slots, ``num_gpus`` GPUs) or where a running
Dask cluster is (``address``), for every ``fit()`` until :func:`shutdown`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

__all__ = ["init", "is_initialized", "local_cpus", "requested", "shutdown"]

logger = logging.getLogger("tuneplat")

#: ``ray.init`` arguments that have no meaning for a Dask cluster: accepted, not used
_IGNORED = frozenset({
    "include_dashboard", "dashboard_host", "dashboard_port", "log_to_driver", "logging_level", "logging_format",
    "configure_logging", "local_mode", "namespace", "runtime_env", "object_store_memory", "_temp_dir", "_system_config",
    "job_config", "resources", "labels", "storage", "_memory", "_plasma_directory", "_node_ip_address",
    "_redis_password", "_metrics_export_port",
})


@dataclass
class Requested:
    """What :func:`init` asked for (None: the default)."""

    num_cpus: int | None = None
    num_gpus: int | None = None
    address: str | None = None
    initialized: bool = False


_requested = Requested()


def requested() -> Requested:
    """The sizes and address given to :func:`init` (defaults when it was not called)."""
    return _requested


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not float(value).is_integer():
        raise ValueError(f"The value of `{name}` is {value!r}, but must be a whole number >= 0 (or None for "
                         "what this machine has).")
    return int(value)


def init(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None,
         ignore_reinit_error: bool = False, **ray_kwargs: Any) -> dict[str, Any]:
    """Size the embedded Dask cluster that ``fit()`` starts (``ray.init``).

    Args:
        address: a running Dask scheduler (``"tcp://host:8786"``) to run every
            later ``fit()`` on, as ``RunConfig(address=...)`` would. Ray's
            ``"auto"`` attaches to the scheduler ``DASK_SCHEDULER_ADDRESS`` (or
            Dask's ``scheduler-address`` config) names, and otherwise says that
            ``fit()`` starts a local cluster; ``"local"`` means the embedded cluster.
        num_cpus: worker slots of the embedded cluster (default: the machine's
            cores; ``TUNEPLAT_NUM_CPUS`` overrides both, like Ray's ``RAY_OVERRIDE_RESOURCES``).
        num_gpus: GPUs it hands to trials (default: what ``nvidia-smi`` lists).
        ignore_reinit_error: do not raise when called twice.
        **ray_kwargs: other ``ray.init`` arguments (dashboard, logging, namespace,
            runtime_env, ...) are accepted and have no effect; unknown ones are a ``TypeError``.

    Returns:
        What was set (``{"num_cpus": ..., "num_gpus": ..., "address": ...}``).

    Example:
        >>> import tuneplat
        >>> tuneplat.init(num_cpus=2)["num_cpus"]
        2
        >>> tuneplat.shutdown()
    """
    unknown = sorted(set(ray_kwargs) - _IGNORED)
    if unknown:
        raise TypeError(f"tuneplat.init() got unexpected argument(s) {unknown}; it takes address=, num_cpus=, "
                        "num_gpus=, ignore_reinit_error= (and ignores Ray's dashboard/logging/runtime_env options).")
    if _requested.initialized:
        if ignore_reinit_error:
            return {"num_cpus": _requested.num_cpus, "num_gpus": _requested.num_gpus, "address": _requested.address}
        raise RuntimeError("tuneplat.init() was already called (call tuneplat.shutdown() first, or pass "
                           "ignore_reinit_error=True).")
    if address == "auto":
        address = _auto_address()
    elif address == "local":
        address = None
    if address is not None and not (isinstance(address, str) and "://" in address):
        raise ValueError(f"The value of `address` is {address!r}, but must be a Dask scheduler address such as "
                         "'tcp://127.0.0.1:8786' (a Ray 'ray://' address has no meaning here).")
    if address is not None and address.startswith("ray://"):
        raise ValueError(f"The value of `address` is {address!r}: tuneplat runs on Dask; give a Dask scheduler "
                         "address ('tcp://host:8786').")
    _requested.num_cpus = _count("num_cpus", num_cpus)
    if _requested.num_cpus == 0:
        raise ValueError("The value of `num_cpus` is 0, but must be >= 1: trials need a worker slot.")
    _requested.num_gpus = _count("num_gpus", num_gpus)
    _requested.address = address
    _requested.initialized = True
    return {"num_cpus": _requested.num_cpus, "num_gpus": _requested.num_gpus, "address": _requested.address}


def _auto_address() -> str | None:
    """Ray's ``address="auto"``: the Dask scheduler this environment names, else None (the embedded cluster)."""
    import os

    import dask

    found = os.environ.get("DASK_SCHEDULER_ADDRESS", "").strip() or dask.config.get("scheduler-address", None)
    if found:
        logger.info("tuneplat: init(address='auto') attaches to the Dask scheduler at %s (DASK_SCHEDULER_ADDRESS / "
                    "Dask's scheduler-address setting)", found)
        return str(found)
    logger.warning("tuneplat: init(address='auto') found no running Dask scheduler (set DASK_SCHEDULER_ADDRESS or "
                   "Dask's scheduler-address config to attach to one): fit() starts a local cluster on this machine")
    return None


def local_cpus() -> int | None:
    """Worker slots of the embedded cluster: ``TUNEPLAT_NUM_CPUS`` (as Ray's ``RAY_OVERRIDE_RESOURCES``, it wins
    over ``init(num_cpus=...)``, to oversubscribe a laptop without editing the script), else ``init(num_cpus=...)``,
    else None (one per core)."""
    import os

    raw = os.environ.get("TUNEPLAT_NUM_CPUS", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"TUNEPLAT_NUM_CPUS={raw!r}: set it to a whole number >= 1 (the embedded cluster's "
                             "worker slots), or unset it for one per core")
        return value
    return _requested.num_cpus


def is_initialized() -> bool:
    """Whether :func:`init` was called (and not undone by :func:`shutdown`)."""
    return _requested.initialized


def shutdown() -> None:
    """Forget what :func:`init` set (``ray.shutdown``). Clusters tuneplat starts end with each ``fit()`` anyway."""
    _requested.num_cpus = _requested.num_gpus = None
    _requested.address = None
    _requested.initialized = False
