"""Power-loss images: what a file can look like after the machine lost power.

After a power loss, a file is durable up to its last fsync; beyond it the
tail may be cut anywhere, or the file may keep its length with the unsynced
blocks zero-filled or holding stale garbage. Only an unfinished final line
may be repaired; everything else must be reported, never dropped silently.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from loopscribe import (
    AssistantMessage,
    CorruptRecordError,
    Execution,
    Session,
    TextContent,
    UserMessage,
    read,
)
from loopscribe import events as ev


def recording(path: Path) -> tuple[bytes, int, int]:
    """A real recording with a checkpoint mid-way; its bytes and its last sync point."""
    with Session.create(path) as session:
        run = session.begin_run()
        for turn in range(6):
            model = Execution(f"m{turn}", "model")
            run.record(ev.message_end(None, UserMessage(f"question {turn} " + "x" * turn * 900)))
            reply = AssistantMessage((TextContent(f"answer {turn}"),))
            run.record(ev.model_exec_end(model, message=reply))
            if turn == 2:
                checkpoint = run.save_checkpoint({"turn": turn})
        run.detach()  # the process "dies" here: the last records are not synced
    raw = path.read_bytes()
    synced = checkpoint.data["synced"]
    assert synced == {"seq": checkpoint.seq, "offset": checkpoint.offset}
    return raw, checkpoint.seq, checkpoint.end_offset


def line_ends(raw: bytes, start: int) -> list[int]:
    """Offsets just after each newline at or after ``start``."""
    return [i + 1 for i, byte in enumerate(raw) if byte == 0x0A and i >= start]


def test_cut_at_any_line_boundary_after_the_sync_point_is_reported(tmp_path: Path) -> None:
    """A cut on a line boundary after the last sync opens and counts the unsynced records."""
    path = tmp_path / "s.jsonl"
    raw, synced_seq, synced_end = recording(path)
    for end in line_ends(raw, synced_end - 1):
        path.write_bytes(raw[:end])
        with Session.open(path) as session:
            complete = raw[:end].count(b"\n")
            assert session.next_seq == complete
            assert session.unsynced_at_open == complete - 1 - synced_seq
        assert path.read_bytes()[:end] == raw[:end]


def test_cut_inside_a_line_after_the_sync_point_repairs_only_that_line(tmp_path: Path) -> None:
    """A cut mid-line loses exactly the unfinished line; every synced byte stays."""
    path = tmp_path / "s.jsonl"
    raw, _, synced_end = recording(path)
    rng = random.Random(7)
    for cut in sorted(rng.sample(range(synced_end, len(raw)), 40)):
        path.write_bytes(raw[:cut])
        Session.open(path).close()
        kept = path.read_bytes()
        assert raw[:synced_end] == kept[:synced_end]
        assert kept == raw[: raw.rfind(b"\n", 0, cut) + 1]


@pytest.mark.parametrize("fill", ["zeros", "garbage"])
def test_unsynced_blocks_overwritten_are_repaired_or_reported(tmp_path: Path, fill: str) -> None:
    """Zero-filled unsynced blocks are an unfinished line; garbage with newlines is an error."""
    path = tmp_path / "s.jsonl"
    raw, _, synced_end = recording(path)
    start = synced_end + (len(raw) - synced_end) // 3
    rng = random.Random(fill)
    if fill == "zeros":
        filler = bytes(len(raw) - start)
    else:
        filler = bytes(rng.randrange(32, 127) for _ in range(len(raw) - start))
        filler = filler[:100] + b"\n" + filler[101:]
    damaged = raw[:start] + filler
    path.write_bytes(damaged)
    if fill == "zeros":
        # No newline in the zeros: the line they start is unfinished, and only it goes.
        with Session.open(path) as session:
            assert session.size == raw.rfind(b"\n", 0, start) + 1
        assert path.read_bytes() == raw[: raw.rfind(b"\n", 0, start) + 1]
        assert [r.seq for r in read(path)] == list(range(path.read_bytes().count(b"\n")))
    else:
        with pytest.raises(CorruptRecordError) as info:
            Session.open(path)
        assert info.value.offset == raw.rfind(b"\n", 0, start) + 1
        assert path.read_bytes() == damaged  # reported, never silently dropped


def test_sync_marks_are_in_checkpoint_and_close_records(tmp_path: Path) -> None:
    """Checkpoints, run closes and chained session closes say which record the fsync covered."""
    path = tmp_path / "s.jsonl"
    with Session.create(path, chain=True) as session, session.begin_run() as run:
        run.save_checkpoint({"x": 1})
    marks = [(r.type, r.data["synced"], r.seq, r.offset) for r in read(path) if "synced" in r.data]
    assert [m[0] for m in marks] == ["checkpoint", "run_close", "session_close"]
    assert all(mark == {"seq": seq, "offset": offset} for _, mark, seq, offset in marks)
    assert orjson.loads(path.read_bytes().splitlines()[-1])["type"] == "session_close"
    with Session.open(path) as again:
        assert again.unsynced_at_open == 0
