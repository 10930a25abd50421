"""The value types every module speaks: Execution, CallRef, Actor, Event, Record, Transient."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Execution:
    """One logical call inside a run: a model call, a tool call, a turn, ...

    Attributes:
        id: The host's run-local logical call ID (for example a tool-call ID).
        kind: What the execution is: ``"model"``, ``"tool"``, ``"turn"``,
            ``"agent"``, ``"context"`` or any host-defined word.
        attempt: 1-based; a retry of the same call keeps ``id`` and increments this.
        parent_id: The ``id`` of the execution this one is nested in, if any.
    """

    id: str
    kind: str
    attempt: int = 1
    parent_id: str | None = None
    _json: dict[str, Any] | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Execution.id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"Execution.kind must be a non-empty string, got {self.kind!r}")
        if not isinstance(self.attempt, int) or isinstance(self.attempt, bool) or self.attempt < 1:
            raise ValueError(
                f"Execution.attempt is 1-based and must be an int >= 1, got {self.attempt!r}"
            )
        if self.parent_id is not None and (
            not isinstance(self.parent_id, str) or not self.parent_id
        ):
            raise ValueError(
                f"Execution.parent_id must be None or a non-empty string, got {self.parent_id!r}"
            )

    def to_json(self) -> dict[str, Any]:
        """The ``execution`` object as it is stored in a record (do not modify it)."""
        # Built once per Execution: a host records several events per call.
        out = self._json
        if out is None:
            out = {"id": self.id, "kind": self.kind, "attempt": self.attempt}
            if self.parent_id is not None:
                out["parent_id"] = self.parent_id
            object.__setattr__(self, "_json", out)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Execution:
        """Build an Execution from its stored form; raises ``ValueError`` if it does not fit."""
        id_, kind = obj["id"], obj["kind"]
        attempt, parent = obj.get("attempt", 1), obj.get("parent_id")
        # The read path builds one per record: when every field is plainly
        # valid, skip the frozen __init__ (and its per-field object.__setattr__).
        if (
            cls is Execution
            and type(id_) is str
            and id_
            and type(kind) is str
            and kind
            and type(attempt) is int
            and attempt >= 1
            and (parent is None or (type(parent) is str and parent))
        ):
            return _new_execution(id_, kind, attempt, parent)
        return cls(id_, kind, attempt, parent)


@dataclass(frozen=True, slots=True)
class CallRef:
    """The four coordinates that identify one execution attempt across systems.

    An external timeline stores only this; ``loopscribe.otel.span_context``
    turns it into the OpenTelemetry trace and span IDs.
    """

    session_id: str
    run_id: str
    execution_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Actor:
    """Who an action is attributed to: a run (``begin_run(actor=...)``) or one record.

    Any field may be ``None`` where the host does not know that identity
    (a local desktop app has no tenant).

    Attributes:
        user_id: The user the action was taken for or by.
        tenant_id: The tenant (organization, workspace) the user belongs to.
        label: A human-readable name: an agent's name, a channel, a service.
    """

    user_id: str | None = None
    tenant_id: str | None = None
    label: str | None = None

    def to_json(self) -> dict[str, str]:
        """The stored form: only the fields that are set."""
        return {
            k: v
            for k, v in (
                ("user_id", self.user_id),
                ("tenant_id", self.tenant_id),
                ("label", self.label),
            )
            if v is not None
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Actor:
        """Build an Actor from its stored form (other keys, from a later version, are ignored)."""
        return cls(obj.get("user_id"), obj.get("tenant_id"), obj.get("label"))


@dataclass(frozen=True, slots=True)
class Event:
    """A fact published by an agent host, handed to ``Run.record``.

    Attributes:
        type: The event type, for example ``"tool_exec_start"``; see ``loopscribe.events``.
        execution: The call this event belongs to, if any.
        data: The payload; JSON-compatible values and codec-registered types.
        timestamp: When the fact happened at the source. ``None`` means now.
            A naive datetime is taken as local time.
        actor: Who did it, when that is not (only) the run's actor: the
            user who approved a tool call, the agent that ran it. Written
            in the record (``Record.actor``).
    """

    type: str
    execution: Execution | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    timestamp: datetime | None = None
    actor: Actor | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """One line of a session file, as written or as read back.

    Attributes:
        session_id: The file's session.
        seq: Append order, 0-based and contiguous within the file.
        type: ``session_start``, ``run_start``, ``run_close``, ``checkpoint``
            or a host event type.
        ts: Source timestamp (UTC).
        run_id: The run the record belongs to (``None`` for ``session_start``).
        execution: The execution the record belongs to, if any.
        data: The payload. Live observers receive the values that were
            written; ``read`` gives them decoded from the file.
        offset: Byte offset of the line in the file.
        size: Length of the line in bytes, including the final newline.
        actor: Who the record is attributed to, when the event named one
            (the run's actor, if any, is in its ``run_start``).
        chain_hash: In a hash-chained session, the SHA-256 (hex) of this
            record's line: the ``prev`` of the record after it. Set on the
            Records a Session writes (``Run.record`` returns it, observers
            get it); ``None`` otherwise, and on Records read back (check a
            file with ``loopscribe.verify``). Not compared by ``==``.
    """

    session_id: str
    seq: int
    type: str
    ts: datetime
    run_id: str | None
    execution: Execution | None
    data: Mapping[str, Any]
    offset: int
    size: int
    actor: Actor | None = None
    chain_hash: str | None = field(default=None, compare=False)

    @property
    def end_offset(self) -> int:
        """Byte offset just after this record's newline: where the next record starts."""
        return self.offset + self.size

    def ref(self) -> CallRef | None:
        """The CallRef of this record's execution, or ``None`` outside an execution."""
        if self.execution is None or self.run_id is None:
            return None
        return CallRef(self.session_id, self.run_id, self.execution.id, self.execution.attempt)


@dataclass(frozen=True, slots=True)
class Transient:
    """A live event that is delivered but never written: a token delta, tool progress.

    ``message_update``, ``model_stream`` and ``tool_exec_update`` recorded
    through ``Run.record`` are not written to the file; a Session hands them
    as Transients to observers that have an ``on_transient`` method (the live
    ``Bus``). They have no ``seq``: only Records can be replayed exactly.

    Attributes:
        session_id: The session it belongs to.
        run_id: The run that published it, if any.
        type: The event type, for example ``"message_update"``.
        ts: Source timestamp (UTC).
        execution: The call it belongs to, if any.
        data: The payload as the host published it (not encoded, not copied:
            treat it as read-only).
        offset: The file's size when it was published: it comes after every
            record that starts before ``offset``, before the one written there.
    """

    session_id: str
    run_id: str | None
    type: str
    ts: datetime
    execution: Execution | None
    data: Mapping[str, Any]
    offset: int


_OPTIONAL = frozenset({"actor", "chain_hash"})


def _record_factory() -> Callable[..., Record]:
    """A constructor for Record that skips the frozen dataclass ``__init__``.

    A frozen dataclass sets each field through ``object.__setattr__``; the
    writer builds one Record per line, so it sets the slots directly instead
    (the same values, the same immutable object afterwards).
    """
    names = [f.name for f in fields(Record)]
    params = ", ".join(f"{f.name}=None" if f.name in _OPTIONAL else f.name for f in fields(Record))
    namespace: dict[str, Any] = {"new": object.__new__, "Record": Record}
    namespace.update({f"set_{n}": getattr(Record, n).__set__ for n in names})
    body = "\n".join(f"    set_{n}(r, {n})" for n in names)
    exec(f"def make({params}):\n    r = new(Record)\n{body}\n    return r", namespace)
    factory: Callable[..., Record] = namespace["make"]
    return factory


new_record = _record_factory()


def _execution_factory() -> Callable[[str, str, int, str | None], Execution]:
    set_id, set_kind, set_attempt, set_parent, set_json = (
        getattr(Execution, name).__set__ for name in ("id", "kind", "attempt", "parent_id", "_json")
    )

    def make(id_: str, kind: str, attempt: int, parent_id: str | None) -> Execution:
        ex = object.__new__(Execution)
        set_id(ex, id_)
        set_kind(ex, kind)
        set_attempt(ex, attempt)
        set_parent(ex, parent_id)
        set_json(ex, None)
        return ex

    return make


_new_execution = _execution_factory()
