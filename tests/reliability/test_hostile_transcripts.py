"""Hostile transcripts through ``loopscribe import``, run as a real process.

Bad lines, deep nesting, the reserved key, damaged cursors, rewritten
transcripts, a first import killed half-way and a destination another
process is writing: each is one clear error naming the file (and line),
the other transcripts are imported, and the exit status says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import loopscribe
from loopscribe import Session

SHORT = Path(__file__).parent.parent / "data" / "transcripts" / "claude-code" / "short.jsonl"


def _deep(levels: int, key: str = "a") -> str:
    text = "1"
    for _ in range(levels):
        text = f'{{"{key}":{text}}}'
    return text


def _import(src: Path, out: Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopscribe", "import", "claude-code", str(src), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("loopscribe: error:")]


def _transcript(folder: Path, name: str, extra: list[str]) -> Path:
    lines = SHORT.read_text().splitlines()
    path = folder / f"{name}.jsonl"
    path.write_text("\n".join([*lines[:3], *extra, *lines[3:]]) + "\n")
    return path


def test_bad_lines_are_one_error_each_and_the_rest_is_imported(tmp_path: Path) -> None:
    """A 'type' that is an object or a list, nesting 254 to 1023 deep: file and line named."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    user = '{"type":"user","message":{"role":"user","content":"hi"},"x":%s}'
    bad = {
        "type_object": json.dumps({"type": {"nested": 1}, "uuid": "u1"}),
        "type_list": json.dumps({"type": ["user"], "uuid": "u2"}),
        "deep_254": user % _deep(254),
        "deep_1023": user % _deep(1020),
    }
    for name, line in bad.items():
        _transcript(src, name, [line])
    (src / "good.jsonl").write_bytes(SHORT.read_bytes())
    ls_value = json.loads(_deep(120, "$ls"))
    _transcript(src, "reserved", [json.dumps({"type": "brand-new", "env": ls_value})])
    done = _import(src, out)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    errors = _errors(done)
    assert len(errors) == len(bad), done.stderr
    for name in bad:
        (error,) = [e for e in errors if f"{name}.jsonl:4:" in e]
        assert "could not be imported" in error
    for name in [*bad, "good", "reserved"]:
        records = list(loopscribe.read(out / f"{name}.jsonl"))
        assert any(r.type == "message_end" for r in records), name
    (kept,) = [
        r
        for r in loopscribe.read(out / "reserved.jsonl")
        if r.type == "source_event" and r.data["type"] == "brand-new"
    ]
    assert kept.data["line"]["env"] == ls_value  # the reserved key is data: read back equal


@pytest.mark.parametrize(
    "cursor",
    [
        {"version": 1, "importer": "claude-code", "offset": "10"},
        {"version": 1, "importer": "claude-code", "offset": 10, "state": [1]},
        {"version": 1, "importer": "claude-code", "line": -3},
        {"version": 1, "importer": "claude-code", "head": 5},
    ],
)
def test_a_cursor_with_wrong_types_is_one_error(tmp_path: Path, cursor: dict[str, object]) -> None:
    """The damaged cursor is named with the fix; the other transcripts are imported."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "a.jsonl").write_bytes(SHORT.read_bytes())
    (src / "b.jsonl").write_bytes(SHORT.read_bytes())
    assert _import(src, out).returncode == 0
    (out / "a.jsonl.import-cursor").write_text(json.dumps(cursor))
    with open(src / "b.jsonl", "a") as f:
        f.write(SHORT.read_text().splitlines()[-1] + "\n")
    done = _import(src, out)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (error,) = _errors(done)
    assert "a.jsonl.import-cursor" in error
    assert "wrong shape" in error or "damaged" in error


def test_a_rewritten_transcript_with_the_same_first_line_is_found(tmp_path: Path) -> None:
    """Same first line, different body, longer: the hash of the imported prefix tells."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    source = src / "a.jsonl"
    source.write_bytes(SHORT.read_bytes())
    (src / "b.jsonl").write_bytes(SHORT.read_bytes())
    assert _import(src, out).returncode == 0
    lines = SHORT.read_bytes().splitlines(keepends=True)
    rewritten = lines[0] + b"".join(lines[1:]).replace(b"Bash", b"Bosh") + lines[-1] * 3
    assert len(rewritten) > len(SHORT.read_bytes())
    source.write_bytes(rewritten)
    done = _import(src, out)
    assert done.returncode == 1
    (error,) = _errors(done)
    assert "a.jsonl" in error
    assert "rewritten" in error


def _big_transcript(path: Path, copies: int) -> None:
    lines = SHORT.read_bytes().splitlines(keepends=True)
    with open(path, "wb") as f:
        f.write(lines[0])
        for _ in range(copies):
            f.writelines(lines[1:])


def test_a_first_import_killed_half_way_never_blocks_the_next(tmp_path: Path) -> None:
    """SIGKILL during the first import: the next import recovers and completes."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _big_transcript(src / "big.jsonl", 3000)
    process = subprocess.Popen(
        [sys.executable, "-m", "loopscribe", "import", "claude-code", str(src), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    dest = out / "big.jsonl"
    deadline = time.monotonic() + 60
    while not (dest.exists() and dest.stat().st_size > 0) and time.monotonic() < deadline:
        assert process.poll() is None, "the import ended before it could be killed"
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / "big.jsonl.import-cursor").exists()
    done = _import(src, out, timeout_s=300)
    assert done.returncode == 0, done.stderr
    assert (out / "big.jsonl.import-cursor").exists()
    assert any(r.type == "message_end" for r in loopscribe.read(dest))


def test_a_destination_being_written_is_never_to_be_deleted(tmp_path: Path) -> None:
    """Another writer holds the destination: the message says to wait, never to delete."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "a.jsonl").write_bytes(SHORT.read_bytes())
    (src / "b.jsonl").write_bytes(SHORT.read_bytes())
    with Session.create(out / "a.jsonl"):
        done = _import(src, out)
    assert done.returncode == 1
    (error,) = _errors(done)
    assert "a.jsonl" in error
    assert "writing" in error
    assert "delete" not in error.lower()
    assert (out / "b.jsonl.import-cursor").exists()
