"""The messages between a rank and the tuner, typed on both ends.

Every message is a frozen dataclass with ``to_wire()`` (the tuple that travels:
the kind's name, then its fields in order, trailing fields left at their default
left out) and ``from_wire()``, which checks the tuple against the kind's schema
(the fields' annotations) and raises :class:`ProtocolError`, saying what is
wrong, instead of acting on a malformed message. :func:`from_rank` and
:func:`from_tuner` decode what one side may send the other.

The encoding and the authentication are those of :mod:`~tuneplat.execution._wire`
and :mod:`~tuneplat.execution._channel`: frames are pickled only between peers
that proved they hold the trial's token, and this module adds nothing that
unpickles; it checks the shape of what arrived.

Rank to tuner: :class:`Hello`, :class:`Ping`, :class:`Running`, :class:`Rendezvous`
(rank 0's store), :class:`Gather` (a value for the group's relay), :class:`Report`,
:class:`Saved`, :class:`Preempting`, :class:`Lease`, :class:`Unlease`, :class:`Requeue`,
:class:`Done`, :class:`Error`.
Tuner to rank: :class:`Go`, :class:`Answer` (the decision on a report),
:class:`Abort`, :class:`Rendezvous` (forwarded to the other ranks), :class:`Gathered`
(every rank's value), :class:`Next` (a chained trial), :class:`Bye`, :class:`Leased`,
:class:`Refused`, :class:`Requeue`.
"""

from __future__ import annotations

import dataclasses
import socket
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from schedulers import Decision

from .._annotations import isinstance_types
from ._wire import MAX_FRAME, recv_msg, send_msg

__all__ = [
    "Abort", "Answer", "Bye", "Done", "Error", "Gather", "Gathered", "Go", "Hello", "Lease", "Leased", "Message",
    "Next", "Ping",
    "Preempting", "ProtocolError", "Refused", "Rendezvous", "Report", "Requeue", "Running", "Saved", "Unlease",
    "from_rank", "from_tuner", "recv_from_tuner", "send",
]


class ProtocolError(ValueError):
    """A message that does not fit its kind's schema: it is refused, never acted on."""


@dataclass(frozen=True)
class Message:
    """One message of the rank-tuner protocol (a subclass per kind; ``KIND`` is its name on the wire)."""

    KIND: ClassVar[str] = ""

    def to_wire(self) -> tuple[Any, ...]:
        """``(KIND, field, ...)``, without the trailing fields that are at their default."""
        cls = type(self)
        values = [getattr(self, name) for name in _NAMES[cls]]
        defaults, required = _DEFAULTS[cls], _REQUIRED[cls]
        while len(values) > required and values[-1] == defaults[len(values) - 1]:
            values.pop()
        return (self.KIND, *values)

    @classmethod
    def from_wire(cls, msg: Any) -> Message:
        """The message that ``msg`` (a received tuple) carries.

        Raises:
            ProtocolError: ``msg`` is not a ``KIND`` message of the expected shape (the message says how).
        """
        if not isinstance(msg, tuple) or not msg or msg[0] != cls.KIND:
            raise ProtocolError(f"expected a {cls.KIND!r} message, got {_shown(msg)}")
        names = _NAMES[cls]
        args = msg[1:]
        if not _REQUIRED[cls] <= len(args) <= len(names):
            raise ProtocolError(f"a {cls.KIND!r} message has {len(args)} field(s), expected "
                                f"{_signature(cls)}: {_shown(msg)}")
        checks = _TYPES[cls]
        for name, value in zip(names, args):
            types, optional = checks[name]
            if value is None and optional:
                continue
            if types and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
                want = " or ".join(t.__name__ for t in types) + (" or None" if optional else "")
                raise ProtocolError(f"a {cls.KIND!r} message whose {name!r} is {type(value).__name__}, not {want} "
                                    f"(expected {_signature(cls)})")
        try:
            message = cls(*args)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"a {cls.KIND!r} message that does not fit {_signature(cls)}: {exc}") from None
        problem = message._problem()
        if problem:
            raise ProtocolError(f"a {cls.KIND!r} message whose {problem}")
        return message

    def _problem(self) -> str | None:
        """What else is wrong with the fields (beyond their types); None: nothing."""
        return None


# ---------------------------------------------------------------------- rank -> tuner
@dataclass(frozen=True)
class Hello(Message):
    """A rank connected: its index in the group, process, host and memory cgroup's OOM-kill count."""

    KIND: ClassVar[str] = "hello"
    rank: int
    pid: int
    hostname: str
    oom_baseline: dict[str, Any] | None = None


