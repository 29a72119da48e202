"""The ``tuneplat`` command line: run, resume and inspect sweeps described by sweep files.

One module per command (``_run``, ``_resume``, ``_status``, ``_best``, ``_simulate``, ``_plot``);
:func:`main` (the ``tuneplat`` console script, ``python -m tuneplat.cli``) hands each to its module.

Exit status: 0 success; 1 the experiment failed (every trial errored, or a
fail-fast error); 2 bad input (sweep file, options, experiment folder);
130 interrupted (resume it with ``tuneplat resume``). Errors are one line on
stderr, prefixed ``tuneplat: error:``.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
