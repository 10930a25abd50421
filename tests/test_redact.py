"""Application secrets are scrubbed from lines before they are written."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import (
    COMMON_PATTERNS,
    Event,
    Execution,
    Record,
    Redactor,
    Session,
    Workspace,
    read,
    verify,
)
from loopscribe import events as ev

from .secret_forms import KNOWN_SECRETS, SHAPE_ENCODINGS, SHAPES, encodings, leaks

SECRET = 'sk-CANARY-with"quote\\and-slash-0123456789'
TOKEN = "ghp_" + "A" * 36
DEFAULT = Redactor.default(environ={})


def record_line(data: Any, kind: str = "tool_exec_end") -> bytes:
    """A record line as the session writes it, holding ``data``."""
    envelope = {"session_id": "0" * 32, "seq": 3, "type": kind, "run_id": "1" * 16, "ts": "t"}
    return orjson.dumps({**envelope, "data": data}, option=orjson.OPT_APPEND_NEWLINE)


def test_known_values_and_patterns_never_reach_the_file_or_observers(session_path: Path) -> None:
    """A secret in tool arguments, outputs and exception messages is replaced everywhere."""
    seen: list[Record] = []
    redact = Redactor([SECRET], patterns=COMMON_PATTERNS)
    tool = Execution("c1", "tool")
    with (
        Session.create(session_path, redact=redact, observers=[seen.append]) as s,
        s.begin_run() as run,
    ):
        run.record(ev.tool_exec_start(tool, "http", {"headers": {"X-Key": SECRET}}))
        run.record(ev.tool_exec_end(tool, "http", f"echo {TOKEN}", error=ValueError(SECRET)))
        run.record(Event("note", None, {"auth": f"Bearer {'x' * 40}"}))
    raw = session_path.read_bytes()
    for leak in (SECRET, TOKEN, "x" * 40):
        assert leak.encode() not in raw
        assert base64.b64encode(leak.encode()) not in raw
        assert urllib.parse.quote(leak).encode() not in raw
    assert raw.count(b"[REDACTED]") == 4
    records = list(read(session_path))
    assert records[2].data["args"] == {"headers": {"X-Key": "[REDACTED]"}}
    live = next(r for r in seen if r.type == "tool_exec_start")
    assert live.data == records[2].data  # observers see what the file holds
    assert "[REDACTED]" in repr(seen[3].data)


def test_untouched_lines_keep_the_hosts_objects(session_path: Path) -> None:
    """When nothing matches, observers still get the written objects, not a re-parse."""
    seen: list[Record] = []
    payload = {"fine": [1, 2]}
    with (
        Session.create(session_path, redact=Redactor(["absent"]), observers=[seen.append]) as s,
        s.begin_run() as run,
    ):
        run.record(Event("note", None, payload))
    assert seen[2].data is payload


def _secret_parts(name: str) -> dict[str, str]:
    return {f"{name}[{i}]": part for i, part in enumerate(SHAPES[name][1])}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_token_shape_is_removed_in_each_encoding(name: str) -> None:
    """A shape as text, JSON text (``\\/`` too), twice-escaped, URL- and form-encoded, HTML.

    What is left matches nothing more: ``[REDACTED]`` is no token of any shape.
    """
    text = SHAPES[name][0]
    found = []
    for form in SHAPE_ENCODINGS:
        written = encodings(text)[form]
        for data in (
            {"result": f"$ cat creds\n{written}\n$ "},
            {"args": {"command": written}},
            {"result": json.dumps({"stdout": written})},
            {"result": f"\x1b[32m{written}\x1b[0m"},
        ):
            line = DEFAULT(record_line(data))
            orjson.loads(line)
            assert b"[REDACTED]" in line, (form, line)
            assert DEFAULT(line) is line  # a scrubbed line is its own scrub
            found += leaks(_secret_parts(name), {f"{form} {next(iter(data))}": line})
    assert found == []


def test_the_common_patterns_work_as_plain_regular_expressions() -> None:
    """Used with ``re`` alone (a group named ``secret`` is what goes), they remove every sample."""
    compiled = [re.compile(pattern) for pattern in COMMON_PATTERNS]

    def scrub(text: str) -> str:
        for pattern in compiled:
            text = "".join(_plain_sub(pattern, text))
        return text

    left = {
        name: part
        for name, (text, parts) in SHAPES.items()
        for part in parts
        if part in scrub(text)
    }
    assert left == {}


def _plain_sub(pattern: re.Pattern[str], text: str) -> list[str]:
    """``pattern.sub`` that replaces only the ``secret`` group where the pattern has one."""
    out, done = [], 0
    for m in pattern.finditer(text):
        group = "secret" if "secret" in pattern.groupindex and m.start("secret") >= 0 else 0
        out += [text[done : m.start(group)], "[REDACTED]"]
        done = m.end(group)
    return [*out, text[done:]]


def _ordinary_texts() -> list[str]:
    rng = random.Random(7)
    return [
        *(str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(20)),
        *(hashlib.sha1(bytes([i])).hexdigest() for i in range(20)),
        *(hashlib.sha256(bytes([i])).hexdigest() for i in range(20)),
        "data:image/png;base64," + base64.b64encode(rng.randbytes(6000)).decode(),
        base64.urlsafe_b64encode(rng.randbytes(3000)).decode(),
        "The bearer of bad news arrived. Basic functionality works; Basic setup is done. "
        "Authorization is required. Authorization: required. The secret access key is "
        "stored in Vault, and a session token expires hourly. Use Bearer tokens for auth. "
        "Read task-output-waiting-1770927708311, scikit-learn (sk-learn) and "
        "disk-usage-report-2024-01-01-final-v2 and risk-assessment-document-final-v2-2024.",
        'def get_token():\n    return os.environ["GITHUB_TOKEN"]\n'
        'headers = {"Authorization": f"Bearer {token}"}\n',
        'curl -H "Authorization: Bearer $TOKEN" -H "Authorization: Basic ${CREDS}" '
        "https://api.example.com",
        "redirectTo: `${env.NEXT_PUBLIC_APP_URL}/auth/accept-invite?token=${token}`,",
        "https://example.com/search?q=hello&page=2&lang=en and git@github.com:org/repo.git "
        "and user@example.com and ssh://git@host/repo and http://localhost:8080/x?id=3",
        '<a href="/x?id=1&amp;sort=asc">next</a>',
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUXcrS7vLZ1y4pF3kq0Zx1cM2aX8ww\n"
        "-----END CERTIFICATE-----\n-----BEGIN PUBLIC KEY-----\n"
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE4n3mxQ9V1u2hJ4lqkR6F8oTz\n-----END PUBLIC KEY-----",
        "npm_config_cache hf_hub_download gh_pages ghp-import github_pat xoxo sk- eyJ "
        "pypi-server AKIA ASIA authorization_code SessionToken",
        "aws_secret_access_key=None aws_secret_access_key=os.environ['AWS_SECRET_ACCESS_KEY'] "
        'aws_secret_access_key=aws_secret_access_key SessionToken=session_token "SecretAccessKey": '
        '"string"',
        "2026-01-21T06:20:30.851Z v1.2.3-beta.4 C:\\Users\\me\\notes\\sk-notes.txt "
        "/usr/lib/python3.11/site-packages/botocore/credentials.py",
        "toolu_01R3SZZYuAq6mou5RqHE4rzF msg_01KF5AL1TRZ7eLJUyf8heHMW req_011CXL3FRjqbPXkeq1YYjRDq",
        "Supercalifragilisticexpialidocious internationalization, Bearer internationalization",
        "password: see below; the password field; ?password= (empty) &token=&x=1",
        "eyJmb28iOiJiYXIifQ== is base64 JSON; eyJhbGciOiJub25lIn0. alone",
    ]


def test_ordinary_text_is_left_alone() -> None:
    """UUIDs, git SHAs, base64 images, prose, code and placeholders match no token shape."""
    changed = []
    for text in _ordinary_texts():
        for data in ({"out": text}, {"out": json.dumps({"v": text})}):
            line = record_line(data)
            if DEFAULT(line) is not line:
                changed.append(text[:60])
    assert changed == []


@pytest.mark.parametrize("name", sorted(KNOWN_SECRETS))
def test_a_known_secret_is_removed_in_each_encoding(name: str) -> None:
    """Escaped (``\\/``, ``\\uXXXX``, twice), URL- and form-encoded, HTML, shell, Basic."""
    secret = KNOWN_SECRETS[name]
    redact = Redactor([secret])
    for form, written in encodings(secret).items():
        for data in (
            {"result": f"got {written}!"},
            {"args": {"v": written}},
            {"result": json.dumps({"stdout": written})},
            {"result": json.dumps(json.dumps({"stdout": written}))},
        ):
            line = redact(record_line(data))
            orjson.loads(line)
            assert leaks({name: secret}, {form: line}) == [], line


def test_the_files_own_fields_are_never_rewritten(session_path: Path) -> None:
    """Secrets equal to key names, digits or the chain name leave a file that reads and verifies."""
    silly = ["data", "format_version", "sha256", "synced", "1", "tool", "n", "\\", '"']
    redact = Redactor(silly, patterns=[r"\d{3}", r'x","y'])
    tool = Execution("c1", "tool")
    meta = {"note": "format_version data 12345"}
    with (
        Session.create(session_path, redact=redact, chain=True, metadata=meta) as s,
        s.begin_run() as run,
    ):
        args = {"data": 12345678, "nums": [1, 22, 333, "x", "y"], "k\\": 'a"b\\c\nd\x01e'}
        run.record(ev.tool_exec_start(tool, "t", args))
        run.record(ev.tool_exec_end(tool, "t", "tool data 12345"))
    records = list(read(session_path))
    assert verify(session_path).ok
    assert records[0].data["format_version"] == 1
    assert records[0].data["chain"] == "sha256"
    assert "data" not in records[0].data["metadata"]["note"]
    assert records[2].data["args"]["k\\"] == "a[REDACTED]b[REDACTED]c\nd\x01e"
    assert records[2].data["args"]["nums"] == [1, 22, 333, "x", "y"]  # numbers are kept
    assert records[3].data["tool"] == "t"  # a key is never renamed in part
    assert records[3].data["result"] == "[REDACTED] [REDACTED] [REDACTED]45"
    assert isinstance(records[4].data["synced"]["offset"], int)
    assert Workspace(session_path.parent).list()[0].records == len(records)


def test_a_token_used_as_a_key_is_replaced() -> None:
    """A secret that is a whole key goes; a key holding one in part keeps its name."""
    redact = Redactor(["tok-0123456789abcdef"])
    line = redact(record_line({"m": {"tok-0123456789abcdef": 1, "x-tok-0123456789abcdef": 2}}))
    assert orjson.loads(line)["data"] == {"m": {"[REDACTED]": 1, "x-tok-0123456789abcdef": 2}}


def test_a_match_across_json_syntax_leaves_a_valid_line() -> None:
    """A pattern that spans two strings scrubs each value instead of breaking the line."""
    redact = Redactor(["s3cr3t-value-0001"], patterns=[r'x",\s*"y'])
    data = {"a": ["x", "y"], "b": "s3cr3t-value-0001 and x", "c": 7}
    out = orjson.loads(redact(record_line(data)))
    assert out["data"] == {"a": ["x", "y"], "b": "[REDACTED] and x", "c": 7}
    assert out["session_id"] == "0" * 32


def test_a_replacement_never_cuts_an_escape() -> None:
    """A secret beginning with an escape's letter or digits leaves whole escapes behind."""
    texts = [
        "\nsecret-value-42 and \\nsecret-value-42",
        "\x1bsecret-value-42",
        "\x01\\u0001secret-value-42",
        "\\\\nsecret-value-42\\",
    ]
    for text in texts:
        for secret in (
            "nsecret-value-42",
            "secret-value-42",
            "1secret-value-42",
            "0001secret-value",
        ):
            line = Redactor([secret])(record_line({"out": text}))
            assert isinstance(orjson.loads(line)["data"]["out"], str), (text, secret)