@dataclass(frozen=True)
class Ping(Message):
    """The rank is alive (the heartbeat), with its system metrics when it samples them."""

    KIND: ClassVar[str] = "ping"
    stats: dict[str, Any] | None = None


@dataclass(frozen=True)
class Running(Message):
    """A chained runner started the next trial's user code (and its OOM-kill count now)."""

    KIND: ClassVar[str] = "started"
    oom_baseline: dict[str, Any] | None = None


@dataclass(frozen=True)
class Rendezvous(Message):
    """Where rank 0's TCPStore listens (rank 0 to the tuner, the tuner to the other ranks)."""

    KIND: ClassVar[str] = "rendezvous"
    host: str
    port: int


@dataclass(frozen=True)
class Gather(Message):
    """A rank's value for the ``seq``-th exchange of its group (``RankGroup.all_gather`` without a store):
    ``payload`` is JSON text. The tuner answers every rank with :class:`Gathered` once all ranks sent ``seq``."""

    KIND: ClassVar[str] = "gather"
    seq: int
    payload: str


@dataclass(frozen=True)
class Report(Message):
    """A rank reached ``report()``: the iteration, the result (rank 0's is the trial's; the others send their own
    metrics, which only Ray V2's ``UserCallback.after_report`` sees), whether it staged a checkpoint. The tuner
    answers once every rank reported the iteration."""

    KIND: ClassVar[str] = "report"
    iteration: int
    result: dict[str, Any] | None
    staged: bool


@dataclass(frozen=True)
class Saved(Message):
    """The rank staged the checkpoint of ``iteration`` that an :class:`Answer` asked for (``save``)."""

    KIND: ClassVar[str] = "saved"
    iteration: int


@dataclass(frozen=True)
class Preempting(Message):
    """The rank's Dask worker is closing (retired, scaled down, SIGTERM): ``message`` says how."""

    KIND: ClassVar[str] = "preempt"
    message: str


@dataclass(frozen=True)
class Lease(Message):
    """The trial starts a group of its own (a Trainer's ``fit()`` inside it): ``n`` ranks of ``request``."""

    KIND: ClassVar[str] = "lease"
    request: dict[str, Any]
    n: int
    strategy: str


@dataclass(frozen=True)
class Unlease(Message):
    """A slot a :class:`Leased` gave is free again."""

    KIND: ClassVar[str] = "unlease"
    address: str


@dataclass(frozen=True)
class Requeue(Message):
    """The trial goes back to the tuner's queue (tuner to rank: it must; rank to tuner: it did)."""

    KIND: ClassVar[str] = "requeue"
    message: str


@dataclass(frozen=True)
class Done(Message):
    """The rank's user code ended healthily (``chainable``: its runner waits for a :class:`Next`)."""

    KIND: ClassVar[str] = "done"
    chainable: bool = False


@dataclass(frozen=True)
class Error(Message):
    """The rank's user code raised: the error, its traceback (``chainable`` as for :class:`Done`)."""

    KIND: ClassVar[str] = "error"
    message: str
    traceback: str
    chainable: bool = False
    #: the exception's qualified type names, most specific first (its MRO): the tuner's classification reads these
    types: tuple[str, ...] = ()


# ---------------------------------------------------------------------- tuner -> rank
@dataclass(frozen=True)
class Go(Message):
    """Every rank is connected: run the user code."""

    KIND: ClassVar[str] = "go"


@dataclass(frozen=True)
class Answer(Message):
    """The decision on a report; ``save``: stage a checkpoint of this step; ``notice``: a worker of the group
    is leaving (``{"ranks": [...], "reason": ...}``), checkpoint now."""

    KIND: ClassVar[str] = "decision"
    decision: Decision
    save: bool = False
    notice: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.decision, Decision):  # an older tuner sent the decision's value
            object.__setattr__(self, "decision", Decision(self.decision))


@dataclass(frozen=True)
class Abort(Message):
    """End the trial's user code now (``reason``: why)."""

    KIND: ClassVar[str] = "abort"
    reason: str


@dataclass(frozen=True)
class Gathered(Message):
    """Every rank's :class:`Gather` payload of exchange ``seq``, in rank order (JSON texts)."""

    KIND: ClassVar[str] = "gathered"
    seq: int
    payloads: list[str]

    def _problem(self) -> str | None:
        bad = [p for p in self.payloads if not isinstance(p, str)]
        return f"'payloads' holds {type(bad[0]).__name__}, not JSON text" if bad else None


@dataclass(frozen=True)
class Next(Message):
    """A chained runner's next trial: its :class:`~tuneplat.train._session.RankSpec`."""

    KIND: ClassVar[str] = "next"
    spec: Any

    def _problem(self) -> str | None:
        missing = [a for a in ("trial_id", "rank", "world_size") if not hasattr(self.spec, a)]
        return f"'spec' is a {type(self.spec).__name__}, not a rank's spec (no {', '.join(missing)})" if missing else None


