"""Known secrets: every form an exact value takes inside a record line."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from ._scan import _BACKSLASH

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
