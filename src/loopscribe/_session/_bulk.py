"""Bulk writes into a run of a buffered Session, with no Record built."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from .. import events as ev
from .._codec import TAG_KEY_BYTES, Codec
from .._errors import (
    EncodeError,
)
from .._fields import typed_positions
from .._format import format_ts
from .._freeze import FrozenConfig, freeze_config
from .._model import Execution
from ._file import _BLOCK_BYTES, _BULK_OPTIONS, _COUNTED, _forks

if TYPE_CHECKING:
    from ._run import Run


class BulkWriter:
    """Writes records into one run of a buffered Session without building Records.

    Get one from :meth:`Run.bulk`. :meth:`write` writes exactly the line
    ``run.record(Event(kind, execution, data, timestamp))`` writes, through
    the Session's block buffer (see ``Session.create(buffered=True)``), but
    returns nothing: nobody observes a buffered Session, so no
    :class:`Record` is needed. For bulk loads (the transcript importers), where
    building Records is most of the cost of a small record.
    """

    __slots__ = ("_run", "_session", "_ts_at", "_ts_text")

    def __init__(self, run: Run) -> None:
        """Internal: use :meth:`Run.bulk`."""
        session = run._session
        if session._pending is None:
            raise ValueError(
                f"{session._path}: Run.bulk() needs a buffered Session; open it with "
                "Session.create(..., buffered=True) or Session.open(..., buffered=True)"
            )
        self._run = run
        self._session = session
        self._ts_at: datetime | None = None
        self._ts_text = ""

    @property
    def run(self) -> Run:
        """The run this writer records into."""
        return self._run

    def write(
        self,
        kind: str,
        execution: Execution | None,
        data: Mapping[str, Any],
        timestamp: datetime | None = None,
    ) -> None:
        """Write one record, as :meth:`Run.record` would write ``Event(kind, ...)``.

        Records of one source moment usually share one ``datetime`` object:
        its stored form is computed once for all of them.

        Raises:
            As :meth:`Run.record`.
        """
        run = self._run
        if kind in ev.POLICY_TYPES:
            if kind != ev.MODEL_REQUEST:
                run._record(kind, execution, data, timestamp)
                return
            if type(data.get("config")) is not FrozenConfig:
                # What Run.record writes for a request: its config frozen.
                data = {**data, "config": freeze_config(data.get("config"), run._session.codec)}
        if timestamp is None:
            ts_text = format_ts(None)[1]
        elif timestamp is self._ts_at:
            ts_text = self._ts_text
        else:
            ts_text = self._ts_text = format_ts(timestamp)[1]
            self._ts_at = timestamp
        session = self._session
        with session._lock:
            if run._closed or session._closed or session._error is not None:
                run._check_open()
                session._check_usable()  # raises the reason
            if _forks[0] != session._forks:
                session._check_usable()
            seq = session._next_seq
            if kind in _COUNTED or session._chain_head is not None:
                obj = session._envelope(seq, kind, run._id, ts_text, execution, data)
            elif execution is None:
                obj = {
                    "session_id": session._id,
                    "seq": seq,
                    "type": kind,
                    "run_id": run._id,
                    "ts": ts_text,
                    "data": data,
                }
            else:
                obj = {
                    "session_id": session._id,
                    "seq": seq,
                    "type": kind,
                    "run_id": run._id,
                    "ts": ts_text,
                    "execution": execution.to_json(),
                    "data": data,
                }
            line = None
            codec = session._codec
            if type(codec) is Codec:
                # Plain JSON data: the codec's fast path without its type hook.
                # Anything else (a typed value, the key "$ls") goes through it.
                try:
                    line = orjson.dumps(obj, option=_BULK_OPTIONS)
                except orjson.JSONEncodeError:
                    line = None
                else:
                    if line.find(b"$") >= 0 and TAG_KEY_BYTES in line:
                        line = None
            if line is None:
                try:
                    line = codec.dumps(obj, newline=True, typed=typed_positions)
                except EncodeError as exc:
                    raise session._refused(exc, seq, kind) from None
            redact = session._redact
            if redact is not None:
                line = redact(line)
            offset = session._size
            pending = session._pending
            assert pending is not None
            if not pending:
                session._pending_at = offset
            pending += line
            if len(pending) >= _BLOCK_BYTES:
                session._flush()
            if kind in _COUNTED or session._chain_head is not None:
                session._advance(seq, kind, line, offset)
            else:
                session._next_seq = seq + 1
                session._size = offset + len(line)
