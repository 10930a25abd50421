"""LoopscribeSessionStore, driven like the Claude Agent SDK drives a session store.

Real Claude Code transcripts (``tests/data/transcripts/claude-code``, main
transcript and subagent files) are fed in the order Claude Code wrote their
lines, cut into batches the way the SDK's mirror batcher cuts them: every
``n`` entries, coalesced per file, the main transcript first. The session
file must then hold the records that ``loopscribe import claude-code`` writes
for the same files, and ``load`` must give back every entry as appended.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey, SessionStore, SessionStoreEntry
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import Record, Workspace, read
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore
from loopscribe.importers.claude_code import import_transcript
from loopscribe.live import Bus

from ..importers._support import DATA, spans

TRANSCRIPTS = DATA / "claude-code"
BIG = TRANSCRIPTS / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
"""Main transcript with a Task subagent and an auto-compaction (with its summarizing agent)."""
# Every shipped transcript but ``subagent.jsonl``, whose subagent exists only as
# agent_progress copies (Claude Code before subagent files): the SDK mirrors
# subagents' own transcripts, and the store maps those.
EQUIVALENT = [
    BIG,
    *(
        TRANSCRIPTS / f"{name}.jsonl"
        for name in ("short", "tool_heavy", "python-to-rust-port", "coverage-test-fix")
    ),
]
KEY: SessionKey = {"project_key": "-home-user-project", "session_id": "4d5611e5"}


# -- feeding like the SDK -----------------------------------------------------------


def written_order(transcript: Path) -> list[tuple[str | None, dict[str, Any]]]:
    """The entries of a transcript and its subagents, in the order Claude Code wrote them.

    Each file in its own order, merged by timestamp (a line without one goes
    with the line before it); the subpath is ``None`` for the main transcript.
    """
    files: list[tuple[str | None, Path]] = [(None, transcript)]
    folder = transcript.parent / transcript.stem / "subagents"
    if folder.is_dir():
        files += [(f"subagents/{p.stem}", p) for p in sorted(folder.glob("agent-*.jsonl"))]
    streams = []
    for rank, (subpath, path) in enumerate(files):
        stream = []
        last = ""
        for index, raw in enumerate(path.read_bytes().splitlines()):
            entry = orjson.loads(raw)
            ts = entry.get("timestamp")
            last = ts if isinstance(ts, str) else last
            stream.append(((last, rank, index), subpath, entry))
        streams.append(stream)
    return [(subpath, entry) for _, subpath, entry in heapq.merge(*streams, key=lambda t: t[0])]


def sdk_batches(
    entries: list[tuple[str | None, dict[str, Any]]], size: int
) -> Iterator[tuple[str | None, list[dict[str, Any]]]]:
    """Flushes of ``size`` entries, each coalesced per file in first-seen order (as the SDK)."""
    for start in range(0, len(entries), size):
        by_file: OrderedDict[str | None, list[dict[str, Any]]] = OrderedDict()
        for subpath, entry in entries[start : start + size]:
            by_file.setdefault(subpath, []).append(entry)
        yield from by_file.items()


def key_for(subpath: str | None, key: SessionKey = KEY) -> SessionKey:
    return cast(SessionKey, {**key, "subpath": subpath}) if subpath else key


async def feed(
    store: LoopscribeSessionStore,
    entries: list[tuple[str | None, dict[str, Any]]],
    size: int,
    key: SessionKey = KEY,
) -> None:
    for subpath, batch in sdk_batches(entries, size):
        await store.append(key_for(subpath, key), cast(list[SessionStoreEntry], batch))


# -- comparing with an import ---------------------------------------------------------


def imported(transcript: Path, out: Path) -> Path:
    """Import a transcript as it stands (not finished: the store never finishes a session)."""
    import_transcript(transcript, out, finished=False)
    return out / f"{transcript.stem}.jsonl"


def _source_file(file: str) -> str:
    """``main`` or the subagent's file name: the two sides name the transcript differently."""
    return Path(file).stem if "/subagents/" in file else "main"


