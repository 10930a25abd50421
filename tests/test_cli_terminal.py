"""The command line never sends a session's text to the terminal as control sequences.

A transcript or session file is data someone else may have written: its
titles, model and tool names, messages, execution IDs and its file name can
hold escape sequences that clear the screen, retitle the window, plant links
or forge lines. Every command shows them as escapes instead.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopscribe import AssistantMessage, Execution, Session, TextContent, UserMessage
from loopscribe import events as ev
from loopscribe.cli import main
from loopscribe.cli._terminal import PrintableFormatter, printable

# Clear screen, set the window title, an OSC 8 link, red, a carriage return that
# overwrites the line, a right-to-left override, a C1 CSI, a backspace; and
# rich markup, which must print as typed.
MARKUP = "[link=https://evil.example]L[/link][bold]"
HOSTILE = MARKUP + (
    "\x1b[2J\x1b]0;PWNED\x07\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\x1b[31m\rOK\u202e\x9b2J\x08"
)
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def transcript(path: Path) -> None:
    """A Claude Code transcript whose every free-text field is hostile."""
    session = "11111111-2222-3333-4444-555555555555"
    common = {
        "isSidechain": False,
        "userType": "external",
        "sessionId": session,
        "version": "2.1.39",
    }
    lines = [
        {"type": "summary", "summary": f"title {HOSTILE}", "leafUuid": "u2"},
        {
            **common,
            "parentUuid": None,
            "cwd": f"/home/{HOSTILE}",
            "gitBranch": f"main{HOSTILE}",
            "type": "user",
            "message": {"role": "user", "content": f"question {HOSTILE}"},
            "timestamp": "2026-02-12T16:02:23.545Z",
            "uuid": "u1",
        },
        {
            **common,
            "parentUuid": "u1",
            "cwd": "/home/x",
            "type": "assistant",
            "message": {
                "id": "msg1",
                "type": "message",
                "role": "assistant",
                "model": f"claude{HOSTILE}",
                "content": [
                    {"type": "text", "text": f"answer {HOSTILE}"},
                    {
                        "type": "tool_use",
                        "id": f"tu{HOSTILE}",
                        "name": f"Bash{HOSTILE}",
                        "input": {"command": f"ls {HOSTILE}"},
                    },
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 5, "output_tokens": 7},
            },
            "timestamp": "2026-02-12T16:02:24.545Z",
            "uuid": "u2",
        },
        {
            **common,
            "parentUuid": "u2",
            "cwd": "/home/x",
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"tu{HOSTILE}",
                        "content": f"out {HOSTILE}",
                        "is_error": True,
                    }
                ],
            },
            "timestamp": "2026-02-12T16:02:25.545Z",
            "uuid": "u3",
        },
    ]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def recorded(path: Path) -> None:
    """A session recorded through the API with hostile names, IDs and messages."""
    with Session.create(path, chain=True) as session, session.begin_run() as run:
        model = Execution(f"m{HOSTILE}", "model")
        run.record(ev.model_exec_start(model, f"model{HOSTILE}", provider=f"p{HOSTILE}"))
        run.record(ev.model_request(model, [UserMessage(f"ask {HOSTILE}")]))
        reply = AssistantMessage((TextContent(f"reply {HOSTILE}"),), model=f"model{HOSTILE}")
        run.record(ev.model_exec_end(model, message=reply))
        tool = Execution(f"call{HOSTILE}", "tool", parent_id=model.id)
        run.record(ev.tool_exec_start(tool, f"grep{HOSTILE}", {"q": HOSTILE}))
        run.record(ev.tool_exec_end(tool, f"grep{HOSTILE}", f"found {HOSTILE}", is_error=True))


def cli(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    """Both streams of one in-process command, which must exit with ``status``."""
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == status, captured.err
    return captured.out + captured.err


def test_every_command_shows_hostile_text_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ls, show, tail, stats, find, span, verify and import print no control character."""
    sources = tmp_path / "claude"
    sources.mkdir()
    transcript(sources / f"evil{HOSTILE.replace('/', '')}.jsonl")
    out = tmp_path / "sessions"
    printed = [cli(capsys, "import", "claude-code", str(sources), "--out", str(out))]
    (imported,) = out.glob("*.jsonl")
    native = out / f"native{HOSTILE.replace('/', '')}.jsonl"
    recorded(native)
    printed.append(cli(capsys, "ls", str(out)))
    printed.append(cli(capsys, "stats", str(out)))
    for session in (imported, native):
        printed.append(cli(capsys, "show", str(session)))
        printed.append(cli(capsys, "tail", str(session), "-n", "50"))
        printed.append(cli(capsys, "span", str(session), "--seq", "3"))
        ids = orjson.loads(cli(capsys, "--json", "span", str(session), "--seq", "3"))
        printed.append(cli(capsys, "find", str(session), "--trace-id", ids["trace_id"]))
        printed.append(cli(capsys, "verify", str(session), status=0))  # unchained: reported
    text = "".join(printed)
    assert not UNSAFE.findall(text), sorted(set(UNSAFE.findall(text)))
    assert text.count(MARKUP) >= 10
    # find prints each record's data as indented JSON that parses back.
    found = cli(capsys, "find", str(native), "--trace-id", ids["trace_id"])
    blocks = re.findall(r"^\{$.*?^\}$", found, flags=re.MULTILINE | re.DOTALL)
    assert [orjson.loads(block)["tool"] for block in blocks if '"tool"' in block] == [
        f"grep{HOSTILE}"
    ] * 2
    # Shown, not dropped: the reader sees what the file holds.
    escaped = MARKUP + "\\x1b[2J\\x1b]0;PWNED\\x07"
    in_name = escaped.replace("/", "")
    for shown in (
        f"answer {escaped}",
        f"reply {MARKUP}\\u001b[2J",  # in find's JSON
        f"tu{escaped}",  # the imported tool call's ID, in tail
        f"model{escaped}",
        f"call{escaped}",
        f"evil{in_name}",
        f"native{in_name}",
    ):
        assert shown in text, shown


def test_an_error_naming_a_hostile_file_is_printable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Error lines name the file the user gave, escaped like everything else."""
    code = main(["show", str(tmp_path / f"missing{HOSTILE.replace('/', '')}.jsonl")])
    err = capsys.readouterr().err
    assert code != 0
    assert f"missing{MARKUP.replace('/', '')}\\x1b[2J" in err
    assert not UNSAFE.findall(err)


def test_log_lines_are_printable() -> None:
    """The command line's log format escapes what a message or traceback carries."""
    record = logging.LogRecord(
        "loopscribe", logging.WARNING, __file__, 1, "skipped %s", (HOSTILE,), None
    )
    line = PrintableFormatter("%(message)s").format(record)
    assert not UNSAFE.findall(line)
    assert line.startswith(f"skipped {MARKUP}\\x1b[2J")


@given(st.text())
def test_printable_escapes_exactly_the_control_characters(text: str) -> None:
    """Safe text is unchanged, newlines and tabs kept, every control character escaped."""
    shown = printable(text)
    assert not UNSAFE.findall(shown)
    if not UNSAFE.search(text):
        assert shown == text
    assert shown.count("\n") == text.count("\n")
    assert shown.count("\t") == text.count("\t")
