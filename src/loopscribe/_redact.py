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

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from . import events as ev

REPLACEMENT = "[REDACTED]"
_REPLACEMENT = REPLACEMENT.encode()

LineRedactor = Callable[[bytes], bytes]
"""Gets one encoded record line (JSON, ending in ``\\n``); returns it, scrubbed."""

# -- token shapes ---------------------------------------------------------------

_START = (
    r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4})|(?<=%[0-9A-Fa-f]{2})"
    r"|(?<=[\[;][0-9]m)|(?<=[\[;][0-9]{2}m)|(?<=[\[;][0-9]{3}m)|(?<=\[K))"
)
"""Where a token may begin: not inside a longer word, but right after a JSON escape
(``\\nsk-…`` is a newline and a key: a record line holds text escaped), a
URL-encoded byte (``%3Dsk-…``) or a terminal's color code (``\\u001b[32msk-…``)."""
_SLASH = r"(?:\\{0,15}/|%(?:25)?2[Ff])"
"""A slash, maybe JSON-escaped (``\\/``, at any depth) or URL-encoded."""
_QUOTE = r"""(?:\\{0,15}["']|%(?:25)?2[27]|&(?:quot|apos|\#0*3[49]|\#[xX]0*2[27]);)"""
"""A quote, maybe escaped, URL-encoded or an HTML character reference."""
_BLANK = r"(?:[ \t]|%(?:25)?20|\+)"
"""A space, maybe URL- or form-encoded."""
_ASSIGN = rf"(?:{_QUOTE}?{_BLANK}*(?:[:=]|%(?:25)?3[AaDd]){_BLANK}*{_QUOTE}?|{_BLANK}+)"
"""What joins a name to its value: ``=``, ``: ``, ``": "``, a space, maybe encoded."""
_NOT_A_WORD = r"(?![A-Z]?[a-z]{1,20}[.,;:!?]?(?![A-Za-z0-9._~+/=%-]))"
"""What follows is not one ordinary word (``Bearer authentication``, ``Basic setup``)."""
_NOT_A_PLACEHOLDER = r"(?![$<{\[(`]|%(?:25)?(?:24|3[Cc]|7[Bb]|5[Bb]))"
"""A value is not a template placeholder (``${token}``, ``<token>``, ``{token}``)."""
_QUERY_NAMES = (
    r"(?i:password|passwd|pwd|pass|secret|client_secret|token|access_token|refresh_token"
    r"|id_token|auth|auth_token|api_key|apikey|api-key|key|sig|signature|private_token"
    r"|x-amz-signature|x-amz-security-token)"
)
_URL_USER = r"[^\s/@\"'\\:]*"


@dataclass(frozen=True, slots=True)
class _Shape:
    """One token shape: its pattern and how the fast scan finds where to try it."""

    name: str
    pattern: str
    heads: tuple[str, ...] = ()
    """The first three characters (lower case) of the token run a match starts."""
    word: str = ""
    """The word (lower case) shortly before a token run (``bearer``), tried there."""
    gate: str = ""
    """A literal every match holds: the line is searched only when it holds it."""
    at: tuple[str, ...] = ()
    """What a match starts with (``?``, ``&``, ``%3F``): it is tried at each of them."""
    until: tuple[str, str] | None = None
    """What a match ends with, and begins at (``@``, ``:``): tried from the last few of
    the second before each of the first."""
    check: Callable[[bytes], bool] | None = None
    """A last test of the matched secret (Basic credentials decode to ``user:password``)."""
    needs: tuple[str, ...] = ()
    """For an ``until`` shape: what a match begins with, one of them (``:/``); a line
    without any is not searched back from each ``@``."""


def _is_basic(token: bytes) -> bool:
    """Whether a Basic token is base64 of ``user:password`` (not a word after "Basic")."""
    raw = re.sub(rb"%(?:25)?2[Bb]", b"+", re.sub(rb"%(?:25)?2[Ff]", b"/", token))
    raw = re.sub(rb"%(?:25)?3[Dd]", b"=", raw.replace(b"\\", b""))
    raw = raw.rstrip(b"=")
    try:
        decoded = base64.b64decode(raw + b"=" * (-len(raw) % 4), validate=True)
        text = decoded.decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    return ":" in text and text.isprintable()


