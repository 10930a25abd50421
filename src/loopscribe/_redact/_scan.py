"""The scan of a record line: token runs, escapes, spans, and the envelope around data."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .. import events as ev
from ._base import _REPLACEMENT

_RUN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_RUNS = bytes(0x61 if c in _RUN_BYTES else 0x20 for c in range(256))
"""Maps token characters to ``a`` and everything else to a space, for the run scan."""
_MIN_RUN = 12
"""The shortest token run a shape can start with (``SessionToken``)."""
_RUN = b"a" * _MIN_RUN
_NEXT_RUN = b" " + _RUN
"""A space and a run's length of token bytes: where the next run begins, one byte on."""
_NOT_TOKEN = frozenset(range(256)) - frozenset(_RUN_BYTES)
_BACKSLASH = 0x5C
_ESCAPE_LETTERS = frozenset(b"nrtbf")
_HEX_DIGITS = frozenset(b"0123456789ABCDEFabcdef")
_ESCAPE_STARTS = frozenset(b"\\%[;")
"""Bytes before a run whose first bytes may end an escape (``\\n``, ``%3D``, a
terminal's ``\\u001b[32m``): the token may begin after them."""
_ANSI_ENDS = frozenset(b"[;")
_WORD_GAPS = frozenset(b" \t+.%")
"""What stands before a token run that a word shape (``Bearer``, ``ya29.``) may
start: a blank (``%20`` too) or a dot; other runs are not looked behind."""
_BLANKS = frozenset(b" \t+")
_HOST_WINDOW = 512
"""How far before ``@`` a URL's scheme is looked for."""


_TAIL = re.compile(
    rb'(?:,"messages":[0-9]+(?:,"compaction":[0-9]+)?)?(?:,"prev":"[0-9a-f]*")?}\n?\Z'
)
"""The envelope keys after ``data`` (see ``Session._envelope``)."""
_TYPE = re.compile(rb'"type":"([^"\\]*)"')
_LIFECYCLE_TEXT = (ev.SESSION_START, ev.RUN_START, ev.RUN_RESUME, ev.RUN_CLOSE, ev.SESSION_CLOSE)
_LIFECYCLE = frozenset(kind.encode() for kind in _LIFECYCLE_TEXT)
"""Records whose data is the file's own structure (format version, sync marks)."""
_HOST_FIELDS = ("metadata", "actor")
"""What a host gives a lifecycle record, scrubbed like any record's data."""
_MIN_KEY_SECRET = 16
"""A key is replaced when it is a secret as a whole and this long: a token used as a key,
never a field name (``tool``, ``arguments``) someone named as a secret."""
_KEY_WINDOW = 256
"""How far around a match a key's quotes are looked for (a longer key is taken as text)."""


# -- escapes and spans ------------------------------------------------------------


def _backslashes_before(line: bytes, i: int, lo: int = 0) -> int:
    n = 0
    while i - n - 1 >= lo and line[i - n - 1] == _BACKSLASH:
        n += 1
    return n


def _escape_around(line: bytes, i: int) -> tuple[int, int] | None:
    """The escape sequence (``\\n``, ``\\\\``, ``\\u00e9``) that ``i`` falls strictly inside."""
    if i <= 0 or i >= len(line):
        return None
    if _backslashes_before(line, i) % 2:
        begin = i - 1
        return begin, begin + (6 if line[i] == 0x75 else 2)
    for back in range(1, 5):  # inside the hex digits of \uXXXX
        u = i - back
        if u >= 1 and line[u] == 0x75 and _backslashes_before(line, u) % 2:
            return u - 1, u + 5
    return None


def _snap(line: bytes, start: int, end: int) -> tuple[int, int]:
    """Move a span's ends out of escape sequences, so replacing it leaves valid JSON.

    The start moves forward past an escape it cuts (the escape is not the
    secret's), the end forward to the end of one it cuts.
    """
    around = _escape_around(line, start)
    if around is not None:
        start = around[1]
    around = _escape_around(line, end)
    if around is not None:
        end = around[1]
    return start, max(start, end)


def _replace(line: bytes, spans: list[tuple[int, int]]) -> bytes:
    """``line`` with each span (merged where they touch) replaced by ``[REDACTED]``."""
    spans.sort()
    out: list[bytes] = []
    done = 0
    merged_end = -1
    for start, end in spans:
        if start <= merged_end:
            merged_end = max(merged_end, end)
            continue
        if merged_end >= 0:
            out.append(_REPLACEMENT)
            done = merged_end
        out.append(line[done:start])
        merged_end = end
    if merged_end >= 0:
        out.append(_REPLACEMENT)
        done = merged_end
    out.append(line[done:])
    return b"".join(out)


