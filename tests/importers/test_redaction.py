"""Imports scrub secrets as live recording does: no form of one reaches any file they write.

The transcripts are the shipped ones with secrets planted where coding
agents put them: prompts, model text, tool arguments (also as JSON text, as
Codex keeps them), tool output, subagent lines and Codex's turn context
(which the import keeps in its cursor). Every common token shape is planted
in each encoding, and known secrets (named in credential environment
variables, as ``Redactor.default`` and the CLI read them) in each of theirs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import Redactor, Workspace, read
from loopscribe.cli import main
from loopscribe.importers import claude_code, codex

from ..secret_forms import KNOWN_SECRETS, SHAPE_ENCODINGS, SHAPES, encodings, leaks
from ._support import DATA, copy_transcript, line_offsets, normal_form, split_at

ENV = {f"LOOPSCRIBE_TEST_{name.upper()}_SECRET": value for name, value in KNOWN_SECRETS.items()}
"""The known secrets, as credential-named environment variables."""
ITEMS = [
    *(encodings(text)[form] for text, _ in SHAPES.values() for form in SHAPE_ENCODINGS),
    *(form for secret in KNOWN_SECRETS.values() for form in encodings(secret).values()),
]
"""Every shape and known secret in every encoding: what is planted."""
SECRETS = {
    **KNOWN_SECRETS,
    **{f"{name}[{i}]": part for name, (_, parts) in SHAPES.items() for i, part in enumerate(parts)},
}
"""Everything that must not reach a file, in any of its forms."""
CONTENT = frozenset({"content", "text", "command", "description", "prompt", "message", "thinking"})
JSON_TEXT = frozenset({"arguments", "output"})
"""Codex keeps a call's arguments and output as JSON text in a string."""


class _Planter:
    """Appends planted items to the content strings of transcript lines, in turn."""

    def __init__(self, per_string: int) -> None:
        self.per_string = per_string
        self.next = 0

    def items(self) -> str:
        count = self.per_string
        chosen = [ITEMS[(self.next + i) % len(ITEMS)] for i in range(count)]
        self.next += count
        return "\n" + "\n".join(chosen)

    def plant(self, value: Any, key: str | None = None, everywhere: bool = False) -> Any:
        if isinstance(value, dict):
            inside = everywhere or key in ("input", "user_instructions")
            return {k: self.plant(v, k, inside) for k, v in value.items()}
        if isinstance(value, list):
            return [self.plant(v, key, everywhere) for v in value]
        if not isinstance(value, str):
            return value
        if key in JSON_TEXT:
            try:
                inner = json.loads(value)
            except ValueError:
                return value + self.items()
            if isinstance(inner, dict | list):
                return json.dumps(self.plant(inner, None, everywhere=True))
        if everywhere or key in CONTENT:
            return value + self.items()
        return value

    def plant_file(self, path: Path) -> None:
        out = []
        for raw in path.read_bytes().splitlines():
            obj = orjson.loads(raw)
            planted = self.plant(obj)
            if obj.get("type") == "turn_context":
                planted["payload"]["user_instructions"] = self.items()
            out.append(orjson.dumps(planted) + b"\n")
        path.write_bytes(b"".join(out))


def hostile_claude_code(folder: Path) -> Path:
    """A Claude Code transcript with its subagent lines and every item planted."""
    source = copy_transcript(DATA / "claude-code" / "subagent.jsonl", folder)
    planter = _Planter(per_string=4)
    planter.plant_file(source)
    hello = copy_transcript(DATA / "claude-code" / "hello-world-script.jsonl", folder)
    _Planter(per_string=len(ITEMS)).plant_file(hello)
    assert planter.next >= len(ITEMS)  # every item is planted at least once
    return source