_PEM_LABEL = rf"(?:[A-Z0-9]+{_BLANK})*PRIVATE{_BLANK}KEY(?:{_BLANK}BLOCK)?-----"
_PEM_BODY = r"(?:[A-Za-z0-9+/= \t\r\n]|\\{1,15}[rnt/]|%(?:25)?(?:2[BbFf0]|3[Dd]|0[AaDd9]))"
_PEM_HEADER = r"(?:[:,.-]|%(?:25)?(?:3[Aa]|2[Cc]))"

_SHAPES: tuple[_Shape, ...] = (
    _Shape(
        "OpenAI and Anthropic API keys: sk-, sk-proj-, sk-svcacct-, sk-ant-api03-, ... "
        "(20 or more characters after sk-, with a digit)",
        _START + r"sk-(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{20,}",
        heads=("sk-",),
    ),
    _Shape(
        "Stripe keys: sk_live_, sk_test_, rk_live_, rk_test_, whsec_",
        _START + r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}|whsec_[A-Za-z0-9]{24,})",
        heads=("sk_", "rk_", "whs"),
    ),
    _Shape(
        "GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_, github_pat_",
        _START + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})",
        heads=("ghp", "gho", "ghu", "ghs", "ghr", "git"),
    ),
    _Shape(
        "GitLab tokens: glpat-, gldt-, glrt-, glptt-, glft-, glsoat-, gloas-",
        _START + r"gl(?:pat|dt|rt|ptt|ft|soat|oas)-[A-Za-z0-9_-]{20,}",
        heads=("glp", "gld", "glr", "glf", "gls", "glo"),
    ),
    _Shape(
        "Slack tokens: xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxe-, xapp-",
        _START + r"(?:xox[abposre]|xapp)-[0-9A-Za-z-]{10,}",
        heads=("xox", "xap"),
    ),
    _Shape(
        "Slack webhook URLs: the path after hooks.slack.com/services/ (or workflows/, triggers/)",
        rf"hooks\.slack\.com{_SLASH}(?:services|workflows|triggers){_SLASH}"
        rf"(?P<secret>(?:[A-Za-z0-9_-]|{_SLASH})+)",
        gate="hooks.slack.com",
    ),
    _Shape(
        "Google API keys (AIza + 35) and OAuth client secrets (GOCSPX-)",
        _START + r"(?:AIza[0-9A-Za-z_-]{35}|GOCSPX-[0-9A-Za-z_-]{24,})",
        heads=("aiz", "goc"),
    ),
    _Shape(
        "Google OAuth access tokens: ya29.",
        _START + r"ya29\.[0-9A-Za-z_-]{20,}",
        word="ya29",
    ),
    _Shape(
        "AWS access key IDs: AKIA, ASIA, ABIA, ACCA, A3T + 16",
        _START + r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}",
        heads=("aki", "asi", "abi", "acc", "a3t"),
    ),
    _Shape(
        "AWS secret access keys and session tokens after their name: "
        "aws_secret_access_key=, SecretAccessKey:, aws_session_token, SessionToken "
        "(16 or more base64 characters)",
        _START
        + r"(?i:(?:aws[_-]?)?(?:secret[_-]?access[_-]?key|session[_-]?token)"
        + r"|aws[_-]?secret[_-]?key)"
        + _ASSIGN
        + rf"(?P<secret>(?:[A-Za-z0-9+]|{_SLASH}|%(?:25)?2[Bb]){{16,}}(?:=|%(?:25)?3[Dd]){{0,2}})",
        heads=("aws", "sec", "ses"),
    ),
    _Shape(
        "Hugging Face tokens: hf_",
        _START + r"hf_[A-Za-z0-9]{30,}",
        heads=("hf_",),
    ),
    _Shape(
        "npm tokens: npm_",
        _START + r"npm_[A-Za-z0-9]{36,}",
        heads=("npm",),
    ),
    _Shape(
        "PyPI tokens: pypi- (40 or more characters after it)",
        _START + r"pypi-[A-Za-z0-9_-]{40,}",
        heads=("pyp",),
    ),
    _Shape(
        "JSON Web Tokens: eyJ... with two to four dots",
        _START + r"eyJ[A-Za-z0-9_-]{10,}(?:\.[A-Za-z0-9_-]*){2,4}",
        heads=("eyj",),
    ),
    _Shape(
        "PEM private key blocks (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP, ...), newlines "
        "escaped or URL-encoded; without the END line, up to where the base64 stops",
        rf"-----BEGIN{_BLANK}{_PEM_LABEL}"
        rf"(?:(?:{_PEM_BODY}|{_PEM_HEADER})*?-----END{_BLANK}{_PEM_LABEL}|{_PEM_BODY}*)",
        gate="-----BEGIN",
    ),
    _Shape(
        "Authorization header values (Authorization: Bearer|Basic|token|Bot ..., "
        "Proxy-Authorization), 8 characters or more",
        _START
        + r"(?i:(?:proxy-)?authorization)"
        + _ASSIGN
        + rf"(?:(?i:bearer|basic|token|bot|apikey|key){_BLANK}+)?"
        + _NOT_A_WORD
        + _NOT_A_PLACEHOLDER
        + rf"(?P<secret>(?=[A-Za-z0-9])(?:[A-Za-z0-9._~+-]|{_SLASH}|%(?:25)?2[Bb]){{8,}}"
        + r"(?:=|%(?:25)?3[Dd])*)",
        heads=("aut", "pro"),
    ),
    _Shape(
        "Bearer tokens: Bearer + 12 or more token characters",
        _START
        + rf"(?i:bearer){_BLANK}+"
        + _NOT_A_WORD
        + rf"(?P<secret>(?=[A-Za-z0-9])(?:[A-Za-z0-9._~+-]|{_SLASH}|%(?:25)?2[Bb]){{12,}}"
        + r"(?:=|%(?:25)?3[Dd])*)",
        word="bearer",
    ),
    _Shape(
        "Basic credentials: Basic + base64 of user:password",
        _START
        + rf"(?i:basic){_BLANK}+"
        + _NOT_A_WORD
        + rf"(?P<secret>(?:[A-Za-z0-9+]|%(?:25)?2[Bb]|{_SLASH}){{6,}}"
        + r"(?:=|%(?:25)?3[Dd]){0,2})",
        word="basic",
        check=_is_basic,
    ),
    _Shape(
        "passwords in URLs: scheme://user:PASSWORD@host",
        rf"(?<=[A-Za-z0-9]):{_SLASH}{{2}}{_URL_USER}:{_NOT_A_PLACEHOLDER}"
        r"(?P<secret>[^\s/@\"'\\]+)@",
        until=("@", ":"),
        needs=(":/", ":\\", ":%2"),
    ),
    _Shape(
        "passwords in URL-encoded URLs: scheme%3A%2F%2Fuser%3APASSWORD%40host",
        r"(?<=[A-Za-z0-9])%3[Aa](?:%(?:25)?2[Ff]){2}"
        r"(?:[^\s/@\"'\\%]|%(?!3[Aa]|40)[0-9A-Fa-f]{2})*%3[Aa]"
        + _NOT_A_PLACEHOLDER
        + r"(?P<secret>(?:[^\s/@\"'\\%]|%(?!40)[0-9A-Fa-f]{2})+)%40",
        until=("%40", "%3A"),
    ),
    _Shape(
        "secrets in URL queries and form bodies: ?password=, &token=, &access_token=, "
        "&client_secret=, ?key=, &sig=, ... (not placeholders such as ${token})",
        r"[?&](?:amp;)?"
        + _QUERY_NAMES
        + "="
        + _NOT_A_PLACEHOLDER
        + r"(?P<secret>(?:[^&\s\"'\\#<>]|\\{1,15}/)+)",
        at=("?", "&"),
    ),
    _Shape(
        "secrets in URL-encoded queries: %3Fpassword%3D..., %26token%3D...",
        r"%(?:25)?(?:3[Ff]|26)"
        + _QUERY_NAMES
        + r"%(?:25)?3[Dd]"
        + _NOT_A_PLACEHOLDER
        + r"(?P<secret>(?:[^&\s\"'\\#<>%]|%(?!(?:25)?(?:26|23|2[27]|20))[0-9A-Fa-f]{2})+)",
        at=("%3F", "%26"),
    ),
)

