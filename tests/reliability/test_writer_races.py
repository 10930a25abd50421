"""Single writer under races: many processes contend for Session.open on one file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopscribe import Event, Session, SessionLockedError, read

WORKERS = 4
ATTEMPTS = int(os.environ.get("LOOPSCRIBE_RACE_ATTEMPTS", "10000"))

# argv: path, go-file, worker id, attempts. Only SessionLockedError is expected;
# anything else escapes and fails the process.
CONTENDER = textwrap.dedent(
    """
    import json, os, sys, time
    from loopscribe import Event, Session, SessionLockedError

    path, go, worker, attempts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    while not os.path.exists(go):
        time.sleep(0.001)
    pid = os.getpid()
    wins = locked = 0
    for attempt in range(attempts):
        try:
            session = Session.open(path)
        except SessionLockedError:
            locked += 1
            continue
        with session, session.begin_run() as run:
            tag = {"pid": pid, "worker": worker, "attempt": attempt}
            run.record(Event("hold_start", None, tag))
            time.sleep(0.0005)
            run.record(Event("hold_end", None, tag))
        wins += 1
        time.sleep(0.002)  # let the others in, so that every process wins now and then
    print(json.dumps({"wins": wins, "locked": locked}))
    """
)

# argv: path. Records without pause until killed.
HOLDER = textwrap.dedent(
    """
    import sys
    from loopscribe import Event, Session

    session = Session.open(sys.argv[1])
    run = session.begin_run()
    print("locked", flush=True)
    i = 0
    while True:
        run.record(Event("tick", None, {"i": i, "pad": "y" * (i % 500)}))
        i += 1
    """
)


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    """A temporary folder on /dev/shm when it is writable, else in the default temp dir."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="loopscribe-race-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def stop(procs: list[subprocess.Popen[str]]) -> None:
    """Kill every process still running and reap it."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def test_contending_openers_never_write_at_the_same_time(fast_dir: Path) -> None:
    """Only one process writes at a time, seq stays contiguous, only SessionLockedError occurs."""
    path = fast_dir / "race.jsonl"
    Session.create(path).close()
    go = fast_dir / "go"
    per_worker = [ATTEMPTS // WORKERS + (i < ATTEMPTS % WORKERS) for i in range(WORKERS)]
    procs: list[subprocess.Popen[str]] = []
    results: list[dict[str, int]] = []
    try:
        for worker, attempts in enumerate(per_worker):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        CONTENDER,
                        str(path),
                        str(go),
                        str(worker),
                        str(attempts),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        go.touch()
        for proc, attempts in zip(procs, per_worker, strict=True):
            out, err = proc.communicate(timeout=80)
            assert proc.returncode == 0, err
            result = json.loads(out)
            assert result["wins"] + result["locked"] == attempts
            results.append(result)
    finally:
        stop(procs)
    records = list(read(path))
    assert [r.seq for r in records] == list(range(len(records)))
    wins = sum(r["wins"] for r in results)
    assert wins >= WORKERS
    # Each win is exactly run_start, hold_start, hold_end, run_close of one run, never interleaved.
    body = records[1:]
    assert len(body) == 4 * wins
    seen: set[tuple[int, int]] = set()
    for i in range(0, len(body), 4):
        block = body[i : i + 4]
        kinds = [r.type for r in block]
        assert kinds == ["run_start", "hold_start", "hold_end", "run_close"], (i, kinds)
        assert len({r.run_id for r in block}) == 1, (i, [r.run_id for r in block])
        start, end = block[1].data, block[2].data
        assert start == end
        key = (start["pid"], start["attempt"])
        assert key not in seen
        seen.add(key)
    pids = {p.pid for p in procs}
    assert {pid for pid, _ in seen} <= pids
    print(
        {
            "wins": wins,
            "locked": sum(r["locked"] for r in results),
            "winners": len({p for p, _ in seen}),
        }
    )


def test_a_sigkilled_writer_mid_burst_frees_the_lock_at_once(fast_dir: Path) -> None:
    """After SIGKILL of a busy writer another process opens at once and the file is valid."""
    path = fast_dir / "killed.jsonl"
    Session.create(path).close()
    for round_ in range(5):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == "locked\n"
            with pytest.raises(SessionLockedError):
                Session.open(path)
            time.sleep(0.02 + 0.03 * round_)
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
            # The lock is taken without waiting (LOCK_NB) and never retried: this open
            # succeeds only if the kill freed the lock by the time the holder was reaped.
            session = Session.open(path)
        finally:
            stop([holder])
            for stream in (holder.stdout, holder.stderr):
                if stream is not None:
                    stream.close()
        assert holder.returncode == -signal.SIGKILL
        with session, session.begin_run() as run:
            run.record(Event("after_kill", None, {"round": round_}))
        records = list(read(path))
        assert [r.seq for r in records] == list(range(len(records)))
        assert records[-2].type == "after_kill"