def mapped(
    path: Path, *, lines: bool = True
) -> tuple[Counter[tuple[Any, ...]], list[list[tuple[Any, ...]]]]:
    """A session's mapped records (type, time, execution, data) and how they group into runs.

    ``lines=False`` leaves out each record's source line number.
    """
    everything: Counter[tuple[Any, ...]] = Counter()
    runs: dict[str | None, list[tuple[Any, ...]]] = defaultdict(list)
    for record in read(path, decode=False):
        if record.type in ("session_start", "source_entry"):
            continue
        data = dict(record.data)
        source = data.get("source")
        if isinstance(source, dict):
            data["source"] = {**source, "file": _source_file(str(source.get("file")))}
            if not lines:
                del data["source"]["line"]
        execution = None if record.execution is None else record.execution.to_json()
        item = (
            record.type,
            record.ts.isoformat(),
            orjson.dumps(execution),
            orjson.dumps(data, option=orjson.OPT_SORT_KEYS),
        )
        everything[item] += 1
        runs[record.run_id].append(item)
    return everything, sorted(sorted(items) for items in runs.values())


def in_order(path: Path) -> list[tuple[str, str | None]]:
    """The mapped records' types and execution IDs, in file order."""
    return [
        (r.type, None if r.execution is None else r.execution.id)
        for r in read(path, decode=False)
        if r.type not in ("session_start", "source_entry", "run_start", "run_close")
    ]


_SPAN_FILE_KEYS = ("loopscribe.file", "loopscribe.source.file", "messages_ref", "seq.")


def span_shape(found: list[ReadableSpan]) -> list[tuple[Any, ...]]:
    """Spans by name, times, status, parent and attributes, but for file names and seqs."""
    names = {s.context.span_id: s.name for s in found}
    out = []
    for span in found:
        attrs = tuple(
            sorted(
                (k, v)
                for k, v in (span.attributes or {}).items()
                if not any(part in k for part in _SPAN_FILE_KEYS)
                and k not in ("loopscribe.run.id", "loopscribe.session.id", "session.id")
                and k != "gen_ai.conversation.id"
            )
        )
        parent = None if span.parent is None else names.get(span.parent.span_id, "?")
        status = span.status.status_code
        out.append((span.name, span.start_time, span.end_time, status, parent, attrs))
    return sorted(out, key=repr)


# -- the SDK's conformance suite ----------------------------------------------------------


def test_the_sdk_conformance_suite_passes_with_nothing_skipped(tmp_path: Path) -> None:
    """All 14 contracts of claude_agent_sdk.testing run and pass, the optional ones included."""
    stores: list[LoopscribeSessionStore] = []
    numbers = itertools.count()

    def make() -> LoopscribeSessionStore:
        store = LoopscribeSessionStore(tmp_path / str(next(numbers)))
        stores.append(store)
        return store

    for method in ("list_sessions", "list_session_summaries", "delete", "list_subkeys"):
        # The suite skips an optional method the store inherits from the Protocol.
        assert getattr(LoopscribeSessionStore, method) is not getattr(SessionStore, method)
    try:
        asyncio.run(run_session_store_conformance(make))
    finally:
        for store in stores:
            store.close()
    assert len(stores) == 15  # a probe and one fresh store per contract: none was skipped


# -- the same records as an import ------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 50, 500])
@pytest.mark.parametrize("transcript", EQUIVALENT, ids=lambda p: p.stem[:12])
def test_batches_give_the_records_of_an_import(transcript: Path, size: int, tmp_path: Path) -> None:
    """Same records (executions, nesting, usage, source lines) in the same runs as an import."""
    whole = imported(transcript, tmp_path / "import")
    with LoopscribeSessionStore(tmp_path / "store") as store:
        asyncio.run(feed(store, written_order(transcript), size))
        report = store.report(KEY["project_key"], KEY["session_id"])
        assert report is not None
        assert store.mapping_errors == 0
    expected, expected_runs = mapped(whole)
    found, found_runs = mapped(store.path(KEY["project_key"], KEY["session_id"]))
    assert found == expected
    assert found_runs == expected_runs
    imported_report = import_transcript(transcript, tmp_path / "again", finished=False)
    for field in ("model_calls", "tool_calls", "tool_results", "subagents", "compactions",
                  "input_tokens", "output_tokens", "cache_read_tokens", "messages"):  # fmt: skip
        assert getattr(report, field) == getattr(imported_report, field), field


