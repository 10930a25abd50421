"""The hash chain: every kind of tampering is reported at the right place."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import orjson
import pytest

from loopscribe import Actor, Event, Execution, Session, read, verify
from loopscribe.cli import main


def chained_file(path: Path, events: int = 6) -> list[bytes]:
    """Record a chained session, reopen it once, and return its lines."""
    with Session.create(path, chain=True) as s, s.begin_run(actor=Actor("u1", "t1", "bot")) as run:
        for i in range(events):
            run.record(Event("turn_start", Execution(f"t{i}", "turn"), {"i": i}))
    with Session.open(path) as s, s.begin_run() as run:
        run.record(Event("turn_start", Execution("late", "turn")))
    return path.read_bytes().splitlines(keepends=True)


def offset_of(lines: list[bytes], index: int) -> int:
    """Byte offset of line ``index`` (0-based)."""
    return sum(len(x) for x in lines[:index])


def test_an_untouched_chain_verifies_and_is_sealed(session_path: Path) -> None:
    """Each record holds the hash of the line before it, across a reopen; close seals."""
    lines = chained_file(session_path)
    for before, line in itertools.pairwise(lines):
        assert orjson.loads(line)["prev"] == hashlib.sha256(before).hexdigest()
    report = verify(session_path)
    assert report.ok
    assert report.records == len(lines)
    assert report.head == hashlib.sha256(lines[-1]).hexdigest()
    types = [r.type for r in read(session_path)]
    assert types.count("session_close") == 2
    assert next(r for r in read(session_path) if r.type == "run_start").data["actor"] == {
        "user_id": "u1",
        "tenant_id": "t1",
        "label": "bot",
    }


def test_changed_record_is_reported_at_the_next_seq(session_path: Path) -> None:
    """Changing a record's data breaks the link of the record after it."""
    lines = chained_file(session_path)
    obj = orjson.loads(lines[4])
    obj["data"]["i"] = 999
    lines[4] = orjson.dumps(obj) + b"\n"
    session_path.write_bytes(b"".join(lines))
    report = verify(session_path)
    assert report.broken is not None
    assert (report.broken.seq, report.broken.line, report.broken.offset) == (
        5,
        6,
        offset_of(lines, 5),
    )
    assert not report.ok
    assert "seq 5" in report.describe()


def test_removed_record_is_reported(session_path: Path) -> None:
    """Removing a record in the middle is reported where the gap is."""
    lines = chained_file(session_path)
    del lines[3]
    session_path.write_bytes(b"".join(lines))
    report = verify(session_path)
    assert report.broken is not None
    assert report.broken.line == 4
    assert report.records == 3


def test_reordered_records_are_reported(session_path: Path) -> None:
    """Swapping two records is reported at the first one out of place."""
    lines = chained_file(session_path)
    lines[3], lines[4] = lines[4], lines[3]
    session_path.write_bytes(b"".join(lines))
    report = verify(session_path)
    assert report.broken is not None
    assert report.broken.line == 4


def test_resealed_rewrite_with_fixed_seq_still_breaks_the_chain(session_path: Path) -> None:
    """Even a tampered record with a valid seq and prev breaks the next link."""
    lines = chained_file(session_path)
    obj = orjson.loads(lines[2])
    obj["data"] = {"i": "forged"}
    lines[2] = orjson.dumps(obj) + b"\n"
    session_path.write_bytes(b"".join(lines))
    report = verify(session_path)
    assert report.broken is not None
    assert report.broken.seq == 3


@pytest.mark.parametrize("keep", [3, 8])
def test_truncated_records_leave_the_file_unsealed(session_path: Path, keep: int) -> None:
    """Cutting complete records from the end is reported: the seal is gone."""
    lines = chained_file(session_path)
    session_path.write_bytes(b"".join(lines[:keep]))
    report = verify(session_path)
    assert report.broken is None
    assert not report.sealed
    assert not report.ok
    assert report.records == keep
    assert "without its session_close seal" in report.describe()


def test_verify_of_an_unchained_file_says_so(session_path: Path) -> None:
    """A file created without chain=True has nothing to verify, and says so."""
    with Session.create(session_path) as s, s.begin_run():
        pass
    report = verify(session_path)
    assert not report.chained
    assert "not hash-chained" in report.describe()


def test_verify_cli_reports_and_sets_the_exit_status(
    session_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loopscribe verify` prints the count or the first broken link, with a matching status."""
    lines = chained_file(session_path)
    assert main(["verify", str(session_path)]) == 0
    assert f"{len(lines)} records verified" in capsys.readouterr().out
    assert b'"i":1' in lines[3]
    lines[3] = lines[3].replace(b'"i":1', b'"i":7')
    session_path.write_bytes(b"".join(lines))
    assert main(["--json", "verify", str(session_path)]) == 1
    got = orjson.loads(capsys.readouterr().out)
    assert got["broken"]["seq"] == 4
