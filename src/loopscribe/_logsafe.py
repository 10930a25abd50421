"""Log lines without endpoint credentials.

The OpenTelemetry exporters and the HTTP libraries under them log the URL
they failed to reach, and an exception's text often holds it too. An OTLP
endpoint can carry credentials in its user info (``https://user:pw@host``)
or its query (``?api-key=...``), and ``OTEL_EXPORTER_OTLP_HEADERS`` holds
tokens. :class:`CredentialFilter` rewrites each log record's text so none of
them is printed; :func:`install` puts it on the loggers those libraries use
and on the handlers loopscribe itself configures (the CLI's).
"""

from __future__ import annotations

import logging
import os
import re
import urllib.parse

REPLACEMENT = "[REDACTED]"

# User info runs to the *last* "@" before the path: a password may hold "@" itself.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s'\"<>]*@")
_SECRET_PARAM = re.compile(
    r"(?i)([?&#;](?:[\w.-]*?(?:key|token|secret|password|passwd|pwd|auth|sig|signature|"
    r"credential|session)[\w.-]*)=)[^&#\s'\"<>]+"
)
_HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
_MIN_SECRET_CHARS = 4

LOGGERS = (
    "opentelemetry",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk._shared_internal",
    "urllib3.connectionpool",
    "urllib3.util.retry",
    "requests",
    "grpc",
)
"""Loggers whose records may name the endpoint; a logger's filter sees only its own records."""


def _header_values() -> list[str]:
    """The values of the configured OTLP headers (tokens), longest first."""
    values: set[str] = set()
    for name in _HEADER_VARIABLES:
        for item in os.environ.get(name, "").split(","):
            _, eq, value = item.partition("=")
            value = urllib.parse.unquote(value.strip()) if eq else ""
            for part in (value, *value.split()):
                if len(part) >= _MIN_SECRET_CHARS:
                    values.add(part)
    return sorted(values, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` without URL user info, secret query parameters and OTLP header values."""
    for value in _header_values():
        text = text.replace(value, REPLACEMENT)
    if "://" in text:
        text = _USERINFO.sub(rf"\1{REPLACEMENT}@", text)
    if "=" in text:
        text = _SECRET_PARAM.sub(rf"\1{REPLACEMENT}", text)
    return text


def display_url(url: str) -> str:
    """``url`` as loopscribe shows and stores it: no user info, no secret query values.

    Stricter than :func:`scrub` on free text: everything from ``://`` to the
    last ``@`` before the query is user info, so a password holding ``/``
    or ``@`` is hidden whole. A URL shown this way names the same place.
    """
    scheme, sep, rest = url.partition("://")
    if sep:
        head, mark, tail = rest.partition("?") if "?" in rest else rest.partition("#")
        if "@" in head:
            head = f"{REPLACEMENT}@{head.rpartition('@')[2]}"
        url = f"{scheme}{sep}{head}{mark}{tail}"
    return scrub(url)


def url_secrets(url: str) -> list[str]:
    """What :func:`display_url` hides of ``url`` (user info, its parts, secret query values).

    Each also percent-decoded, longest first: a backend's error message may
    quote any of them on its own (an S3 client naming ``KEY:SECRET@bucket``
    as a bad bucket name), and :func:`hide` takes them out of such text.
    """
    found: set[str] = set()
    _scheme, sep, rest = url.partition("://")
    if sep:
        head = rest.split("?", 1)[0].split("#", 1)[0]
        if "@" in head:
            info = head.rpartition("@")[0]
            # A parser that misreads the URL quotes a piece of it: each piece too.
            found.update((info, *info.split(":", 1), *re.split(r"[:/@]", info)))
        found.update(m.group(0).split("=", 1)[1] for m in _SECRET_PARAM.finditer(url))
    found |= {urllib.parse.unquote(value) for value in found}
    return sorted((v for v in found if len(v) >= _MIN_SECRET_CHARS), key=len, reverse=True)


def hide(text: str, secrets: list[str]) -> str:
    """:func:`scrub` ``text``, and replace each of ``secrets`` (from :func:`url_secrets`)."""
    for value in secrets:
        text = text.replace(value, REPLACEMENT)
    return scrub(text)


class CredentialFilter(logging.Filter):
    """A logging filter that rewrites each record's text with :func:`scrub`; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place (message, arguments and exception text)."""
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to the handler to report
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            # Formatters print the exception's text: render it now, scrubbed.
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, None
            record.msg = f"{record.msg}\n{scrub(text)}"
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True


_FILTER = CredentialFilter()


def install(*handlers: logging.Handler) -> None:
    """Put the filter on the exporters' loggers and on ``handlers`` (idempotent)."""
    for name in LOGGERS:
        target = logging.getLogger(name)
        if _FILTER not in target.filters:
            target.addFilter(_FILTER)
    for handler in handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
