"""Redaction of application secrets from session files.

Credentials in request config are always removed (see ``_freeze``). A
secret can still reach a record through a tool argument, a tool output or an
exception message. Give the Session a :class:`Redactor` naming the values and
patterns to scrub; it runs on each encoded line, just before it is written,
so nothing it matches reaches the file, the observers, or any span.
"""

from __future__ import annotations

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


class Redactor:
    """Replace secret values and patterns in record lines with ``[REDACTED]``.

    Example::

        redact = Redactor([os.environ["OPENAI_API_KEY"]], patterns=COMMON_PATTERNS)
        Session.create(path, redact=redact)

    Args:
        secrets: Exact values to remove (matched as they appear inside JSON
            strings, so quotes and backslashes in them are handled).
        patterns: Regular expressions; a match must not span JSON syntax,
            so write patterns for token-like values, not for quoted text.
    """

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        # A value is stored JSON-escaped: match that form.
        encoded = {orjson.dumps(s)[1:-1] for s in secrets if s}
        self._secrets = tuple(sorted(encoded, key=len, reverse=True))
        self._pattern = (
            re.compile(b"|".join(f"(?:{p})".encode() for p in patterns)) if patterns else None
        )
        self._replacement = REPLACEMENT.encode()

    def __call__(self, line: bytes) -> bytes:
        """Scrub one line."""
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, self._replacement)
        if self._pattern is not None:
            line = self._pattern.sub(self._replacement, line)
        return line
