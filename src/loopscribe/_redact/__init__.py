"""Redaction of application secrets from session files.

Credentials in request config are always removed (see ``_freeze``). A
secret can still reach a record through a tool argument, a tool output or an
exception message. Give the Session a :class:`Redactor` naming the values and
patterns to scrub; it runs on each encoded line, just before it is written,
so nothing it matches reaches the file, the observers, or any span.

A known secret is matched in every form it takes inside a record line, in
any mix, per character: as the codec writes it in a string; JSON-escaped
once more or twice (JSON text held in a string, such as a tool's raw output,
or such text quoted again), with ``\\uXXXX`` escapes (``json.dumps``,
Go's ``<>&``) and ``\\/`` for a slash (PHP, some Java serializers);
URL-encoded (``%2F``, ``%2f``, ``%252F`` encoded twice, ``+`` or ``%20``
for a space, a ``+`` decoded to a space); shell-escaped (``\\$``,
``'\\''``); as HTML character references; and base64-encoded at any
alignment, in either alphabet (an ``Authorization: Basic`` header of
``user:secret``), where the whole base64 token is removed.

The :data:`COMMON_PATTERNS` are provider token shapes. A line is first
scanned once for runs of token characters, and only a run that starts like
one of the shapes is tried against its pattern, so the shapes together cost
about one extra pass over the line (see ``benchmarks/redact.py``).
:meth:`Redactor.default` combines them with the values of
credential-named environment variables.

Only the record's ``data`` is scrubbed: the envelope (session, run and
execution IDs, type, time, chain link) is loopscribe's own, and changing it
would break the file. A replacement always leaves a valid line: a match is
widened to whole escape sequences, and if it still cut through JSON syntax
(a number equal to a secret, a user pattern spanning two strings), the
line's data is scrubbed value by value instead.
"""

from ._base import REPLACEMENT, LineRedactor
from ._redactor import Redactor
from ._shapes import COMMON_PATTERNS

__all__ = ["COMMON_PATTERNS", "REPLACEMENT", "LineRedactor", "Redactor"]