def hostile_codex(folder: Path) -> Path:
    """A Codex rollout with every item planted in prompts, calls, outputs and turn context."""
    name = "rollout-2025-09-25T15-12-14-019982b8-3422-79e0-8b3b-05abaf4f3c3e.jsonl"
    source = copy_transcript(DATA / "codex" / name, folder)
    planter = _Planter(per_string=3)
    planter.plant_file(source)
    assert planter.next >= len(ITEMS)
    return source


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder``, by name, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The known secrets in credential-named environment variables."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("credentials")
def test_a_claude_code_import_leaves_no_secret_in_any_file(tmp_path: Path) -> None:
    """Prompts, model text, tool input and output, subagents: no form of a secret is written."""
    source = hostile_claude_code(tmp_path / "src")
    out = tmp_path / "out"
    reports = [
        claude_code.import_transcript(p, out, finished=True) for p in source.parent.glob("*.jsonl")
    ]
    assert all(r.error is None and r.records > 10 for r in reports)
    written = files_under(out)
    assert any(name.endswith(".import-cursor") for name in written)
    assert leaks(SECRETS, written) == []
    assert all(b"[REDACTED]" in data for name, data in written.items() if name.endswith(".jsonl"))
    # Every line reads back: the records, and the session_start the report does not count.
    assert [len(list(read(r.destination))) for r in reports] == [r.records + 1 for r in reports]


@pytest.mark.usefixtures("credentials")
def test_a_codex_import_leaves_no_secret_in_any_file(tmp_path: Path) -> None:
    """Prompts, calls (arguments as JSON text), outputs and the turn context in the cursor."""
    source = hostile_codex(tmp_path / "src")
    out = tmp_path / "out"
    report = codex.import_transcript(source, out, finished=False)
    assert report.error is None
    cursor = orjson.loads((out / f"{source.stem}.jsonl.import-cursor").read_bytes())
    assert "[REDACTED]" in json.dumps(cursor["state"]["context"])  # the turn context was kept
    report = codex.import_transcript(source, out, finished=True)
    written = files_under(out)
    assert leaks(SECRETS, written) == []
    assert b"[REDACTED]" in written[f"{source.stem}.jsonl"]


def test_imports_scrub_by_default_and_can_be_told_not_to(tmp_path: Path) -> None:
    """``redact=True`` (the default) removes the token shapes; ``redact=False`` keeps them."""
    source = hostile_codex(tmp_path / "src")
    scrubbed = codex.import_transcript(source, tmp_path / "a", finished=True)
    kept = codex.import_transcript(source, tmp_path / "b", finished=True, redact=False)
    shapes = {k: v for k, v in SECRETS.items() if k not in KNOWN_SECRETS}
    assert leaks(shapes, files_under(tmp_path / "a")) == []
    assert leaks(shapes, files_under(tmp_path / "b"))
    assert scrubbed.records == kept.records


def test_a_title_cut_from_a_prompt_holds_no_part_of_a_secret(tmp_path: Path) -> None:
    """The session's title is cut from the scrubbed prompt, so no secret is cut in half."""
    secret = KNOWN_SECRETS["aws_secret"]
    source = copy_transcript(DATA / "claude-code" / "hello-world-script.jsonl", tmp_path / "src")
    lines = [orjson.loads(raw) for raw in source.read_bytes().splitlines()]
    prompt = f"Deploy with the key {secret} and the token sk-proj-Zx9Kq2Lm7Np4Rt8Vw1Yb please"
    lines[1]["message"]["content"] = prompt
    source.write_bytes(b"".join(orjson.dumps(obj) + b"\n" for obj in lines))
    report = claude_code.import_transcript(
        source, tmp_path / "out", finished=True, redact=Redactor.default([secret], environ={})
    )
    (summary,) = Workspace(tmp_path / "out").list()
    assert summary.title == "Deploy with the key [REDACTED] and the token [REDACTED] please"
    raw = report.destination.read_bytes()
    assert secret[:12].encode() not in raw
    assert b"sk-proj-Zx9" not in raw


_KILLED_MID_BLOCK = """
import os, signal, sys
from pathlib import Path
from loopscribe.importers import claude_code

real_write = os.write

def write(fd, data):
    # Half of the first block of records reaches the file, then the process dies.
    if len(data) > 4096:
        real_write(fd, bytes(data)[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)

os.write = write
claude_code.import_transcript(Path(sys.argv[1]), Path(sys.argv[2]), finished=False)
"""