COMMON_PATTERNS: tuple[str, ...] = tuple(shape.pattern for shape in _SHAPES)
"""Token shapes that are secrets wherever they appear, as regular expressions.

Provider keys and tokens (OpenAI, Anthropic, GitHub, GitLab, Slack, Stripe,
Google, AWS, Hugging Face, npm, PyPI), JWTs, PEM private keys, Authorization,
Bearer and Basic credentials, and passwords in URLs; docs/recording.md lists each
shape. A pattern with a group named ``secret`` (a URL's password, the value
after ``aws_secret_access_key=``) has only that group replaced.
"""

_SHAPE_OF = {shape.pattern: shape for shape in _SHAPES}

_RUN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_RUNS = bytes(0x61 if c in _RUN_BYTES else 0x20 for c in range(256))
"""Maps token characters to ``a`` and everything else to a space, for the run scan."""
_MIN_RUN = 12
"""The shortest token run a shape can start with (``SessionToken``)."""
_RUN = b"a" * _MIN_RUN
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

# -- known secrets ----------------------------------------------------------------

_MIN_B64_CORE = 6
"""Bytes of a secret that must line up in base64 before its encoded form is matched."""
_MIN_ANCHOR = 3
"""A shorter literal is not worth a prefilter: the secret's pattern is searched for at once."""
_ESCAPES = {8: "b", 9: "t", 10: "n", 12: "f", 13: "r"}
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_NAMED_REFS = {'"': "quot", "&": "amp", "'": "apos", "<": "lt", ">": "gt"}
_B64_REST = re.compile(
    rb"(?:[A-Za-z0-9+/_-]|%(?:25)?2[BbFf]|\\{1,15}/)*(?:=|%(?:25)?3[Dd]|\\{1,15}u003[Dd])*"
)
_B64_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
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


