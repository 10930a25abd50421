"""Redaction of application secrets from session files.

Credentials in request config are always removed (see ``_freeze``). A
secret can still reach a record through a tool argument, a tool output or an
exception message. Give the Session a :class:`Redactor` naming the values and
patterns to scrub; it runs on each encoded line, just before it is written,
so nothing it matches reaches the file, the observers, or any span.

A known secret is matched in every form it takes inside a record line: as
the codec writes it in a string, ``\\uXXXX``-escaped (as ``json.dumps``
writes non-ASCII), escaped once more (JSON text held in a string, such as a
tool's raw output), and base64-encoded at any alignment (an
``Authorization: Basic`` header of ``user:secret``), where the whole base64
token is removed.

The :data:`COMMON_PATTERNS` are not applied unless given: searching a line
for them costs about as much as encoding it (see the README's redaction
figures), and the record path has a speed target. Pass them when tool
output or error text may carry provider tokens.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable

import orjson

REPLACEMENT = "[REDACTED]"

LineRedactor = Callable[[bytes], bytes]
"""Gets one encoded record line (JSON, ending in ``\\n``); returns it, scrubbed."""

COMMON_PATTERNS: tuple[str, ...] = (
    r"sk-[A-Za-z0-9_-]{16,}",  # OpenAI, Anthropic (sk-ant-...) keys
    r"AKIA[0-9A-Z]{16}",  # AWS access key IDs
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"[Bb][Ee][Aa][Rr][Ee][Rr]\s+[A-Za-z0-9._~+/-]{16,}=*",  # Authorization: Bearer ...
)
"""Token shapes that are secrets wherever they appear."""

_B64_CHARS = rb"[A-Za-z0-9+/_-]*"
_MIN_B64_CORE = 6
"""Bytes of a secret that must line up in base64 before its encoded form is matched."""


def _escaped_forms(secret: str) -> set[bytes]:
    """The byte strings ``secret`` can appear as inside an encoded record line."""
    once = {orjson.dumps(secret)[1:-1], json.dumps(secret)[1:-1].encode()}
    # JSON text kept in a string (a raw tool output) is escaped a second time.
    twice = {orjson.dumps(form.decode())[1:-1] for form in once}
    return {form for form in once | twice if form}


def _base64_cores(secret: str) -> set[bytes]:
    """Base64 of the secret's whole 3-byte groups, at each of the three alignments."""
    raw = secret.encode()
    cores: set[bytes] = set()
    for skip in range(3):
        part = raw[skip:]
        part = part[: len(part) // 3 * 3]
        if len(part) >= _MIN_B64_CORE:
            std = base64.b64encode(part)
            cores.add(std)
            cores.add(std.translate(bytes.maketrans(b"+/", b"-_")))
    return cores


class Redactor:
    """Replace secret values and patterns in record lines with ``[REDACTED]``.

    Example::

        redact = Redactor([os.environ["OPENAI_API_KEY"]], patterns=COMMON_PATTERNS)
        Session.create(path, redact=redact)

    Args:
        secrets: Exact values to remove, in each form they take in a line:
            JSON-escaped (quotes, backslashes, non-ASCII), escaped twice, and
            inside base64 (Basic auth) when at least 8 bytes long.
        patterns: Regular expressions; a match must not span JSON syntax,
            so write patterns for token-like values, not for quoted text.
    """

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        given = [s for s in secrets if s]
        forms = set().union(*(_escaped_forms(s) for s in given)) if given else set()
        self._secrets = tuple(sorted(forms, key=len, reverse=True))
        cores = set().union(*(_base64_cores(s) for s in given)) if given else set()
        self._cores = tuple(sorted(cores, key=len, reverse=True))
        self._b64 = (
            re.compile(
                _B64_CHARS
                + b"(?:"
                + b"|".join(re.escape(c) for c in self._cores)
                + b")"
                + _B64_CHARS
                + b"=*"
            )
            if cores
            else None
        )
        # One regex per pattern: an alternation would lose each one's literal
        # prefix, which lets the engine skip ahead instead of trying every byte.
        self._patterns = tuple(re.compile(p.encode()) for p in patterns)
        self._replacement = REPLACEMENT.encode()

    def __call__(self, line: bytes) -> bytes:
        """Scrub one line."""
        replacement = self._replacement
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, replacement)
        if self._b64 is not None:
            for core in self._cores:
                if core in line:
                    line = self._b64.sub(replacement, line)
                    break
        for pattern in self._patterns:
            line = pattern.sub(replacement, line)
        return line
