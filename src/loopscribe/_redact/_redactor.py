"""The Redactor: scrubs secret values and token shapes from record lines."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ._base import REPLACEMENT
from ._environ import _credential_values
from ._known import _b64_token, _Known, _known
from ._scan import (
    _BLANKS,
    _ESCAPE_STARTS,
    _HOST_FIELDS,
    _LIFECYCLE,
    _LIFECYCLE_TEXT,
    _MIN_KEY_SECRET,
    _NEXT_RUN,
    _NOT_TOKEN,
    _RUN,
    _RUNS,
    _TAIL,
    _TYPE,
    _WORD_GAPS,
    _cases,
    _closing_quote,
    _ending,
    _inside_key,
    _replace,
    _run_starts,
    _snap,
    _span,
    _Tried,
    _word_end,
)
from ._shapes import _SHAPE_OF, COMMON_PATTERNS

# -- the redactor -----------------------------------------------------------------


class Redactor:
    """Replace secret values and patterns in record lines with ``[REDACTED]``.

    Example::

        redact = Redactor([os.environ["OPENAI_API_KEY"]], patterns=COMMON_PATTERNS)
        Session.create(path, redact=redact)

    or, for the common token shapes and every credential in the environment,
    ``Session.create(path, redact=Redactor.default())``.

    Args:
        secrets: Exact values to remove, in each form they take in a line:
            JSON-escaped at any depth (quotes, backslashes, ``\\/``,
            ``\\uXXXX``), URL- or form-encoded, shell-escaped, as HTML
            character references, and inside base64 (Basic auth) when at
            least 8 bytes long. Empty values are ignored.
        patterns: Regular expressions (:data:`COMMON_PATTERNS`, or your
            own); a pattern with a group named ``secret`` has only that group
            replaced. A pattern should match token-like text within one JSON
            string: a match that cuts through JSON syntax makes the line be
            scrubbed value by value, which is slower.
    """

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        known: dict[bytes, _Known] = {}
        for secret in secrets:
            if secret:
                for k in _known(secret):
                    known.setdefault(k.pattern.pattern, k)
        # Base64 cores last: a text form found first is removed on its own.
        self._known = tuple(sorted(known.values(), key=lambda k: k.base64))
        heads: dict[bytes, list[_Tried]] = {}
        words: list[tuple[bytes, _Tried]] = []
        gated: list[tuple[bytes, _Tried]] = []
        starts: dict[bytes, list[_Tried]] = {}
        ends: dict[tuple[bytes, bytes], list[_Tried]] = {}
        needs: dict[tuple[bytes, bytes], tuple[bytes, ...] | None] = {}
        own: list[re.Pattern[bytes]] = []
        for pattern in dict.fromkeys(patterns):
            compiled = re.compile(pattern.encode())
            shape = _SHAPE_OF.get(pattern)
            if shape is None:
                own.append(compiled)
                continue
            tried = _Tried(compiled, shape.check)
            for head in shape.heads:
                heads.setdefault(head.encode(), []).append(tried)
            if shape.word:
                words.append((shape.word.encode(), tried))
            if shape.gate:
                gated.append((shape.gate.encode(), tried))
            for needle in shape.at:
                starts.setdefault(needle.encode(), []).append(tried)
            if shape.until is not None:
                end, begin = shape.until
                key = (end.encode(), begin.encode())
                ends.setdefault(key, []).append(tried)
                had = needs.get(key, ())
                literals = tuple(n.encode() for n in shape.needs)
                needs[key] = None if had is None or not literals else (*had, *literals)
        self._heads = {k: tuple(v) for k, v in heads.items()}
        self._words = tuple(words)
        self._head_forms = frozenset(f for head in self._heads for f in _cases(head))
        self._plain_before = _NOT_TOKEN - _ESCAPE_STARTS - (_WORD_GAPS if words else set())
        """Bytes before a run after which only its first three bytes can start a shape."""
        self._gaps = _WORD_GAPS - _ESCAPE_STARTS if words else frozenset()
        """Bytes before a run after which a word shape is tried when a word can end there."""
        self._word_tails = _BLANKS | {0x30} | {c for w, _ in words for c in w[-1:] + w[-1:].upper()}
        """What stands two bytes before a run when a word ends before it: a word's last
        letter, or more blanks (``%20`` ends in ``0``)."""
        self._gated = tuple(gated)
        # Plain bytes are found with memchr; "%XX" ones from the line's "%" bytes.
        self._starts = {k: tuple(v) for k, v in starts.items() if len(k) == 1}
        self._ends = {k: tuple(v) for k, v in ends.items() if len(k[0]) == 1}
        self._end_needs = needs
        self._encoded_starts = {k: tuple(v) for k, v in starts.items() if len(k) > 1}
        self._encoded_ends = {k: tuple(v) for k, v in ends.items() if len(k[0]) > 1}
        self._own = tuple(own)

    @classmethod
    def default(
        cls,
        secrets: Iterable[str] = (),
        patterns: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> Redactor:
        """The redaction loopscribe recommends, and imports apply unless told otherwise.

        :data:`COMMON_PATTERNS`, plus the value of every credential-named
        environment variable, plus what you
        name.

        Args:
            secrets: More exact values to remove.
            patterns: More regular expressions.
            environ: The environment to read (default ``os.environ``).

        Returns:
            A Redactor to pass as ``redact=``.
        """
        found = _credential_values(os.environ if environ is None else environ)
        return cls([*found, *secrets], patterns=[*COMMON_PATTERNS, *patterns])

    def __call__(self, line: bytes) -> bytes:
        """Scrub one record line; the same object comes back when nothing matched."""
        lo = line.find(b',"data":')
        lo = 0 if lo < 0 else lo + 8
        spans = self._spans(line, lo)
        if not spans:
            return line
        kind = _TYPE.search(line, 0, lo) if lo else None
        if kind is not None and kind.group(1) in _LIFECYCLE:
            return self._by_value(line, line)
        tail = _TAIL.search(line, max(lo, len(line) - 160))
        hi = tail.start() if tail is not None else len(line)
        spans = [
            (max(s, lo), min(e, hi))
            for s, e in spans
            if s < hi and e > lo and not _inside_key(line, s, e)
        ]
        if not spans:
            return line
        if any(_closing_quote(line, s, e) >= 0 for s, e in spans):
            return self._by_value(line, line)  # a match spans JSON syntax: value by value
        scrubbed = _replace(line, spans)
        try:
            orjson.loads(scrubbed)
        except orjson.JSONDecodeError:
            return self._by_value(line, scrubbed)
        return scrubbed

    def _scrub(self, value: Any) -> Any:
        """A JSON value (as ``orjson`` reads it) with the secrets removed from its strings.

        Numbers, booleans and ``null`` stay; a key is replaced only when it is
        a secret as a whole, 16 characters or more (a token used as a key),
        never renamed in part.
        """
        if isinstance(value, dict):
            return {self._scrub_key(k): self._scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        if not isinstance(value, str):
            return value
        raw = orjson.dumps(value)
        spans = self._spans(raw, 0)
        if not spans:
            return value
        try:
            out = orjson.loads(_replace(raw, spans))
        except orjson.JSONDecodeError:
            return REPLACEMENT
        return out if isinstance(out, str) else REPLACEMENT

    def _scrub_key(self, key: str) -> str:
        raw = orjson.dumps(key)
        whole = (1, len(raw) - 1)
        if len(key) < _MIN_KEY_SECRET or whole not in self._spans(raw, 0):
            return key
        return REPLACEMENT

    def _by_value(self, line: bytes, scrubbed: bytes) -> bytes:
        """Scrub the data of a line value by value.

        For a match that cut through JSON syntax, and for loopscribe's own
        records (``session_start``, ``run_close``, ...), whose fields are the
        file's structure: only what the host gave them (``metadata``,
        ``actor``) is scrubbed there.
        """
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return scrubbed  # not JSON to begin with: what was found is gone all the same
        if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
            obj = self._scrub(obj)
        elif obj.get("type") in _LIFECYCLE_TEXT:
            obj["data"] = self._scrub_own(obj["data"])
        else:
            obj["data"] = self._scrub(obj["data"])
        newline = orjson.OPT_APPEND_NEWLINE if line.endswith(b"\n") else 0
        return orjson.dumps(obj, option=newline)

    def _scrub_own(self, data: dict[str, Any]) -> dict[str, Any]:
        """A lifecycle record's data: its host-given parts scrubbed, the rest kept."""
        out = dict(data)
        for name in _HOST_FIELDS:
            if name in out:
                out[name] = self._scrub(out[name])
        if isinstance(out.get("run_start"), dict):  # run_resume repeats the run's start
            out["run_start"] = self._scrub_own(out["run_start"])
        return out

    # -- finding ------------------------------------------------------------------

    def _spans(self, line: bytes, lo: int) -> list[tuple[int, int]]:
        """Every span of ``line`` from ``lo`` on that holds a secret, snapped to whole escapes."""
        found: list[tuple[int, int]] = []
        for known in self._known:
            if known.anchor and line.find(known.anchor, lo) < 0:
                continue
            for m in known.pattern.finditer(line, lo):
                if known.base64:
                    found.append(_b64_token(line, m.start(), m.end(), lo))
                else:
                    found.append(m.span())
        if self._heads or self._words:
            self._runs(line, lo, found)
        for needle, tried in self._starts.items():
            p = line.find(needle, lo)
            while p >= 0:
                for t in tried:
                    t.at(line, p, found)
                p = line.find(needle, p + 1)
        for (needle, begin), tried in self._ends.items():
            p = line.find(needle, lo)
            literals = self._end_needs[needle, begin] if p >= 0 else None
            if literals and all(line.find(n, lo) < 0 for n in literals):
                continue  # no match can begin in this line
            while p >= 0:
                _ending(line, lo, p, p + 1, (begin,), tried, found)
                p = line.find(needle, p + 1)
        if (self._encoded_starts or self._encoded_ends) and line.find(b"%", lo) >= 0:
            self._encoded(line, lo, found)
        for gate, t in self._gated:
            if line.find(gate, lo) >= 0:
                for m in t.pattern.finditer(line, lo):
                    t.keep(m, found)
        for pattern in self._own:
            found.extend(_span(m) for m in pattern.finditer(line, lo))
        if not found:
            return found
        snapped = (_snap(line, s, e) for s, e in found)
        return [(s, e) for s, e in snapped if e > s]

    def _runs(self, line: bytes, lo: int, found: list[tuple[int, int]]) -> None:
        """Try the token shapes where a run of token characters starts like one.

        One ``translate`` and a search for long runs of ``a`` find the runs;
        a run is tried where it begins, and after an escape's letter it
        begins with (``\\nsk-…``, ``\\u001bsk-…``: the token after a
        newline or an escape code). A word shape (``Bearer``, ``ya29``) is
        tried where its word stands right before the run, across blanks
        (``Bearer  tok…``, ``Bearer%20tok…``) or a dot (``ya29.tok…``).

        Most runs are neither (a key such as ``cache_read_input_tokens``
        after a quote, a word after a space that follows no word a shape
        looks for): one slice and one set lookup pass them by, and only the
        rest take :meth:`_run`, the full check.
        """
        runs = line.translate(_RUNS)
        find = runs.find
        i = find(_RUN, lo)
        if i < 0:
            return
        if i - 2 < lo:
            self._run(line, i, lo, found)
            i = find(_NEXT_RUN, i) + 1
            if not i:
                return
        starts = self._head_forms
        plain = self._plain_before
        gaps = self._gaps
        tails = self._word_tails
        heads = self._heads.get
        run = self._run
        while True:
            before = line[i - 1]
            if before in plain or (before in gaps and line[i - 2] not in tails):
                if line[i : i + 3] in starts:
                    for t in heads(line[i : i + 3].lower(), ()):
                        t.at(line, i, found)
            else:
                run(line, i, lo, found)
            # The next run begins one byte after the next space that a run's length of
            # token bytes follows: that space ends this run, and no run starts before it.
            i = find(_NEXT_RUN, i) + 1
            if not i:
                return

    def _run(self, line: bytes, i: int, lo: int, found: list[tuple[int, int]]) -> None:
        """Try the shapes at the run of token characters that begins at ``i``."""
        heads = self._heads.get
        words = self._words
        before = line[i - 1] if i > lo else 0x20
        if before in _ESCAPE_STARTS:
            for start in _run_starts(line, i, lo):
                for t in heads(line[start : start + 3].lower(), ()):
                    t.at(line, start, found)
        else:
            for t in heads(line[i : i + 3].lower(), ()):
                t.at(line, i, found)
        if words and before in _WORD_GAPS:
            stop = _word_end(line, i, lo)
            for word, t in words:
                if line[stop - len(word) : stop].lower() == word:
                    t.at(line, stop - len(word), found)

    def _encoded(self, line: bytes, lo: int, found: list[tuple[int, int]]) -> None:
        """Try the shapes of URL-encoded text at each ``%XX`` that starts or ends one."""
        p = line.find(b"%", lo)
        while p >= 0:
            code = line[p : p + 3].upper()
            for t in self._encoded_starts.get(code, ()):
                t.at(line, p, found)
            for (end, begin), tried in self._encoded_ends.items():
                if code == end:
                    _ending(line, lo, p, p + 3, (begin, begin.lower()), tried, found)
            p = line.find(b"%", p + 1)