@pytest.mark.parametrize("size", [7, 100, 2000])
def test_any_batch_size_gives_the_records_of_an_import(size: int, tmp_path: Path) -> None:
    """Flushes that cut a subagent or a compaction anywhere, or hold all at once, change nothing."""
    whole = imported(BIG, tmp_path / "import")
    with LoopscribeSessionStore(tmp_path / "store") as store:
        asyncio.run(feed(store, written_order(BIG), size))
    assert mapped(store.path(KEY["project_key"], KEY["session_id"])) == mapped(whole)


def test_the_big_transcript_keeps_subagents_and_compaction_nested(tmp_path: Path) -> None:
    """The Task subagent nests under its tool call, the compaction agent under its context."""
    with LoopscribeSessionStore(tmp_path) as store:
        asyncio.run(feed(store, written_order(BIG), 500))
    parents = {
        r.execution.id: r.execution.parent_id
        for r in read(store.path(KEY["project_key"], KEY["session_id"]), decode=False)
        if r.type == "agent_start" and r.execution is not None
    }
    assert parents["agent-a2898e3"] is not None
    assert parents["agent-a2898e3"].startswith("toolu_")
    assert parents["agent-acompact-e1f845"] == "compact-dd3cc2e6-a191-4331-a0f0-2473e6d7692d"


def test_records_come_in_the_order_of_an_import(tmp_path: Path) -> None:
    """Main entries after a Task result wait for the subagent's batch: the import's order."""
    whole = imported(BIG, tmp_path / "import")
    with LoopscribeSessionStore(tmp_path / "store") as store:
        asyncio.run(feed(store, written_order(BIG), 500))
    assert in_order(store.path(KEY["project_key"], KEY["session_id"])) == in_order(whole)


def test_live_spans_equal_the_spans_of_an_import(tmp_path: Path) -> None:
    """The span processor gets, while the entries arrive, the spans a replay of the import gives."""
    exporter = InMemorySpanExporter()
    with LoopscribeSessionStore(
        tmp_path / "store", span_processor=SimpleSpanProcessor(exporter)
    ) as store:
        asyncio.run(feed(store, written_order(BIG), 50))
    expected = spans(imported(BIG, tmp_path / "import"))
    found = list(exporter.get_finished_spans())
    assert len(found) > 100
    # Runs still open at the end make no root span yet, in both.
    assert span_shape(found) == span_shape(expected)


# -- load, retries, reopening ------------------------------------------------------------------


def test_load_gives_back_every_entry_deep_equal(tmp_path: Path) -> None:
    """Real entries, entries without uuid and hostile values load back as appended, per key."""
    entries = written_order(BIG)
    hostile: list[dict[str, Any]] = [
        {"type": "custom-title", "customTitle": "no uuid"},
        {"type": "x", "$ls": {"nested": [{"$ls": 1}]}, "uuid": "reserved-key"},
        {"type": "x", "big": 2**80, "uuid": "big-int"},
        {"type": "x", "text": "lone \ud800 surrogate", "uuid": "surrogate"},
        {"type": "assistant", "message": "not an object", "uuid": "odd-assistant"},
        {"type": "user", "message": {"content": 7}, "uuid": "odd-user"},
        {"type": "x", "deep": [[[[[[[[[[{"k": None}]]]]]]]]]], "float": 1.5e-300},
    ]
    entries += [(None, e) for e in hostile]
    with LoopscribeSessionStore(tmp_path) as store:
        asyncio.run(feed(store, entries, 50))
        expected: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
        for subpath, entry in entries:
            expected[subpath].append(entry)
        for subpath, wanted in expected.items():
            assert asyncio.run(store.load(key_for(subpath))) == wanted
        assert asyncio.run(store.list_subkeys(KEY)) == sorted(s for s in expected if s)
        assert store.mapping_errors == 0