def test_a_secret_group_is_all_a_pattern_removes() -> None:
    """With a group named ``secret``, only it is replaced; the name around it stays."""
    redact = Redactor(patterns=[r"pin=(?P<secret>[0-9]{4,})"])
    line = redact(record_line({"out": "pin=908172 and pin=12"}))
    assert orjson.loads(line)["data"]["out"] == "pin=[REDACTED] and pin=12"


def test_default_takes_credential_named_environment_values() -> None:
    """*_API_KEY, *_TOKEN, *_SECRET*, PGPASSWORD...; not short values, paths or PWD."""
    environ = {
        "OPENAI_API_KEY": "sk-not-shaped-but-named",
        "ANTHROPIC_API_KEY": "anthropic-named-value-1",
        "AWS_SECRET_ACCESS_KEY": "aws/secret+value=",
        "GITHUB_TOKEN": "gh-named-token-value",
        "PGPASSWORD": "pg-named-password",
        "MY_SERVICE_CREDENTIALS": "creds-named-value",
        "DB_PASSWORD": "short",
        "SSL_KEY_FILE": "/etc/ssl/private/key.pem",
        "PWD": "/work/a/long/working/directory",
        "HOME": "/home/someone-with-a-long-name",
        "EDITOR": "vim-with-a-long-value",
    }
    redact = Redactor.default(environ=environ)
    text = " ".join(environ.values())
    out = orjson.loads(redact(record_line({"out": text})))["data"]["out"]
    assert out.split() == [
        *["[REDACTED]"] * 6,
        "short",
        "/etc/ssl/private/key.pem",
        "/work/a/long/working/directory",
        "/home/someone-with-a-long-name",
        "vim-with-a-long-value",
    ]
