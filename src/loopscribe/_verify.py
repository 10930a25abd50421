"""Integrity: check the hash chain of a session created with ``chain=True``.

Each record of a chained file after the first carries ``"prev"``, the
SHA-256 of the complete line before it, and closing the Session appends a
``session_close`` seal. So:

* a changed record breaks the ``prev`` of the record after it (or, for the
  seal itself, leaves nothing to protect: the seal holds no data);
* a removed or reordered record breaks the seq order and the chain;
* records cut from the end remove the seal: the report says the file is not
  sealed (as it also is while being written, or after a crash, whose
  unfinished final line is ignored as every reader ignores it).

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
from ._format import Scanner
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
        records: Complete records verified before the first broken link.
        chained: Whether the file was created with ``chain=True``.
        sealed: Whether the file ends with a ``session_close`` seal.
        broken: The first broken link, or ``None``.
        head: SHA-256 of the last verified line: keep it elsewhere to
            detect a wholesale rewrite later.
    """

    path: Path | str
    records: int
    chained: bool
    sealed: bool
    broken: BrokenLink | None
    head: str | None

    @property
    def ok(self) -> bool:
        """No broken link, and the file is sealed (closed by its writer)."""
        return self.chained and self.broken is None and self.sealed

    def describe(self) -> str:
        """One human line."""
        if not self.chained:
            return f"{self.path}: not hash-chained (created without chain=True); nothing to verify"
        if self.broken is not None:
            b = self.broken
            at = f"seq {b.seq}, " if b.seq is not None else ""
            return (
                f"{self.path}: chain broken at {at}line {b.line}, byte {b.offset}: {b.reason} "
                f"({self.records} records verified before it)"
            )
        if not self.sealed:
            return (
                f"{self.path}: {self.records} records verified, but the file ends without its "
                "session_close seal: it is still being written, its writer crashed, or "
                "records were cut from its end"
            )
        return f"{self.path}: {self.records} records verified, chain intact and sealed"


def verify(path: str | os.PathLike[str]) -> VerifyReport:
    """Check every link of a chained session file and report the first broken one.

    ``path`` may be a shipped session's URL (``s3://.../sessions/<id>``): the
    chain is checked across its segments as across one file.

    Raises:
        UnsupportedVersionError: The file's format version is not supported.
        FileNotFoundError: The file does not exist.
    """
    where: Path | str = path if isinstance(path, str) and is_url(path) else Path(path)
    scanner = Scanner(where)
    records = 0
    prev: str | None = None
    chained = False
    last_type = ""
    number = 0
    offset = 0
    with open_binary(where, _BUFFER_BYTES) as stream:
        try:
            for number, offset, raw, obj in scanner.lines(stream):
                if number == 1:
                    data = obj.get("data")
                    chained = isinstance(data, dict) and data.get("chain") == "sha256"
                    if not chained:
                        return VerifyReport(where, 0, False, False, None, None)
                elif obj.get("prev") != prev:
                    reason = (
                        "'prev' does not match the line before it: this record or the "
                        "one before was changed, removed or reordered"
                    )
                    return VerifyReport(
                        where,
                        records,
                        True,
                        False,
                        BrokenLink(obj["seq"], number, offset, reason),
                        prev,
                    )
                prev = hashlib.sha256(raw).hexdigest()
                last_type = obj["type"]
                records += 1
        except FormatError as exc:
            link = BrokenLink(None, exc.line or number, exc.offset or offset, str(exc))
            return VerifyReport(where, records, chained, False, link, prev)
    # An unfinished final line (a crash mid-write) is ignored like every reader
    # ignores it; the file is then simply not sealed.
    return VerifyReport(where, records, chained, last_type == ev.SESSION_CLOSE, None, prev)
