"""Ship spans out of process while an agent records.

The host loop runs in a background thread and records into a session file
with no exporter of its own; ``loopscribe export --follow`` runs beside it,
sends spans as records land, and keeps a cursor so a restart sends nothing
twice. Stop it with Ctrl-C or SIGTERM: it flushes and saves the cursor first.

    python examples/export_follow.py [DIR]
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from loopscribe import Execution, Session, TextContent, ToolResultMessage
from loopscribe import events as ev


def host_loop(path: Path, turns: int, started: threading.Event) -> None:
    """A stand-in agent: one model call and one tool call per turn, a little apart."""
    with Session.create(path) as session, session.begin_run() as run:
        started.set()
        for turn in range(1, turns + 1):
            model = Execution(f"model_{turn}", "model", parent_id=None)
            run.record(ev.model_exec_start(model, "demo-model-1"))
            time.sleep(0.2)
            run.record(ev.model_exec_end(model, usage={"input_tokens": 30, "output_tokens": 8}))
            tool = Execution(f"call_{turn}", "tool", parent_id=model.id)
            run.record(ev.tool_exec_start(tool, "search", {"query": f"question {turn}"}))
            time.sleep(0.1)
            result = ToolResultMessage(tool.id, "search", (TextContent(f"answer {turn}"),))
            run.record(ev.tool_exec_end(tool, "search", result))
            print(f"host: turn {turn} recorded", flush=True)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-sessions")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"follow-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.jsonl"
    started = threading.Event()
    host = threading.Thread(target=host_loop, args=(path, 5, started))
    host.start()
    started.wait()
    cli = shutil.which("loopscribe") or str(Path(sys.executable).with_name("loopscribe"))
    with subprocess.Popen(
        [cli, "export", "--follow", "--poll-interval", "0.1", str(path)]
    ) as exporter:
        host.join()
        time.sleep(1.5)  # let the follower ship the last spans
        exporter.send_signal(signal.SIGTERM)
        exporter.wait(timeout=30)
    print(f"session: {path}")
    print(f"run `loopscribe export {path}` again: it sends nothing, the cursor remembers")


if __name__ == "__main__":
    main()
