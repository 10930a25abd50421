"""Token shapes: provider keys and credentials that are secrets wherever they appear."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass

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