def _hex(value: int, width: int) -> str:
    """``value`` in hex as a pattern matching either case of its letters."""
    return "".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in f"{value:0{width}x}")


def _char_forms(ch: str) -> str:
    """A pattern for one character of a known secret, in each form it takes in a line."""
    if ch in _ALNUM:
        return ch
    code = ord(ch)
    utf8 = ch.encode("utf-8", "surrogatepass")
    forms = ["".join("%(?:25)?" + _hex(b, 2) for b in utf8)]
    if code < 0x10000:
        forms.append(r"\\{1,15}u" + _hex(code, 4))
    else:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(r"\\{1,15}u" + _hex(high, 4) + r"\\{1,15}u" + _hex(low, 4))
    forms += [f"&#0*{code};", f"&#[xX]0*{_hex(code, 1)};"]
    if ch in _NAMED_REFS:
        forms.append(f"&{_NAMED_REFS[ch]};")
    if ch == '"':
        forms.append(r'\\{1,15}"')  # never bare: a bare quote is JSON syntax
    elif ch == "\\":
        forms.append(r"(?:\\\\){1,8}")
    elif code in _ESCAPES:
        forms.append(r"\\{1,15}" + _ESCAPES[code])
    elif code < 0x20:
        pass  # written as \u00XX, above
    elif code < 0x80:
        forms.append(r"\\{0,15}" + re.escape(ch))  # JSON's \/, a shell's \$
    else:
        forms.append("".join(f"\\x{b:02x}" for b in utf8))
    if ch == "'":
        forms += [r"'\\{1,15}''", r"""'\\{0,15}"'\\{0,15}"'"""]  # a shell's 'it'\''s'
    elif ch == " ":
        forms.append(r"\+")  # form encoding
    elif ch == "+":
        forms.append(" ")  # a form decoder took it for a space
    return "(?:" + "|".join(forms) + ")"


