"""The faster Redactor scrubs every line to the same bytes as the one before it.

``tests/redact_reference.py`` is the Redactor as it was; the lines here hold
secrets and token shapes in every form a record carries them (escaped,
URL-encoded, HTML, shell, base64, behind escapes and color codes), cut and
glued at random, and real transcript lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopscribe import COMMON_PATTERNS, Redactor
from loopscribe import events as ev

from . import redact_reference as reference
from .secret_forms import KNOWN_SECRETS, SHAPES, encodings

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts"

_SECRETS = list(KNOWN_SECRETS.values())
_SHAPE_SECRETS = [secret for _, parts in SHAPES.values() for secret in parts]
_PAIRS = [
    (Redactor(_SECRETS, patterns=COMMON_PATTERNS), reference.Redactor(_SECRETS, COMMON_PATTERNS)),
    (Redactor(patterns=COMMON_PATTERNS), reference.Redactor(patterns=COMMON_PATTERNS)),
    (Redactor(_SECRETS[:2]), reference.Redactor(_SECRETS[:2])),
    (
        Redactor([_SHAPE_SECRETS[0]], patterns=[*COMMON_PATTERNS, r"tok-[0-9]{6}"]),
        reference.Redactor([_SHAPE_SECRETS[0]], patterns=[*COMMON_PATTERNS, r"tok-[0-9]{6}"]),
    ),
]
"""New and old Redactors built alike: known secrets, the shapes, both, a pattern of one's own."""

_FORMS = sorted(
    {
        form
        for text in [*_SECRETS, *_SHAPE_SECRETS, *(sample for sample, _ in SHAPES.values())]
        for form in encodings(text).values()
    }
)
"""Every secret and shape sample in every encoding."""


def _nth_form(i: int) -> str:
    return _FORMS[i]


_form = st.integers(0, len(_FORMS) - 1).map(_nth_form)
"""One of them (drawn by index: Hypothesis would print the whole list as the strategy)."""

_GLUE = [
    " ",
    "  ",
    "\t",
    "\n",
    "\\n",
    "\\\\n",
    "\\u001b[32m",
    "\\u001b[K",
    "%3D",
    "%20",
    "+",
    ".",
    "=",
    ": ",
    '"',
    '\\"',
    "'",
    "/",
    "\\/",
    "?",
    "&",
    "&amp;",
    "@",
    "%40",
    "%3A",
    "://",
    "%3A%2F%2F",
    "Bearer ",
    "bearer%20",
    "Basic ",
    "ya29.",
    "Authorization: ",
    "aws_secret_access_key=",
    "SessionToken: ",
    "?token=",
    "%26password%3D",
    "https://user:",
    "-----BEGIN RSA PRIVATE KEY-----\n",
    "-----END RSA PRIVATE KEY-----",
    "hooks.slack.com/services/",
    "[REDACTED]",
    "cache_creation_input_tokens",
    "sk-",
    "ghp_",
]
"""What stands around a secret: escapes, encoded bytes, the words and names shapes look for."""

_piece = st.one_of(
    _form,
    st.sampled_from(_GLUE),
    st.text(alphabet="abcXYZ019_-+/=%\\\"' .:@?&;[{}\n\u00e9\U0001f511", max_size=12),
)
_text = st.lists(_piece, max_size=12).map("".join)
"""Forms and glue joined, then cut anywhere: a secret whole, in part, or across two values."""


@st.composite
def _cut(draw: st.DrawFn) -> str:
    text = draw(_text)
    start = draw(st.integers(0, len(text)))
    return text[start:]


_value: st.SearchStrategy[Any] = st.recursive(
    st.one_of(_text, _cut(), st.integers(-(2**63), 2**63 - 1), st.none()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(_text, _form), inner, max_size=4),
    ),
    max_leaves=8,
)
_kind = st.sampled_from(["tool_exec_end", "model_call_end", "note", ev.SESSION_START, ev.RUN_CLOSE])


def record_line(data: Any, kind: str) -> bytes:
    """A record line as the session writes it, holding ``data``."""
    envelope = {"session_id": "0" * 32, "seq": 3, "type": kind, "run_id": "1" * 16, "ts": "t"}
    return orjson.dumps({**envelope, "data": data}, option=orjson.OPT_APPEND_NEWLINE)


def assert_same(line: bytes) -> None:
    for new, old in _PAIRS:
        assert new(line) == old(line), line


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_value, kind=_kind)
def test_record_lines_scrub_to_the_same_bytes(data: Any, kind: str) -> None:
    """Secrets in every encoding, inside any JSON value of a record, come out the same."""
    assert_same(record_line({"output": data}, kind))
    assert_same(record_line(data, kind))


@settings(max_examples=300, deadline=None)
@given(text=_text)
def test_bare_text_scrubs_to_the_same_bytes(text: str) -> None:
    """A line that is not a record (a hook may be given any bytes) comes out the same."""
    raw = text.encode("utf-8", "surrogatepass")
    assert_same(raw)
    assert_same(raw + b"\n")
    assert_same(json.dumps(text).encode())


def test_real_transcript_lines_scrub_to_the_same_bytes() -> None:
    """Every line of the test transcripts, as a record's data, with and without a leak in it."""
    leak = "key sk-proj-Zx9Kq2Lm7Np4Rt8Vw1YbQ3 via postgres://u:pw-4821@db/x Bearer abcdefghijklm"
    lines = 0
    for path in sorted(TRANSCRIPTS.rglob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            data = orjson.loads(raw)
            assert_same(record_line(data, "note"))
            assert_same(record_line({"leak": leak, "line": data}, "tool_exec_end"))
            lines += 1
    assert lines > 500
