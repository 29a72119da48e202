"""Sweep files: YAML/TOML experiment descriptions that map one-to-one onto the Python API.

This is the only module where strings from a sweep file become objects:
``trainable: module:function`` is imported (never evaluated), domains like
``{loguniform: [1.0e-4, 0.1]}`` become :mod:`tuneplat.search` domains,
``scheduler: {type: asha, ...}`` becomes an :class:`~tuneplat.schedulers.ASHAScheduler`,
and so on. Every key is checked against a strict schema; errors name the
file, line and column, the key path and the expected form. See
``docs/sweep-files.md`` for the full mapping.

Example:
    >>> from tuneplat.config import load_sweep
    >>> sweep = load_sweep("examples/toy_asha.yaml", overrides=["num_samples=4"])  # doctest: +SKIP
    >>> results = sweep.tuner().fit()  # doctest: +SKIP

The code lives in :mod:`tuneplat.sweep` by job: ``_schema`` (checkers and tables),
``_build`` (objects from a checked document), ``_imports`` (``module:function``),
``_load`` (overrides, ``${env:...}``, :class:`Sweep`); this module is its public face.
"""

from __future__ import annotations

from .sweep._imports import import_object
from .sweep._load import (
    Sweep,
    apply_overrides,
    build_sweep,
    interpolate_env,
    load_sweep,
    portable_data,
    read_sweep_document,
)
from .sweep._schema import DOMAINS, SCHEDULERS, SEARCH_ALGORITHMS
from .sweep._sweepfile import SweepFileError

__all__ = [
    "DOMAINS",
    "SCHEDULERS",
    "SEARCH_ALGORITHMS",
    "Sweep",
    "SweepFileError",
    "apply_overrides",
    "build_sweep",
    "import_object",
    "interpolate_env",
    "load_sweep",
    "portable_data",
    "read_sweep_document",
]
