"""Importing many transcripts at once: worker processes and fsyncs paid per pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe.importers import CURSOR_SUFFIX, _pool
from loopscribe.importers._batch import SyncBatch, owing_syncs
from loopscribe.importers._pool import import_many

from ._support import copy_transcript, normal_form, transcripts
from .test_cli import run_cli

CLAUDE = transcripts("claude-code")


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """Every Claude Code transcript (with its subagents), each twice under another name."""
    folder = tmp_path / "src"
    for path in CLAUDE:
        copy_transcript(path, folder)
    for path in CLAUDE[:4]:
        twin = folder / f"twin-{path.name}"
        twin.write_bytes(path.read_bytes())
    return folder


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.jsonl") if not p.name.startswith("agent-"))


def _cursor(path: Path) -> dict[str, Any]:
    """A cursor without what is random in every import (the session and run IDs)."""
    obj: dict[str, Any] = orjson.loads(path.read_bytes())
    obj.pop("session_id")
    obj.pop("run_id")
    return obj


def _result(out: Path) -> dict[str, Any]:
    """Every session's normal form and cursor, by file name."""
    found: dict[str, Any] = {}
    for path in sorted(out.iterdir()):
        if path.name.endswith(CURSOR_SUFFIX):
            found[path.name] = _cursor(path)
        elif path.suffix == ".jsonl":
            found[path.name] = normal_form(path)
        else:
            found[path.name] = path.read_bytes()  # nothing else is expected; shown if there
    return found


def test_parallel_import_writes_what_one_process_writes(tmp_path: Path, sources: Path) -> None:
    """Two worker processes write the same records and cursors as one process, byte for byte."""
    files = _files(sources)
    one = import_many("claude-code", files, tmp_path / "one", jobs=1, finished=True)
    two = import_many("claude-code", files, tmp_path / "two", jobs=2, finished=True)
    assert [o.path for o in one] == [o.path for o in two] == files
    assert all(o.error is None for o in one + two)
    assert [o.report.records for o in one if o.report] == [
        o.report.records for o in two if o.report
    ]
    assert _result(tmp_path / "one") == _result(tmp_path / "two")
    assert len(list((tmp_path / "one").glob("*.jsonl"))) == len(files)


def test_a_pass_owes_its_fsyncs_and_saves_cursors_after_paying(
    tmp_path: Path, sources: Path
) -> None:
    """Inside a pass no cursor is written; paying fsyncs the sessions, then saves every cursor."""
    files = _files(sources)[:3]
    out = tmp_path / "out"
    from loopscribe.importers import claude_code

    batch = SyncBatch()
    with owing_syncs(batch):
        for path in files:
            claude_code.import_transcript(path, out, finished=True)
    assert list(out.glob(f"*{CURSOR_SUFFIX}")) == []
    assert batch.owed == 2 * len(files)  # each session file and its cursor
    assert batch.pay() == {}
    assert len(list(out.glob(f"*{CURSOR_SUFFIX}"))) == len(files)
    # sessions, their folder, cursors, the cursors' folder
    assert batch.paid == 2 * len(files) + 2
    again = [claude_code.import_transcript(p, out, finished=True) for p in files]
    assert all(r.up_to_date for r in again)


_KILLED = """
import os, signal, sys
from pathlib import Path
from loopscribe.importers import _batch, _pool

where = sys.argv[3]
real_replace = _batch.replace_file
real_fsync = os.fsync
saved = []

def replace_file(path, data):
    real_replace(path, data)
    saved.append(path)
    if where == "after-one-cursor":
        os.killpg(0, signal.SIGKILL)

def fsync(fd):
    real_fsync(fd)
    if where == "before-cursors":
        os.killpg(0, signal.SIGKILL)

_batch.replace_file = replace_file
os.fsync = fsync

def outcome(found):
    if where == "first-pass":
        os.killpg(0, signal.SIGKILL)  # the workers die halfway through their passes too

files = sorted(p for p in Path(sys.argv[1]).glob("*.jsonl") if not p.name.startswith("agent-"))
jobs = 2 if where == "first-pass" else 1
_pool.import_many("claude-code", files, Path(sys.argv[2]), jobs=jobs, finished=True,
                  on_outcome=outcome)
"""


@pytest.mark.parametrize("where", ["before-cursors", "after-one-cursor", "first-pass"])
def test_a_killed_batched_import_resumes_exactly(tmp_path: Path, sources: Path, where: str) -> None:
    """SIGKILL inside a pass (workers too): the next import ends with exactly a clean import."""
    files = _files(sources)
    clean = tmp_path / "clean"
    import_many("claude-code", files, clean, jobs=1, finished=True)
    out = tmp_path / "out"
    child = subprocess.run(
        [sys.executable, "-c", _KILLED, str(sources), str(out), where],
        capture_output=True,
        timeout=120,
        check=False,
        start_new_session=True,  # its own process group, which it kills whole
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    cursors = list(out.glob(f"*{CURSOR_SUFFIX}"))
    if where == "before-cursors":
        assert cursors == []
    elif where == "after-one-cursor":
        assert len(cursors) == 1
    # Whatever was left, the next import (batched again, two processes) ends where a clean one
    # does; a leftover of a first import without its cursor is moved aside, not imported twice.
    again = import_many("claude-code", files, out, jobs=2, finished=True)
    assert all(o.error is None for o in again)
    for path in out.glob("*.leftover"):
        path.unlink()
    assert _result(out) == _result(clean)


def test_the_command_imports_with_jobs_and_reports_in_order(
    tmp_path: Path,
    sources: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--jobs 2`` and ``--jobs 1`` print the same JSON reports, in the same order."""
    monkeypatch.setattr(_pool, "PARALLEL_MIN_BYTES", 0)  # workers even for these few bytes
    printed = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}"
        argv = ["--json", "import", "claude-code", str(sources), "--out", str(out)]
        code, stdout, _ = run_cli(capsys, *argv, "--settle", "0", "--jobs", jobs)
        assert code == 0
        reports = [orjson.loads(line) for line in stdout.splitlines()]
        for report in reports:
            report.pop("session_id")
            report["destination"] = Path(report["destination"]).name
        printed[jobs] = reports
    assert printed["1"] == printed["2"]
    assert len(printed["1"]) == len(_files(sources))


def test_a_small_import_stays_in_this_process(tmp_path: Path, sources: Path) -> None:
    """Less than PARALLEL_MIN_BYTES to import: no worker is started, whatever ``jobs`` says."""
    files = _files(sources)
    sizes = [p.stat().st_size for p in files]
    assert sum(sizes) < _pool.PARALLEL_MIN_BYTES
    read: dict[Path, int] = {}  # progress is reported only by imports in this process
    outcomes = import_many(
        "claude-code",
        files,
        tmp_path / "out",
        jobs=2,
        sizes=sizes,
        finished=True,
        on_progress=read.__setitem__,
    )
    assert all(o.report is not None for o in outcomes)
    assert sorted(read) == files
    assert [read[p] for p in files] == [p.stat().st_size for p in files]


@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_a_bad_jobs_value_is_refused(
    tmp_path: Path, sources: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    """``--jobs`` takes a whole number of processes, 1 or more; anything else says so."""
    code, _, err = run_cli(capsys, "import", "claude-code", str(sources), "--jobs", jobs)
    assert code == 2
    assert "not a number of processes (1 or more)" in err