@dataclass(frozen=True)
class Bye(Message):
    """A chained runner is not needed any more: its task ends."""

    KIND: ClassVar[str] = "bye"


@dataclass(frozen=True)
class Leased(Message):
    """The slots placed for a :class:`Lease` (``Assignment`` s)."""

    KIND: ClassVar[str] = "leased"
    assignments: list[Any]

    def _problem(self) -> str | None:
        bad = [a for a in self.assignments if not isinstance(getattr(a, "address", None), str)]
        return f"'assignments' holds {type(bad[0]).__name__}, not a slot's Assignment" if bad else None


@dataclass(frozen=True)
class Refused(Message):
    """A :class:`Lease` that can never be placed; ``message`` says how to size the cluster."""

    KIND: ClassVar[str] = "refused"
    message: str


# ---------------------------------------------------------------------- decoding
RANK_MESSAGES: dict[str, type[Message]] = {c.KIND: c for c in (
    Hello, Ping, Running, Rendezvous, Gather, Report, Saved, Preempting, Lease, Unlease, Requeue, Done, Error)}
TUNER_MESSAGES: dict[str, type[Message]] = {c.KIND: c for c in (
    Go, Answer, Abort, Rendezvous, Gathered, Next, Bye, Leased, Refused, Requeue)}


def from_rank(msg: Any) -> Message:
    """The typed message a rank sent (a received tuple); :class:`ProtocolError` when malformed."""
    return _decode(msg, RANK_MESSAGES, "a rank")


def from_tuner(msg: Any) -> Message:
    """The typed message the tuner sent (a received tuple); :class:`ProtocolError` when malformed."""
    return _decode(msg, TUNER_MESSAGES, "the tuner")


def send(sock: socket.socket, message: Message, limit: int = MAX_FRAME) -> None:
    """Send ``message`` on an authenticated connection (the frames of :func:`~tuneplat.execution._wire.send_msg`).

    Raises:
        ReportTooLarge: it pickles to more than ``limit`` bytes (nothing is sent).
    """
    send_msg(sock, message.to_wire(), limit)


def recv_from_tuner(sock: socket.socket) -> Message:
    """Block for the tuner's next message; ConnectionError on EOF, :class:`ProtocolError` when malformed."""
    return from_tuner(recv_msg(sock))


def _decode(msg: Any, kinds: dict[str, type[Message]], sender: str) -> Message:
    kind = msg[0] if isinstance(msg, tuple) and msg else None
    cls = kinds.get(kind) if isinstance(kind, str) else None
    if cls is None:
        known = ", ".join(sorted(kinds))
        raise ProtocolError(f"malformed message from {sender}: {_shown(msg)} is not one of its messages ({known}); "
                            "do the tuner and the workers run the same tuneplat version?")
    try:
        return cls.from_wire(msg)
    except ProtocolError as exc:
        raise ProtocolError(f"malformed message from {sender}: {exc}") from None


def _shown(msg: Any) -> str:
    text = repr(msg)
    return text if len(text) <= 200 else text[:197] + "..."


def _signature(cls: type[Message]) -> str:
    hints = typing.get_type_hints(cls)
    parts = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        hint = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
        parts.append(f"{f.name}: {hint}" + ("" if _is_required(f) else " (optional)"))
    return "(" + ", ".join([repr(cls.KIND), *parts]) + ")"


def _is_required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


_ALIASES: dict[Any, tuple[type, ...]] = {Decision: (Decision, str)}  # (an older tuner sent the decision's value)


_NAMES: dict[type[Message], tuple[str, ...]] = {}
_TYPES: dict[type[Message], dict[str, tuple[tuple[type, ...], bool]]] = {}
_REQUIRED: dict[type[Message], int] = {}
_DEFAULTS: dict[type[Message], list[Any]] = {}
for _cls in {*RANK_MESSAGES.values(), *TUNER_MESSAGES.values()}:
    _hints = typing.get_type_hints(_cls)
    _fields = dataclasses.fields(_cls)
    _NAMES[_cls] = tuple(f.name for f in _fields)
    _TYPES[_cls] = {f.name: isinstance_types(_hints[f.name], _ALIASES) for f in _fields}
    _REQUIRED[_cls] = sum(1 for f in _fields if _is_required(f))
    _DEFAULTS[_cls] = [f.default if f.default is not dataclasses.MISSING
                       else f.default_factory() if f.default_factory is not dataclasses.MISSING else object()
                       for f in _fields]