def test_a_batch_retried_after_a_timeout_is_recorded_once(tmp_path: Path) -> None:
    """The SDK gives up on a slow append; it still lands, and the retry adds only uuid-less entries.

    The protocol: ``uuid`` is the idempotency key, entries without one are
    appended again (the SDK's file-history snapshots here, which map to no
    record, so the mapped records equal one append).
    """
    armed, gate = threading.Event(), threading.Event()

    def slow(record: Record) -> None:
        if armed.is_set():
            gate.wait(5)

    entries = [e for s, e in written_order(TRANSCRIPTS / "tool_heavy.jsonl") if s is None]
    first, second = entries[:20], entries[20:]
    again = [e for e in second if "uuid" not in e]
    assert again, "the transcript should hold entries without uuid"

    async def scenario(store: LoopscribeSessionStore) -> None:
        await store.append(KEY, cast(list[SessionStoreEntry], first))
        armed.set()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(store.append(KEY, cast(list[SessionStoreEntry], second)), 0.05)
        gate.set()
        await store.append(KEY, cast(list[SessionStoreEntry], second))  # the retry

    with LoopscribeSessionStore(tmp_path / "store", observers=[slow]) as store:
        asyncio.run(scenario(store))
        assert asyncio.run(store.load(KEY)) == entries + again
        assert store.duplicates == len(second) - len(again)
    with LoopscribeSessionStore(tmp_path / "once") as once:
        asyncio.run(once.append(KEY, cast(list[SessionStoreEntry], entries)))
    path, single = (s.path(KEY["project_key"], KEY["session_id"]) for s in (store, once))
    assert mapped(path) == mapped(single)


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import orjson
    from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

    batches = orjson.loads(sys.stdin.buffer.read())
    store = LoopscribeSessionStore(sys.argv[1])

    async def main():
        for index, (key, entries) in enumerate(batches):
            await store.append(key, entries)
            if sys.argv[2:] == ["close"]:
                await store.aclose()  # the kill also lands in the batched fsyncs of close
            print(index, flush=True)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("close_each", [False, True], ids=["appending", "closing"])
