"""Fork server for ``test_crash.py``: forks recording children that the test SIGKILLs.

Run as a script (``python tests/crash_child.py``). Importing loopscribe costs
~150 ms per interpreter, so one long-lived server imports it once and forks
a child (~2-4 ms) per request instead.

Protocol, one ASCII line per message, each written with a single
``os.write`` below ``PIPE_BUF`` so lines from the server and its child never
interleave on the shared stdout pipe:

* test -> server ``spawn <path> <seed>``: fork a child that opens ``path`` and
  records; the server answers ``pid <pid>``.
* child -> test ``opening <pid>``: the child is about to call ``Session.open``.
* child -> test ``ready <pid>``: the file is open and ``run_start`` written.
* child -> test ``sync <pid> <offset>``: every byte before ``offset`` was fsynced
  (``Session.size`` right after ``save_checkpoint`` or ``Run.close``).
* child -> test ``idle <pid>``: the child finished its budget and waits to be killed.
* child -> test ``error <pid> <message>``: recording raised; the child waits to be killed.
* A child's first reports may arrive before the server's ``pid`` line.
* test -> server ``reap <pid>``: the test has sent SIGKILL; the server waits for
  the child and answers ``exit <pid> <wait status>``.

The server reaps a child only when told to, so the child's pid cannot be
reused before the test's ``os.kill`` lands. A child never exits by itself: it
blocks on a lifeline pipe whose write end only the server holds, so if the
server dies its children see EOF and exit instead of lingering. On EOF of its
stdin the server kills and reaps a child still running, then exits.
"""

from __future__ import annotations

import os
import random
import signal
import sys

from loopscribe import Event, Execution, Session

MIN_EVENT_BYTES = 100
MAX_EVENT_BYTES = 256 * 1024
EVENTS_PER_CHILD = 1000
# Mostly ASCII, as tool output is, with characters that exercise JSON escaping
# and multi-byte UTF-8: a raw "\n" in a value must be escaped, or it would
# split a record, and a tail may be cut inside a multi-byte character.
_PLAIN = "abcdefghijklmnopqrstuvwxyz0123456789 "
_SPECIAL = '"\\\n\t/é€😀'


def _send(line: str) -> None:
    os.write(1, line.encode() + b"\n")


def _payload(rng: random.Random, blob: str) -> str:
    # Log-uniform sizes: most events are small, some are large, as in real sessions.
    size = int(MIN_EVENT_BYTES * (MAX_EVENT_BYTES / MIN_EVENT_BYTES) ** rng.random())
    start = rng.randrange(len(blob) - size)
    return blob[start : start + size]


def record(path: str, seed: int, blob: str) -> None:
    """Open ``path``, record events of mixed sizes, and report every synced end offset."""
    pid = os.getpid()
    rng = random.Random(seed)
    _send(f"opening {pid}")
    session = Session.open(path)
    run = session.begin_run()
    _send(f"ready {pid}")
    for n in range(EVENTS_PER_CHILD):
        call = Execution(f"call_{seed}_{n}", "tool", parent_id=f"turn_{seed}")
        choice = rng.random()
        if choice < 0.6:
            run.record(
                Event("tool_exec_end", call, {"tool": "read", "result": _payload(rng, blob)})
            )
        elif choice < 0.92:
            run.record(Event("tool_exec_start", call, {"tool": "grep", "args": {"q": str(n)}}))
        elif choice < 0.96:
            run.save_checkpoint({"turn": n, "notes": _payload(rng, blob)})
            _send(f"sync {pid} {session.size}")
        else:
            run.close()
            _send(f"sync {pid} {session.size}")
            run = session.begin_run()
    run.close()
    _send(f"sync {pid} {session.size}")


def _child(lifeline: int, path: str, seed: int, blob: str) -> None:
    try:
        record(path, seed, blob)
        _send(f"idle {os.getpid()}")
    except BaseException as exc:
        _send(f"error {os.getpid()} {exc!r}"[:400].replace("\n", " "))
    # Wait for SIGKILL; EOF means the server died, so leave.
    os.read(lifeline, 1)
    os._exit(0)


def serve() -> None:
    """Answer ``spawn`` and ``reap`` requests on stdin until EOF."""
    rng = random.Random(0)
    blob = "".join(
        rng.choice(_SPECIAL if rng.random() < 0.02 else _PLAIN) for _ in range(MAX_EVENT_BYTES + 1)
    )
    lifeline, keep = os.pipe()
    running: set[int] = set()
    try:
        for line in sys.stdin.buffer:
            match line.decode().split():
                case ["spawn", path, seed]:
                    pid = os.fork()
                    if pid == 0:
                        os.close(keep)
                        signal.signal(signal.SIGINT, signal.SIG_DFL)
                        _child(lifeline, path, int(seed), blob)
                    running.add(pid)
                    _send(f"pid {pid}")
                case ["reap", pid_text]:
                    pid = int(pid_text)
                    running.discard(pid)
                    _, status = os.waitpid(pid, 0)
                    _send(f"exit {pid} {status}")
                case other:
                    _send(f"bad {other!r}")
    finally:
        for pid in running:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


if __name__ == "__main__":
    serve()
