"""What redaction writes in place of a secret, and what a line redactor is."""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "[REDACTED]"
_REPLACEMENT = REPLACEMENT.encode()

LineRedactor = Callable[[bytes], bytes]
"""Gets one encoded record line (JSON, ending in ``\\n``); returns it, scrubbed."""