def test_a_new_process_continues_a_session_killed_mid_append(
    tmp_path: Path, close_each: bool
) -> None:
    """SIGKILL while another process appends (or closes); this one retries the batch and goes on.

    The records equal an import of the files: a batch cut by the kill is
    completed from its stored entries, and the retried batch is recognised
    by its uuids (the entries without one are stored again, per the protocol).
    """
    entries = written_order(BIG)
    batches = [(key_for(s), b) for s, b in sdk_batches(entries, 50)]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path / "store"), *(["close"] if close_each else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write(orjson.dumps(batches))
    child.stdin.close()
    confirmed = -1
    try:
        while confirmed < len(batches) // 2:
            line = child.stdout.readline()
            assert line, (child.wait(), child.stderr.read() if child.stderr else b"")
            confirmed = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
        if child.stderr is not None:
            child.stderr.close()

    async def rest(store: LoopscribeSessionStore) -> None:
        # The SDK retries what was not confirmed; the last confirmed batch is sent again
        # too, as when a kill lands between storing a batch and acknowledging it.
        for key, batch in batches[confirmed:]:
            await store.append(key, cast(list[SessionStoreEntry], batch))

    with LoopscribeSessionStore(tmp_path / "store") as store:
        asyncio.run(rest(store))
        loaded = asyncio.run(store.load(KEY))
    assert loaded is not None
    main = [e for s, e in entries if s is None]
    assert [e for e in loaded if "uuid" in e] == [e for e in main if "uuid" in e]
    assert {orjson.dumps(e) for e in loaded} == {orjson.dumps(e) for e in main}
    path = store.path(KEY["project_key"], KEY["session_id"])
    # Batches the child stored after its last confirmation are sent again, and their
    # entries without a uuid are stored twice (the protocol): the main transcript's
    # line numbers then count the stored entries, so each names its loaded entry.
    assert mapped(path, lines=False) == mapped(imported(BIG, tmp_path / "import"), lines=False)
    sources = [r.data.get("source") for r in read(path, decode=False)]
    main_lines = [
        s for s in sources if isinstance(s, dict) and "/subagents/" not in str(s.get("file"))
    ]
    assert main_lines
    for source in main_lines:
        if source.get("uuid"):
            assert loaded[source["line"] - 1].get("uuid") == source["uuid"], source
    assert len({r.session_id for r in read(path, decode=False)}) == 1


def test_a_closed_store_reopened_continues_mid_turn(tmp_path: Path) -> None:
    """Closing leaves the turn open; a new store continues its calls, response and subagents."""
    entries = written_order(BIG)
    batches = list(sdk_batches(entries, 50))
    for cut in (len(batches) // 3, 2 * len(batches) // 3):
        folder = tmp_path / str(cut)
        for part in (batches[:cut], batches[cut:]):
            with LoopscribeSessionStore(folder) as store:
                for subpath, batch in part:
                    entries_ = cast(list[SessionStoreEntry], batch)
                    asyncio.run(store.append(key_for(subpath), entries_))
        path = store.path(KEY["project_key"], KEY["session_id"])
        assert mapped(path) == mapped(imported(BIG, tmp_path / f"import{cut}"))


def test_resume_from_load_then_more_appends(tmp_path: Path) -> None:
    """The SDK resumes from ``load`` (materialized entries) and appends the next turns."""
    entries = [e for s, e in written_order(TRANSCRIPTS / "python-to-rust-port.jsonl") if s is None]
    cut = len(entries) // 2

    async def first(store: LoopscribeSessionStore) -> list[SessionStoreEntry] | None:
        await store.append(KEY, cast(list[SessionStoreEntry], entries[:cut]))
        return await store.load(KEY)

    with LoopscribeSessionStore(tmp_path / "store") as store:
        resumed = asyncio.run(first(store))
    assert resumed == entries[:cut]
    with LoopscribeSessionStore(tmp_path / "store") as again:
        # A resumed CLI may mirror lines the store has already: their uuids skip them.
        asyncio.run(again.append(KEY, cast(list[SessionStoreEntry], entries[cut - 3 :])))
        assert asyncio.run(again.load(KEY)) == entries
    path = again.path(KEY["project_key"], KEY["session_id"])
    whole = imported(TRANSCRIPTS / "python-to-rust-port.jsonl", tmp_path / "import")
    assert mapped(path) == mapped(whole)


# -- live, concurrent, a workspace --------------------------------------------------------------


def test_observers_see_records_while_the_session_runs(tmp_path: Path) -> None:
    """After each append, the Bus has its records and the exporter the spans they completed."""
    bus = Bus()
    exporter = InMemorySpanExporter()
    entries = [e for s, e in written_order(TRANSCRIPTS / "tool_heavy.jsonl") if s is None]
    seen_spans: list[int] = []
    delivered: list[int] = []

    async def scenario(store: LoopscribeSessionStore) -> None:
        subscription = None
        for start in range(0, len(entries), 5):
            await store.append(KEY, cast(list[SessionStoreEntry], entries[start : start + 5]))
            if subscription is None:
                session_id = next(iter(read(path, decode=False))).session_id
                subscription = bus.subscribe(session_id)
            while (record := subscription.get(timeout=0)) is not None:
                assert isinstance(record, Record)
                delivered.append(record.seq)
            seen_spans.append(len(exporter.get_finished_spans()))

    with LoopscribeSessionStore(
        tmp_path, observers=[bus], span_processor=SimpleSpanProcessor(exporter)
    ) as store:
        path = store.path(KEY["project_key"], KEY["session_id"])
        asyncio.run(scenario(store))
        assert delivered == [r.seq for r in read(path, decode=False)]
    # Spans arrived batch by batch, not at the end.
    assert 0 < seen_spans[len(seen_spans) // 2] < seen_spans[-1]
    assert any(s.name.startswith("execute_tool") for s in exporter.get_finished_spans())


def test_many_sessions_at_once_from_one_event_loop(tmp_path: Path) -> None:
    """Sessions appended concurrently each equal a sequential append; summaries stay right."""
    transcripts = [TRANSCRIPTS / f"{n}.jsonl" for n in ("short", "tool_heavy", "coverage-test-fix")]
    keys = [cast(SessionKey, {"project_key": "p", "session_id": f"s{i}"}) for i in range(6)]
    plans = {
        k["session_id"]: [e for s, e in written_order(transcripts[i % 3]) if s is None]
        for i, k in enumerate(keys)
    }

    async def one(store: LoopscribeSessionStore, key: SessionKey) -> None:
        entries = plans[key["session_id"]]
        # Each session's batches are issued at once: the store keeps their call order.
        await asyncio.gather(
            *(
                store.append(key, cast(list[SessionStoreEntry], entries[i : i + 4]))
                for i in range(0, len(entries), 4)
            )
        )

    async def everything(store: LoopscribeSessionStore) -> list[Any]:
        await asyncio.gather(*(one(store, k) for k in keys))
        return await store.list_session_summaries("p")

    with LoopscribeSessionStore(tmp_path / "store") as store:
        summaries = asyncio.run(everything(store))
        for key in keys:
            assert asyncio.run(store.load(key)) == plans[key["session_id"]]
    by_id = {s["session_id"]: s for s in summaries}
    assert set(by_id) == {k["session_id"] for k in keys}
    for key in keys:
        plan = cast(list[SessionStoreEntry], plans[key["session_id"]])
        folded = fold_session_summary(None, key, plan)
        assert by_id[key["session_id"]]["data"] == folded["data"]
    with LoopscribeSessionStore(tmp_path / "sequential") as alone:
        asyncio.run(alone.append(keys[1], cast(list[SessionStoreEntry], plans["s1"])))
    assert mapped(store.path("p", "s1")) == mapped(alone.path("p", "s1"))


def test_the_event_loop_runs_while_an_append_writes(tmp_path: Path) -> None:
    """File work runs on a worker thread: other tasks run while a slow append is in flight."""
    gate = threading.Event()
    ticks: list[float] = []

    def slow(record: Record) -> None:
        gate.wait(5)

    async def scenario(store: LoopscribeSessionStore) -> None:
        async def ticker() -> None:
            for _ in range(5):
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)
            gate.set()

        await asyncio.gather(store.append(KEY, [{"type": "user", "uuid": "u"}]), ticker())

    with LoopscribeSessionStore(tmp_path, observers=[slow]) as store:
        asyncio.run(scenario(store))
    assert len(ticks) == 5


def test_the_directory_is_a_workspace(tmp_path: Path) -> None:
    """``loopscribe ls`` lists the store's sessions, with their model and messages."""
    with LoopscribeSessionStore(tmp_path) as store:
        asyncio.run(feed(store, written_order(TRANSCRIPTS / "tool_heavy.jsonl"), 50))
    listed = Workspace(tmp_path).list()
    assert [s.path for s in listed] == [store.path(KEY["project_key"], KEY["session_id"])]
    assert listed[0].message_count > 0
    done = subprocess.run(
        [sys.executable, "-m", "loopscribe", "ls", "--json", str(tmp_path)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    shown = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [(s["id"], s["path"]) for s in shown] == [(listed[0].id, str(listed[0].path))]
    assert shown[0]["title"]


def test_odd_keys_make_distinct_safe_file_names(tmp_path: Path) -> None:
    """Keys with slashes, dots, unicode or great length stay inside the folder and apart."""
    keys = [
        {"project_key": "../../etc", "session_id": "passwd"},
        {"project_key": "..", "session_id": "/x"},
        {"project_key": "-home-user-project", "session_id": "-rf"},
        {"project_key": "p", "session_id": ".hidden"},
        {"project_key": "p/q", "session_id": "s"},
        {"project_key": "p", "session_id": "q/s"},
        {"project_key": "ünï", "session_id": "c\u00f3de"},
        {"project_key": "x" * 300, "session_id": "y" * 300},
        {"project_key": "x" * 300, "session_id": "y" * 299 + "z"},
    ]

    async def scenario(store: LoopscribeSessionStore) -> None:
        for i, key in enumerate(keys):
            entry = cast(SessionStoreEntry, {"type": "x", "n": i})
            await store.append(cast(SessionKey, key), [entry])
        for i, key in enumerate(keys):
            assert await store.load(cast(SessionKey, key)) == [{"type": "x", "n": i}]

    with LoopscribeSessionStore(tmp_path / "store") as store:
        asyncio.run(scenario(store))
    files = sorted(p.name for p in (tmp_path / "store").glob("*.jsonl"))
    assert len(files) == len(keys)
    assert all(len(name) < 255 and name[0] not in "-." for name in files)
    assert [p.name for p in tmp_path.iterdir()] == ["store"]
