"""Feed a real Claude Code transcript through LoopscribeSessionStore, as the Claude Agent SDK does.

With ``ClaudeAgentOptions(session_store=LoopscribeSessionStore(...))`` the
SDK calls ``append(key, entries)`` while the agent works: the main
transcript's new lines and each subagent's (``subpath``
``subagents/agent-<id>``), in batches of up to 500 entries coalesced per
file. This script does the same offline with a transcript shipped in
``tests/data`` (a session with a subagent and a compaction), so no model and
no API key are needed, and sends the spans through a ``SpanBridge`` while the
batches arrive: to the collector named by ``OTEL_EXPORTER_OTLP_ENDPOINT``
or, when it is unset, to an OTLP JSON lines file in the folder.

Run it with ``python examples/claude_agent_sdk_store.py [DIR]`` (needs
``pip install 'loopscribe[claude-agent-sdk]'``), then search Jaeger for the
trace IDs it prints.
"""

from __future__ import annotations

import asyncio
import heapq
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, cast

import orjson
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from loopscribe import read
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore
from loopscribe.otel import default_processor, describe_destination, trace_id

TRANSCRIPT = (
    Path(__file__).resolve().parents[1]
    / "tests/data/transcripts/claude-code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
)
BATCH = 100
"""Entries per flush: the SDK flushes per turn, or every 500 entries in a long one."""


def written_order(transcript: Path) -> list[tuple[str | None, dict[str, Any]]]:
    """The transcript's and its subagents' lines in the order Claude Code wrote them."""
    files: list[tuple[str | None, Path]] = [(None, transcript)]
    folder = transcript.parent / transcript.stem / "subagents"
    files += [(f"subagents/{p.stem}", p) for p in sorted(folder.glob("agent-*.jsonl"))]
    streams = []
    for rank, (subpath, path) in enumerate(files):
        stream, last = [], ""
        for index, raw in enumerate(path.read_bytes().splitlines()):
            entry = orjson.loads(raw)
            last = entry.get("timestamp") or last
            stream.append(((last, rank, index), subpath, entry))
        streams.append(stream)
    return [(subpath, entry) for _, subpath, entry in heapq.merge(*streams, key=lambda t: t[0])]


async def mirror(store: LoopscribeSessionStore, key: SessionKey) -> int:
    """Append the transcript in SDK-sized flushes, main transcript first in each."""
    entries = written_order(TRANSCRIPT)
    appends = 0
    for start in range(0, len(entries), BATCH):
        by_file: dict[str | None, list[dict[str, Any]]] = {}
        for subpath, entry in entries[start : start + BATCH]:
            by_file.setdefault(subpath, []).append(entry)
        for subpath, batch in by_file.items():
            target = cast(SessionKey, {**key, "subpath": subpath}) if subpath else key
            await store.append(target, cast(list[SessionStoreEntry], batch))
            appends += 1
    # What the SDK reads back to resume the session.
    loaded = await store.load(key)
    assert loaded == [e for s, e in entries if s is None]
    return appends


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="ls-sdk-"))
    key: SessionKey = {"project_key": "-home-user-spotter", "session_id": TRANSCRIPT.stem}
    spans_file = folder / "spans.jsonl"  # only used when no OTLP endpoint is configured
    processor = default_processor(spans_file)
    try:
        with LoopscribeSessionStore(folder, span_processor=processor) as store:
            appends = asyncio.run(mirror(store, key))
            report = store.report(key["project_key"], key["session_id"])
            path = store.path(key["project_key"], key["session_id"])
    finally:
        processor.shutdown()  # flushes; bounded by the export timeout if a collector is down

    assert report is not None
    print(f"{appends} appends of up to {BATCH} entries -> {path}")
    print(
        f"{report.model_calls} model calls, {report.tool_calls} tool calls, "
        f"{report.subagents} subagents, {report.compactions} compaction(s); "
        f"{report.input_tokens} input / {report.output_tokens} output tokens"
    )
    records = list(read(path, decode=False))
    runs = Counter(r.run_id for r in records if r.run_id is not None)
    session_id = records[0].session_id
    print(f"spans sent to {describe_destination(spans_file)}")
    print("search Jaeger for these trace IDs (one per turn):")
    for run_id, count in runs.items():
        print(f"  {trace_id(session_id, run_id):032x}  ({count} records)")
    print(f"browse it: loopscribe ls {folder}  /  loopscribe serve {folder}")


if __name__ == "__main__":
    main()
