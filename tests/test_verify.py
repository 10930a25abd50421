"""The hash chain: every kind of tampering is reported at the right place."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import orjson
import pytest

from loopscribe import Actor, Event, Execution, Record, Session, read, verify
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
    """A file created without chain=True has no chain to verify, and says so, with what it
    could check: every line is a well-formed record (a damaged one is a broken link)."""
    with Session.create(session_path) as s, s.begin_run():
        pass
    report = verify(session_path)
    assert not report.chained
    lines = len(session_path.read_bytes().splitlines())
    assert report.lines == lines
    assert "not hash-chained" in report.describe()
    assert f"its {lines} lines are well-formed records" in report.describe()
    with session_path.open("ab") as file:
        file.write(b'{"not": "a record"}\n')
    damaged = verify(session_path)
    assert damaged.broken is not None
    assert damaged.broken.line == lines + 1


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


def test_record_returns_the_chain_hash_of_its_line(session_path: Path) -> None:
    """In a chained session each written Record carries the SHA-256 its successor's prev holds."""
    seen: list[Record] = []
    with (
        Session.create(session_path, chain=True, observers=[seen.append]) as s,
        s.begin_run() as run,
    ):
        written = run.record(Event("turn_start", Execution("t1", "turn")))
    lines = session_path.read_bytes().splitlines(keepends=True)
    assert written is not None
    assert written.chain_hash == hashlib.sha256(lines[written.seq]).hexdigest()
    assert orjson.loads(lines[written.seq + 1])["prev"] == written.chain_hash
    assert [r.chain_hash for r in seen] == [hashlib.sha256(x).hexdigest() for x in lines]
    assert verify(session_path).head == seen[-1].chain_hash
    # Read back, a Record compares equal to the written one; the hash is the writer's alone.
    assert next(r for r in read(session_path) if r.seq == written.seq) == written


def test_an_unchained_record_has_no_chain_hash(session_path: Path) -> None:
    """Without a chain there is nothing to return."""
    with Session.create(session_path) as s, s.begin_run() as run:
        written = run.record(Event("turn_start", Execution("t1", "turn")))
    assert written is not None
    assert written.chain_hash is None


def unchained_then_chained(path: Path) -> tuple[list[bytes], int]:
    """An unchained session, reopened with chain=True, then reopened plainly: lines, chain seq."""
    with Session.create(path) as s, s.begin_run() as run:
        for i in range(3):
            run.record(Event("turn_start", Execution(f"t{i}", "turn"), {"i": i}))
    with Session.open(path, chain=True) as s, s.begin_run() as run:
        run.record(Event("turn_start", Execution("t3", "turn"), {"i": 3}))
    start = next(r.seq for r in read(path) if r.type == "chain_start")
    with Session.open(path) as s, s.begin_run() as run:  # a chain, once begun, goes on
        written = run.record(Event("turn_start", Execution("t4", "turn"), {"i": 4}))
        assert written is not None
        assert written.chain_hash is not None
    return path.read_bytes().splitlines(keepends=True), start


def test_a_chain_can_begin_on_an_existing_file_and_verify_says_where(session_path: Path) -> None:
    """Session.open(chain=True) starts the chain at a chain_start record; verify checks from it."""
    lines, start = unchained_then_chained(session_path)
    assert start == 6  # session_start, run_start, 3 turns, run_close
    assert orjson.loads(lines[start])["prev"] == hashlib.sha256(lines[start - 1]).hexdigest()
    for before, line in itertools.pairwise(lines[start:]):
        assert orjson.loads(line)["prev"] == hashlib.sha256(before).hexdigest()
    assert all("prev" not in orjson.loads(line) for line in lines[1:start])
    report = verify(session_path)
    assert report.ok
    assert (report.start_seq, report.start_line) == (start, start + 1)
    assert report.records == len(lines) - start
    assert [r.type for r in read(session_path)].count("session_close") == 2
    assert report.describe().endswith(
        f"the chain begins at seq {start} (line {start + 1}; the {start} records before it "
        f"are not chained): {report.records} records verified, chain intact and sealed"
    )


def test_verify_cli_says_where_a_late_chain_begins(
    session_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loopscribe verify` names the chain's first seq, in its line and in --json."""
    _, start = unchained_then_chained(session_path)
    assert main(["verify", str(session_path)]) == 0
    assert f"the chain begins at seq {start}" in capsys.readouterr().out
    assert main(["--json", "verify", str(session_path)]) == 0
    assert orjson.loads(capsys.readouterr().out)["start_seq"] == start


def test_a_late_chain_catches_changes_after_it_and_at_its_anchor(session_path: Path) -> None:
    """A change after chain_start, or to the line it is anchored to, breaks the chain."""
    lines, start = unchained_then_chained(session_path)
    for index, expect_seq in ((start + 2, start + 3), (start - 1, start)):
        changed = list(lines)
        obj = orjson.loads(changed[index])
        obj.setdefault("data", {})["tampered"] = True
        changed[index] = orjson.dumps(obj) + b"\n"
        session_path.write_bytes(b"".join(changed))
        report = verify(session_path)
        assert report.broken is not None
        assert report.broken.seq == expect_seq
        assert report.start_seq == start
    # Records before the anchor were never chained: a change there is not the chain's to see.
    changed = list(lines)
    changed[2] = changed[2].replace(b'"i":0', b'"i":9')
    session_path.write_bytes(b"".join(changed))
    assert verify(session_path).ok


def test_opening_a_chained_file_with_chain_true_adds_no_second_start(session_path: Path) -> None:
    """chain=True on a file that is chained already just continues its chain."""
    chained_file(session_path)
    with Session.open(session_path, chain=True) as s, s.begin_run():
        pass
    assert "chain_start" not in [r.type for r in read(session_path)]
    report = verify(session_path)
    assert report.ok
    assert report.start_seq == 0
    assert "the chain begins" not in report.describe()


def test_a_file_written_before_actors_and_chain_starts_reads_verifies_and_grows(
    session_path: Path,
) -> None:
    """tests/data/chained-v1.jsonl (written by loopscribe before this change) is still intact."""
    golden = Path(__file__).parent / "data" / "chained-v1.jsonl"
    session_path.write_bytes(golden.read_bytes())
    report = verify(session_path)
    assert report.ok
    assert report.records == 7
    assert report.start_seq == 0
    assert report.describe().endswith("7 records verified, chain intact and sealed")
    records = list(read(session_path))
    assert [r.actor for r in records] == [None] * 7
    assert records[1].data["actor"] == {"user_id": "u1", "tenant_id": "t1", "label": "bot"}
    with Session.open(session_path) as s, s.begin_run(actor=Actor("u2")) as run:
        added = run.record(Event("turn_start", Execution("t9", "turn"), actor=Actor(label="x")))
    assert added is not None
    assert added.chain_hash is not None
    report = verify(session_path)
    assert report.ok
    assert report.records == 11
