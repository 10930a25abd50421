"""The first hour, scripted: a fresh clone, the shipped transcripts imported, then
ls, show by prefix, find by a reference copied from a span, and the viewer over HTTP.

No traceback, no error exit, and every message and tool call shown.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loopscribe import read

ROOT = Path(__file__).parents[1]


class User:
    """Runs ``loopscribe`` from a clone as a newcomer would: own home, no settings."""

    def __init__(self, tmp: Path, clone: Path) -> None:
        self.clone = clone
        self.cwd = tmp / "work"
        self.cwd.mkdir()
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "LOOPSCRIBE_", "XDG_", "PYTHON"))
        }
        self.env.update(
            HOME=str(tmp / "home"), PYTHONPATH=str(clone / "src"), COLUMNS="100", NO_COLOR="1"
        )

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "loopscribe", *args]

    def run(self, *args: str) -> str:
        done = subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=300,
            check=False,
        )
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> User:
    """A clone of this repository's committed tree, and a user with an empty home."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("the walk-through clones the repository: git and a checkout are needed")
    tmp = tmp_path_factory.mktemp("walk")
    clone = tmp / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)],
        check=True,
        timeout=120,
    )
    return User(tmp, clone)


@pytest.fixture(scope="module")
def imported(user: User) -> list[dict[str, object]]:
    """The shipped Claude Code and Codex transcripts imported into the sessions home."""
    data = user.clone / "tests" / "data" / "transcripts"
    for agent in ("claude-code", "codex"):
        user.run("import", agent, str(data / agent))
    rows = [orjson.loads(line) for line in user.run("--json", "ls").splitlines()]
    assert len(rows) >= 10
    home = Path(user.env["HOME"]) / ".local" / "share" / "loopscribe" / "import"
    assert all(str(row["path"]).startswith(str(home)) for row in rows)
    return rows


def test_ls_shows_every_session_by_a_short_id(
    user: User, imported: list[dict[str, object]]
) -> None:
    table = user.run("ls")
    for row in imported:
        assert str(row["id"])[:8] in table
    assert "interrupted" not in table  # old transcripts, freshly cloned: their turns are over
    assert all(len(line) <= 100 for line in table.splitlines())


def test_show_by_prefix_prints_every_message_and_tool_call(
    user: User, imported: list[dict[str, object]]
) -> None:
    for row in imported:
        text = user.run("show", str(row["id"])[:8], "-n", "0")
        lines = text.splitlines()
        assert lines[0].split()  # the summary line
        for record in read(str(row["path"])):
            ex = record.execution
            if record.type == "tool_exec_start" and ex is not None:
                assert f"{record.data['tool']} {ex.id}" in text, (row["id"], record.seq)
            if record.type == "tool_exec_end" and ex is not None:
                assert text.count(ex.id) >= 2, (row["id"], record.seq)


def test_find_by_a_reference_copied_from_a_span(
    user: User, imported: list[dict[str, object]]
) -> None:
    row = next(r for r in imported if str(r["path"]).endswith("short.jsonl"))
    user.run("export", str(row["id"])[:8])
    spans_file = Path(f"{row['path']}.otlp.jsonl")
    refs: list[str] = []
    ids: list[str] = []
    for line in spans_file.read_bytes().splitlines():
        for rs in orjson.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    ids.append(f"{span['traceId']}/{span['spanId']}")
                    for attr in span.get("attributes", []):
                        value = attr["value"].get("stringValue", "")
                        if attr["key"].endswith("_ref") and "#seq=" in value:
                            refs.append(value)
    assert refs
    assert ids
    for ref in refs[:3]:
        found = [orjson.loads(x) for x in user.run("--json", "find", ref).splitlines()]
        assert [f["seq"] for f in found] == [int(ref.rsplit("=", 1)[1])]
    assert user.run("--json", "find", ids[-1]).strip()
    assert user.run("--json", "show", refs[0])


@pytest.fixture
def served(user: User, imported: list[dict[str, object]]) -> Iterator[str]:
    """`loopscribe serve` of the sessions home on a free port: its URL."""
    proc = subprocess.Popen(
        user.argv("--json", "serve", "--port", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=user.cwd,
        env=user.env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        yield str(orjson.loads(line)["url"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        assert "Traceback" not in err


def fetch(url: str) -> bytes:
    """GET ``url``; the index is built in the background, so a 404 is asked again."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                body: bytes = response.read()
                return body
        except urllib.error.HTTPError as exc:
            if exc.code not in (404, 503) or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def test_the_viewer_serves_the_session_page(served: str, imported: list[dict[str, object]]) -> None:
    row = next(r for r in imported if str(r["path"]).endswith("short.jsonl"))
    sid = str(row["id"])
    page = fetch(f"{served}session/{sid}")
    assert b"<html" in page.lower()
    conversation = fetch(f"{served}api/session/{sid}/conversation")
    for record in read(str(row["path"])):
        if record.type == "tool_exec_start" and record.execution is not None:
            assert record.execution.id.encode() in conversation
