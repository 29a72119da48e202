"""A trial's failure, typed: what kind it is, from the exception's types or the host's evidence, never from words.

A rank that raises sends its exception's type names (its MRO, ``module.QualName``)
with the message (:class:`~tuneplat.execution._protocol.Error`); an executor turns
what it saw into one :class:`Failure` and hands it to the loop with
:class:`~tuneplat.execution._executor.Ended`. The loop's
:class:`~tuneplat.core._failure.FailurePolicy` decides what follows from it.

Example:
    >>> failure = Failure.of_types(["torch.OutOfMemoryError", "builtins.RuntimeError"], "CUDA out of memory")
    >>> failure.kind
    'oom'
    >>> Failure.of_types(["builtins.KeyError", "builtins.LookupError"], "'OutOfMemoryErrorCount'").kind
    'error'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ERROR", "HUNG", "INVALID", "LOST", "OOM", "OOM_TYPES", "Failure", "exception_types"]

#: the user's code raised
ERROR = "error"
#: out of memory: an OOM exception type (GPU or host), or the host's OOM killer ended the rank
OOM = "oom"
#: a rank's process, worker or host went away (no exception to read)
LOST = "lost"
#: a rank stopped answering (no heartbeat, or far behind its group at a report)
HUNG = "hung"
#: the trial's own output was refused (a missing metric, a malformed message, a checkpoint the tuner cannot see)
INVALID = "invalid"

#: exception types that mean "out of memory" (qualified names, as :func:`exception_types` gives them)
OOM_TYPES = frozenset({
    "torch.OutOfMemoryError",  # torch >= 2.5 (torch.cuda.OutOfMemoryError is this class)
    "torch.cuda.OutOfMemoryError",
    "torch.cuda.memory.OutOfMemoryError",
    "builtins.MemoryError",  # the host ran out (Python's own)
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError",
    "tuneplat.testing._vtrainable.OutOfMemoryError",  # a virtual device ran out (VirtualTimeExecutor)
})


def exception_types(exc: BaseException) -> tuple[str, ...]:
    """The qualified names of ``exc``'s type and its bases, most specific first (``builtins.KeyError``, ...)."""
    return tuple(f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__ if c is not object)


@dataclass(frozen=True)
class Failure:
    """Why an attempt of a trial failed.

    Attributes:
        kind: :data:`ERROR`, :data:`OOM`, :data:`LOST`, :data:`HUNG` or :data:`INVALID`.
        types: the exception's qualified type names, most specific first (empty: no exception was raised).
        rank: the rank that failed first, when one did.
        host: that rank's host, when known.
        message: what the user reads (the trial's error).
    """

    kind: str
    types: tuple[str, ...] = ()
    rank: int | None = None
    host: str | None = None
    message: str = ""

    @classmethod
    def of_types(cls, types: Sequence[str], message: str, rank: int | None = None,
                 host: str | None = None) -> Failure:
        """A failure of a raised exception: :data:`OOM` when one of its ``types`` is an OOM type, else :data:`ERROR`."""
        kind = OOM if any(t in OOM_TYPES for t in types) else ERROR
        return cls(kind, tuple(types), rank, host, message)

    @classmethod
    def of_exception(cls, exc: BaseException, message: str, rank: int | None = None,
                     host: str | None = None) -> Failure:
        """A failure of ``exc`` (its MRO's names)."""
        return cls.of_types(exception_types(exc), message, rank, host)