@pytest.mark.usefixtures("credentials")
def test_an_import_killed_mid_block_resumes_with_redaction(tmp_path: Path) -> None:
    """SIGKILL inside a block of scrubbed records: the next import matches them, then goes on."""
    whole_source = hostile_claude_code(tmp_path / "whole")
    claude_code.import_transcript(whole_source, tmp_path / "whole-out", finished=True)
    whole = tmp_path / "whole-out" / whole_source.name

    source = hostile_claude_code(tmp_path / "src")
    rest = split_at(whole_source, line_offsets(whole_source)[40], source)
    out = tmp_path / "out"
    claude_code.import_transcript(source, out, finished=False)
    with open(source, "ab") as stream:
        stream.write(rest)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_BLOCK, str(source), str(out)],
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, **ENV},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    dest = out / source.name
    assert not dest.read_bytes().endswith(b"\n")  # the block was cut inside a line
    report = claude_code.import_transcript(source, out, finished=True)
    assert report.records > 0
    moved = str(whole_source.parent).encode(), str(source.parent).encode()
    expected = [(*row[:-1], row[-1].replace(*moved)) for row in normal_form(whole)]
    assert normal_form(dest) == expected  # nothing written twice, nothing lost
    assert leaks(SECRETS, files_under(out)) == []


def _prompted(folder: Path, prompt: str) -> Path:
    """A Claude Code project folder holding one transcript whose first prompt is ``prompt``."""
    source = copy_transcript(DATA / "claude-code" / "hello-world-script.jsonl", folder)
    lines = [orjson.loads(raw) for raw in source.read_bytes().splitlines()]
    lines[1]["message"]["content"] = prompt
    source.write_bytes(b"".join(orjson.dumps(obj) + b"\n" for obj in lines))
    return folder


NAMED = "deploy-value-9a8b7c6d5e4f"
"""A value only ``--redact-env`` names: its variable is not credential-named."""
TOKEN = SHAPES["github_classic"][1][0]
PROMPT = f"push with {NAMED} and {TOKEN}, ticket internal-204981"


def test_the_cli_removes_what_its_options_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--redact-env`` and ``--redact-pattern`` add to the default token shapes."""
    monkeypatch.setenv("DEPLOY_NAME", NAMED)
    src, out = _prompted(tmp_path / "src", PROMPT), tmp_path / "out"
    argv = ["import", "claude-code", str(src), "--out", str(out), "--settle", "0"]
    argv += ["--redact-env", "DEPLOY_NAME", "--redact-pattern", r"internal-(?P<secret>\d{6})"]
    assert main(argv) == 0, capsys.readouterr().err
    raw = b"".join(files_under(out).values())
    assert NAMED.encode() not in raw
    assert TOKEN.encode() not in raw
    assert b"internal-204981" not in raw
    assert b"internal-[REDACTED]" in raw


def test_no_redact_keeps_the_default_shapes_but_not_what_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--no-redact`` leaves token shapes in; values named with ``--redact-env`` still go."""
    monkeypatch.setenv("DEPLOY_NAME", NAMED)
    src, out = _prompted(tmp_path / "src", PROMPT), tmp_path / "out"
    argv = ["import", "claude-code", str(src), "--out", str(out), "--settle", "0"]
    assert main([*argv, "--no-redact", "--redact-env", "DEPLOY_NAME"]) == 0
    raw = b"".join(files_under(out).values())
    assert TOKEN.encode() in raw
    assert NAMED.encode() not in raw
    capsys.readouterr()


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (["--redact-env", "LOOPSCRIBE_TEST_UNSET"], "no such environment variable"),
        (["--redact-pattern", "internal-(["], "not a regular expression"),
    ],
)
def test_a_bad_redaction_option_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], expected: str
) -> None:
    """An unset variable or a broken pattern stops the import before it writes anything."""
    src, out = _prompted(tmp_path / "src", PROMPT), tmp_path / "out"
    assert main(["import", "claude-code", str(src), "--out", str(out), *option]) != 0
    err = capsys.readouterr().err
    assert expected in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()