def _anchor(text: str) -> bytes:
    """The longest run of letters and digits: a literal every form of ``text`` holds."""
    runs = re.findall(r"[A-Za-z0-9]+", text)
    best = max(runs, key=len, default="")
    return best.encode() if len(best) >= _MIN_ANCHOR else b""


@dataclass(frozen=True, slots=True)
class _Known:
    """One known secret (or its base64 core at one alignment): a literal and a pattern."""

    anchor: bytes
    pattern: re.Pattern[bytes]
    base64: bool


def _known(secret: str) -> list[_Known]:
    """The patterns for a known secret: its text forms, then its base64 at each alignment."""
    found = [
        _Known(
            _anchor(secret), re.compile("".join(map(_char_forms, secret)).encode()), base64=False
        )
    ]
    raw = secret.encode("utf-8", "surrogatepass")
    for skip in range(3):
        part = raw[skip:]
        part = part[: len(part) // 3 * 3]
        if len(part) < _MIN_B64_CORE:
            continue
        core = base64.b64encode(part).decode()
        pattern = "".join(
            {
                "+": r"(?:\+|-| |%(?:25)?2[Bb]|\\{1,15}u002[Bb])",
                "/": r"(?:\\{0,15}/|_|%(?:25)?2[Ff]|\\{1,15}u002[Ff])",
            }.get(c, c)
            for c in core
        )
        found.append(_Known(_anchor(core), re.compile(pattern.encode()), base64=True))
    return found


def _b64_token(line: bytes, start: int, end: int, lo: int) -> tuple[int, int]:
    """Widen a base64 core found at ``start:end`` to its whole token."""
    while start > lo:
        c = line[start - 1]
        if c in _B64_BYTES:
            start -= 1
            if c == 0x2F:  # an escaped slash: \/
                while start > lo and line[start - 1] == _BACKSLASH:
                    start -= 1
        elif start - 3 >= lo and re.fullmatch(rb"%2[BbFf]", line[start - 3 : start]):
            start -= 3
        else:
            break
    rest = _B64_REST.match(line, end)
    return start, rest.end() if rest is not None else end


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
        starts = self._head_forms
        plain = self._plain_before
        gaps = self._gaps
        tails = self._word_tails
        heads = self._heads.get
        while True:
            if i - 2 < lo:
                self._run(line, i, lo, found)
            elif (before := line[i - 1]) in plain or (before in gaps and line[i - 2] not in tails):
                if line[i : i + 3] in starts:
                    for t in heads(line[i : i + 3].lower(), ()):
                        t.at(line, i, found)
            else:
                self._run(line, i, lo, found)
            end = find(b" ", i)
            if end < 0:
                return
            i = find(_RUN, end)
            if i < 0:
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


# -- the environment --------------------------------------------------------------

_CREDENTIAL_WORDS = frozenset(
    {
        "KEY",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "PAT",
    }
)
_CREDENTIAL_ENDINGS = ("APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE")
_MIN_ENV_SECRET_CHARS = 8
"""Shorter environment values (``test``, ``dummy``) are not taken as secrets."""


def _credential_values(environ: Mapping[str, str]) -> list[str]:
    """The values of credential-named environment variables, as secrets to remove.

    A name is credential-named when one of its words (split at ``_``, ``-``,
    ``.``) is ``KEY``, ``APIKEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``,
    ``PASSWD``, ``PASSPHRASE``, ``CREDENTIAL(S)`` or ``PAT``, or it ends in
    one of those (``PGPASSWORD``): ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``GITHUB_TOKEN``,
    ``HF_TOKEN``, ... Values shorter than 8 characters (``test``, ``dummy``)
    and file paths are left out.

    Args:
        environ: The environment, such as ``os.environ``.

    Returns:
        The values, in the environment's order, without repeats.
    """
    found: dict[str, None] = {}
    for name, value in environ.items():
        upper = name.upper()
        words = set(re.split(r"[^A-Z0-9]+", upper))
        if not (words & _CREDENTIAL_WORDS or upper.endswith(_CREDENTIAL_ENDINGS)):
            continue
        secret = value.strip()
        if len(secret) < _MIN_ENV_SECRET_CHARS or secret.startswith(("/", "~", "./")):
            continue
        found[secret] = None
    return list(found)
