"""Crash safety: SIGKILL a recording process at random moments, then reopen the file.

A fork server (``crash_child.py``) imports loopscribe once and forks one
recording child per kill, because a fresh interpreter costs ~165 ms against
~3 ms for a fork. ``LOOPSCRIBE_CRASH_KILLS`` sets the number of kills (default
200); ``LOOPSCRIBE_CRASH_SEED`` replays the random choices (child seeds and
kill delays), though not the timing of the processes.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loopscribe import Session, read

SERVER = Path(__file__).with_name("crash_child.py")
KILLS = int(os.environ.get("LOOPSCRIBE_CRASH_KILLS", "200"))
SEED = int(os.environ.get("LOOPSCRIBE_CRASH_SEED", str(random.SystemRandom().randrange(2**32))))
# Children are killed within this window after run_start; a child records for
# longer than that. A share of them is killed instead within a shorter window
# after it says it starts Session.open, to land inside open and begin_run
# (a millisecond or two): counted from the fork, that moment was hit too rarely
# to rely on.
MAX_DELAY_S = 0.025
EARLY_KILL_SHARE = 0.2
EARLY_WINDOW_S = 0.002
KILLS_PER_FILE = 8
MAX_FILE_BYTES = 2 << 20
REPLY_TIMEOUT_S = 30.0


class ForkServer:
    """The test's end of the fork server: line-based requests and replies."""

    def __init__(self) -> None:
        """Start the server process."""
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._stdin = self.process.stdin
        self._stdout = self.process.stdout.fileno()
        self._pending = b""

    def send(self, request: str) -> None:
        """Send one request line."""
        self._stdin.write(request.encode() + b"\n")

    def next_line(self, deadline: float) -> list[str] | None:
        """The next reply or report, split into words; ``None`` once ``deadline`` passes."""
        while b"\n" not in self._pending:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return None
            ready, _, _ = select.select([self._stdout], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._stdout, 65536)
            if not chunk:
                raise AssertionError(f"fork server exited with {self.process.wait()}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode().split()

    def close(self) -> None:
        """Stop the server (it kills and reaps any child left) and wait for it."""
        self._stdin.close()
        try:
            self.process.wait(timeout=10)
        finally:
            if self.process.returncode is None:
                self.process.kill()
                self.process.wait()
            assert self.process.stdout is not None
            self.process.stdout.close()


@dataclass
class Stats:
    """What the kills hit, to show the schedule covers the interesting moments."""

    kills: int = 0
    files: int = 0
    before_ready: int = 0
    torn_tails: int = 0
    unsynced_kills: int = 0
    idle_kills: int = 0
    syncs: int = 0
    tail_bytes: list[int] = field(default_factory=list)


def _absorb_sync(path: Path, synced: bytearray, offset: int) -> None:
    """Copy the newly synced bytes ``[len(synced), offset)`` of ``path`` into ``synced``."""
    assert offset >= len(synced), f"synced offset went back: {offset} < {len(synced)}"
    with path.open("rb") as stream:
        stream.seek(len(synced))
        chunk = stream.read(offset - len(synced))
    assert len(chunk) == offset - len(synced), f"{path}: file ends before synced offset {offset}"
    synced += chunk


def _check_reopen(path: Path, synced: bytes, stats: Stats) -> bytes:
    """Reopen ``path`` after a kill, assert the crash rules, and return the file as repaired."""
    before = path.read_bytes()
    assert before[: len(synced)] == synced, "a record synced before the kill changed or is gone"
    with Session.open(path) as session:
        after = path.read_bytes()
        keep = before.rfind(b"\n") + 1
        # Only the bytes after the last newline, one unfinished line, may go.
        assert after == before[:keep], (
            f"open kept {len(after)} of {len(before)} bytes, expected {keep}"
        )
        assert b"\n" not in before[len(after) :]
        assert len(after) >= len(synced)
        records = list(read(path))
        assert [r.seq for r in records] == list(range(len(records)))
        assert [r.offset for r in records[1:]] == [r.end_offset for r in records[:-1]]
        assert records[-1].end_offset == len(after) == session.size
        assert session.next_seq == len(records)
        assert len({r.session_id for r in records}) == 1
    if len(before) > len(after):
        stats.torn_tails += 1
        stats.tail_bytes.append(len(before) - len(after))
    if len(after) > len(synced):
        stats.unsynced_kills += 1
    return after


@dataclass
class Kill:
    """What one child reported before it died."""

    pid: int
    opening: bool = False
    ready: bool = False
    idle: bool = False
    syncs: int = 0
    error: str | None = None


def _handle(words: list[str], path: Path, synced: bytearray, kill: Kill) -> None:
    """Act on one report from the child."""
    assert len(words) < 2 or words[1] == str(kill.pid), f"report from another child: {words}"
    match words:
        case ["sync", _, offset]:
            _absorb_sync(path, synced, int(offset))
            kill.syncs += 1
        case ["opening", _]:
            kill.opening = True
        case ["ready", _]:
            kill.ready = True
        case ["idle", _]:
            kill.idle = True
        case _:
            kill.error = " ".join(words)


def _next(server: ForkServer) -> list[str]:
    """The next line from the server or the child, failing if none comes in time."""
    words = server.next_line(time.monotonic() + REPLY_TIMEOUT_S)
    assert words is not None, f"no reply from the fork server in {REPLY_TIMEOUT_S} s"
    return words


def _kill_once(
    server: ForkServer, path: Path, synced: bytearray, rng: random.Random, stats: Stats
) -> None:
    """Fork a recording child into ``path``, SIGKILL it at a random moment, and reap it."""
    server.send(f"spawn {path} {rng.randrange(2**31)}")
    early: list[list[str]] = []
    while (reply := _next(server))[0] != "pid":
        # The child may report before its parent sends the pid.
        early.append(reply)
    kill = Kill(int(reply[1]))
    for words in early:
        _handle(words, path, synced, kill)
    # Mostly count the delay from run_start, so most kills land while recording;
    # sometimes from the start of Session.open, so some land inside open and begin_run.
    in_open = rng.random() < EARLY_KILL_SHARE
    try:
        while not (kill.opening if in_open else kill.ready) and kill.error is None:
            _handle(_next(server), path, synced, kill)
        window = EARLY_WINDOW_S if in_open else MAX_DELAY_S
        deadline = time.monotonic() + rng.uniform(0, window)
        while kill.error is None and (report := server.next_line(deadline)) is not None:
            _handle(report, path, synced, kill)
    finally:
        # The server reaps only on request, so the pid cannot have been reused.
        os.kill(kill.pid, signal.SIGKILL)
        server.send(f"reap {kill.pid}")
    while (reply := _next(server))[0] != "exit":
        # Reports sent before the kill landed: those syncs happened all the same.
        _handle(reply, path, synced, kill)
    assert kill.error is None, f"recording child failed: {kill.error}"
    status = int(reply[2])
    assert os.WIFSIGNALED(status), f"child {kill.pid} was not killed: wait status {status}"
    assert os.WTERMSIG(status) == signal.SIGKILL, f"child died of signal {os.WTERMSIG(status)}"
    stats.kills += 1
    stats.syncs += kill.syncs
    stats.before_ready += not kill.ready
    stats.idle_kills += kill.idle


@pytest.mark.slow
def test_sigkill_at_random_moments_never_loses_synced_records(tmp_path: Path) -> None:
    """Every reopen after a SIGKILL succeeds, keeps all synced bytes, and drops only a torn tail."""
    rng = random.Random(SEED)
    stats = Stats()
    server = ForkServer()
    try:
        path = tmp_path / "unused.jsonl"
        synced = bytearray()
        for kill in range(KILLS):
            if kill % KILLS_PER_FILE == 0 or len(synced) > MAX_FILE_BYTES:
                path.unlink(missing_ok=True)
                path = tmp_path / f"session-{kill}.jsonl"
                Session.create(path).close()
                synced = bytearray(path.read_bytes())
                stats.files += 1
            try:
                _kill_once(server, path, synced, rng, stats)
                synced = bytearray(_check_reopen(path, bytes(synced), stats))
            except Exception as exc:
                raise AssertionError(
                    f"kill {kill} of {KILLS} (LOOPSCRIBE_CRASH_SEED={SEED}), {path}: {exc}"
                ) from exc
    finally:
        server.close()
    tails = sorted(stats.tail_bytes)
    print(
        f"crash test (LOOPSCRIBE_CRASH_SEED={SEED}): {stats.kills} kills over {stats.files} "
        f"files, {stats.before_ready} before run_start, {stats.unsynced_kills} with unsynced "
        f"records, {stats.syncs} syncs, {len(tails)} torn tails "
        f"(bytes min {tails[0] if tails else 0}, max {tails[-1] if tails else 0})"
    )
    assert stats.kills == KILLS
    if KILLS >= 100:
        # The schedule must reach the moments that matter, or it proves little:
        # inside open/begin_run, past a sync, and with unsynced records written.
        assert stats.before_ready > 0
        assert stats.syncs > 0
        assert stats.unsynced_kills > 0
