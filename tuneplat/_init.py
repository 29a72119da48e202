"""``tuneplat.init()`` / ``tuneplat.shutdown()``: Ray's ``ray.init(num_cpus=..., num_gpus=...)`` for the embedded cluster.

tuneplat starts its Dask cluster when ``fit()`` needs one; ``init`` only says
how big it is (``num_cpus`` worker slots, ``num_gpus`` GPUs) or where a running
Dask cluster is (``address``), for every ``fit()`` until :func:`shutdown`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

__all__ = ["init", "is_initialized", "requested", "shutdown"]

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
            ``"auto"``/``"local"`` mean the embedded cluster.
        num_cpus: worker slots of the embedded cluster (default: the machine's cores).
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
    if address in ("auto", "local"):
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


def is_initialized() -> bool:
    """Whether :func:`init` was called (and not undone by :func:`shutdown`)."""
    return _requested.initialized


def shutdown() -> None:
    """Forget what :func:`init` set (``ray.shutdown``). Clusters tuneplat starts end with each ``fit()`` anyway."""
    _requested.num_cpus = _requested.num_gpus = None
    _requested.address = None
    _requested.initialized = False
