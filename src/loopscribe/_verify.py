"""Integrity: check the hash chain of a session.

A file is hash-chained from its start when it was created with
``chain=True``, or from a ``chain_start`` record on when it was opened with
``Session.open(path, chain=True)``. Each chained record (after the file's
first) carries ``"prev"``, the SHA-256 of the complete line before it, and
closing the Session appends a ``session_close`` seal. So:

* a changed record breaks the ``prev`` of the record after it (or, for the
  seal itself, leaves nothing to protect: the seal holds no data);
* a removed or reordered record breaks the seq order and the chain;
* records cut from the end remove the seal: the report says the file is not
  sealed (as it also is while being written, or after a crash, whose
  unfinished final line is ignored as every reader ignores it).

Records before a ``chain_start`` are only checked for their format: the
report says where the chain begins (``start_seq``). The ``chain_start``
record's own ``prev`` ties the chain to the line before it.

No chain can stop someone who rewrites the whole file and recomputes every
hash: to make that detectable too, keep the seal's ``prev`` (the report's
``head``) somewhere else, for example in a trace backend.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from . import events as ev
from ._errors import FormatError
from ._format import CHAIN_ALGORITHM, Scanner
from ._source import is_url, open_binary

_BUFFER_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class BrokenLink:
    """Where the chain breaks: the first record that does not fit."""

    seq: int | None
    line: int
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of :func:`verify`.

    Attributes:
        path: The file (or the shipped session's URL).
        records: Chained records verified (from the chain's start) before
            the first broken link.
        chained: Whether the file is hash-chained (from its start, or from
            a ``chain_start`` record on).
        sealed: Whether the file ends with a ``session_close`` seal.
        broken: The first broken link, or ``None``.
        head: SHA-256 of the last verified line: keep it elsewhere to
            detect a wholesale rewrite later.
        start_seq: The seq where the chain begins: 0 for a file created
            with ``chain=True``, the ``chain_start`` record's for a chain
            started later; ``None`` when the file is not chained.
        start_line: The line where the chain begins (1-based), or ``None``.
        lines: Complete lines read and found well-formed records (what can
            be checked of a file without a chain, too).
    """

    path: Path | str
    records: int
    chained: bool
    sealed: bool
    broken: BrokenLink | None
    head: str | None
    start_seq: int | None = None
    start_line: int | None = None
    lines: int = 0

    @property
    def ok(self) -> bool:
        """No broken link, and the file is sealed (closed by its writer)."""
        return self.chained and self.broken is None and self.sealed

    def describe(self) -> str:
        """One human line."""
        if not self.chained:
            return (
                f"{self.path}: not hash-chained (created without chain=True, and no "
                f"chain_start record): its {self.lines} lines are well-formed records; "
                "there is no chain to verify"
            )
        where = f"{self.path}: "
        if self.start_seq:
            where += (
                f"the chain begins at seq {self.start_seq} (line {self.start_line}; the "
                f"{self.start_seq} records before it are not chained): "
            )
        if self.broken is not None:
            b = self.broken
            at = f"seq {b.seq}, " if b.seq is not None else ""
            return (
                f"{where}chain broken at {at}line {b.line}, byte {b.offset}: {b.reason} "
                f"({self.records} records verified before it)"
            )
        if not self.sealed:
            return (
                f"{where}{self.records} records verified, but the file ends without its "
                "session_close seal: it is still being written, its writer crashed, or "
                "records were cut from its end"
            )
        return f"{where}{self.records} records verified, chain intact and sealed"


def verify(path: str | os.PathLike[str]) -> VerifyReport:
    """Check every link of a chained session file and report the first broken one.

    ``path`` may be a shipped session's URL (``s3://.../sessions/<id>``): the
    chain is checked across its segments as across one file. A file whose
    chain begins at a ``chain_start`` record is checked from there on.

    Raises:
        UnsupportedVersionError: The file's format version is not supported.
        FileNotFoundError: The file does not exist.
    """
    where: Path | str = path if isinstance(path, str) and is_url(path) else Path(path)
    scanner = Scanner(where)
    records = 0
    prev: str | None = None
    before = b""  # the last line before the chain: hashed only if a chain_start follows
    start: tuple[int, int] | None = None  # (seq, line) where the chain begins
    last_type = ""
    number = 0
    offset = 0

    def report(broken: BrokenLink | None = None, *, sealed: bool = False) -> VerifyReport:
        seq, line = start if start is not None else (None, None)
        chained = start is not None
        return VerifyReport(where, records, chained, sealed, broken, prev, seq, line, number)

    with open_binary(where, _BUFFER_BYTES) as stream:
        try:
            for number, offset, raw, obj in scanner.lines(stream):
                if start is None:
                    if number == 1:
                        data = obj.get("data")
                        if isinstance(data, dict) and data.get("chain") == CHAIN_ALGORITHM:
                            start = (obj["seq"], number)
                    elif obj["type"] == ev.CHAIN_START:
                        start = (obj["seq"], number)
                        prev = hashlib.sha256(before).hexdigest()
                    if start is None:
                        before = raw
                        continue
                if number > 1 and obj.get("prev") != prev:
                    reason = (
                        "'prev' does not match the line before it: this record or the "
                        "one before was changed, removed or reordered"
                    )
                    return report(BrokenLink(obj["seq"], number, offset, reason))
                prev = hashlib.sha256(raw).hexdigest()
                last_type = obj["type"]
                records += 1
        except FormatError as exc:
            return report(BrokenLink(None, exc.line or number, exc.offset or offset, str(exc)))
    if start is None:
        prev = None
        return report()
    # An unfinished final line (a crash mid-write) is ignored like every reader
    # ignores it; the file is then simply not sealed.
    return report(sealed=last_type == ev.SESSION_CLOSE)