def _closing_quote(line: bytes, i: int, limit: int) -> int:
    """The first quote at or after ``i`` (before ``limit``) that ends a JSON string; -1 if none."""
    q = line.find(b'"', i, limit)
    while q >= 0 and _backslashes_before(line, q) % 2:
        q = line.find(b'"', q + 1, limit)
    return q


def _inside_key(line: bytes, start: int, end: int) -> bool:
    """Whether a span lies in an object key without being all of it.

    Keys are the structure of a record (``format_version``, ``result``); a
    secret as a whole key of 16 characters or more (a token used as a key) is
    replaced, a key is never renamed in part.
    """
    close = _closing_quote(line, end, end + _KEY_WINDOW)
    if close < 0 or line[close + 1 : close + 2] != b":":
        return False
    opening = line.rfind(b'"', max(0, start - _KEY_WINDOW), start)
    while opening >= 0 and _backslashes_before(line, opening) % 2:
        opening = line.rfind(b'"', max(0, start - _KEY_WINDOW), opening)
    return not (opening == start - 1 and close == end and end - start >= _MIN_KEY_SECRET)


def _span(match: re.Match[bytes]) -> tuple[int, int]:
    """What a match removes: its ``secret`` group when the pattern has one."""
    if "secret" in match.re.groupindex and match.start("secret") >= 0:
        return match.span("secret")
    return match.span()


def _ending(
    line: bytes,
    lo: int,
    at: int,
    end: int,
    begins: tuple[bytes, ...],
    tried: tuple[_Tried, ...],
    found: list[tuple[int, int]],
) -> None:
    """Try shapes that end at ``end`` (``user:password@``) from the last colons before ``at``."""
    floor = max(lo, at - _HOST_WINDOW)
    before = at
    for _ in range(3):  # the scheme's colon, past the user's and one in a password
        before = max(line.rfind(begin, floor, before) for begin in begins)
        if before < 0:
            return
        for t in tried:
            m = t.pattern.match(line, before)
            if m is not None and m.end() == end:
                t.keep(m, found)
                return


@dataclass(frozen=True, slots=True)
class _Tried:
    """A token shape's compiled pattern, tried at chosen places."""

    pattern: re.Pattern[bytes]
    check: Callable[[bytes], bool] | None

    def at(self, line: bytes, pos: int, found: list[tuple[int, int]]) -> None:
        m = self.pattern.match(line, pos)
        if m is not None:
            self.keep(m, found)

    def keep(self, m: re.Match[bytes], found: list[tuple[int, int]]) -> None:
        span = _span(m)
        if self.check is None or self.check(m.string[span[0] : span[1]]):
            found.append(span)


def _cases(text: bytes) -> list[bytes]:
    """``text`` in every mix of upper and lower case of its letters."""
    forms = [b""]
    for c in text.lower():
        variants = {c, bytes([c]).upper()[0]}
        forms = [f + bytes([v]) for f in forms for v in variants]
    return forms


def _word_end(line: bytes, i: int, lo: int) -> int:
    """Where the word before the run at ``i`` ends: past one dot, or past blanks."""
    k = i - 1 if line[i - 1] == 0x25 else i  # %20tok...: the run begins inside %20
    if line[k - 1] == 0x2E:
        return k - 1
    while k > lo:
        if line[k - 1] in _BLANKS:
            k -= 1
        elif line[k - 3 : k] == b"%20":
            k -= 3
        else:
            break
    return k


def _run_starts(line: bytes, i: int, lo: int) -> tuple[int, ...]:
    """Where a token may begin in the run at ``i``: there, or after the escape it begins with."""
    if i <= lo:
        return (i,)
    before = line[i - 1]
    if before == 0x25:  # %3Dsk-...: the token after a URL-encoded byte
        hex_pair = line[i] in _HEX_DIGITS and line[i + 1 : i + 2].isalnum()
        return (i, i + 2) if hex_pair and line[i + 1] in _HEX_DIGITS else (i,)
    if before in _ANSI_ENDS:  # \u001b[32msk-... or \u001b[Ksk-...: after the code
        k = line.find(b"m", i, i + 4)
        if k > i and line[i:k].isdigit():
            return (i, k + 1)
        return (i, i + 1) if line[i] == 0x4B else (i,)
    if before != _BACKSLASH:
        return (i,)
    letter = line[i]
    if letter == 0x75:  # \u001b: the token after the escape code
        return (i, i + 5)
    if letter in _ESCAPE_LETTERS:
        return (i, i + 1)
    return (i,)
