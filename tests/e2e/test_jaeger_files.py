"""Session files to Jaeger through the Collector, and from Jaeger's spans back to the records.

The sessions are the ones a user has: the quickstart's (``make demo``, run
with no OTLP endpoint, so its spans go to ``SESSION.otlp.jsonl``) and the
Claude Code transcripts of ``tests/data`` imported with ``--export``. The
Collector runs ``collector-config/jaeger.yaml`` as shipped, configured only
through the variables the file reads; Jaeger runs
``collector-config/jaeger-config.yaml``. What Jaeger's query API returns is
compared with what the span files say, and every "open in loopscribe" link
of ``jaeger-ui.json`` and of the Grafana correlations is filled in from the
tags Jaeger returns and opened in a real ``loopscribe serve``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ._spans import Span, assert_same_spans, jaeger_spans, spans_of_file, wait_for_spans
from ._stack import (
    CONFIG_DIR,
    ROOT,
    STARTUP_TIMEOUT_S,
    Jaeger,
    Program,
    http_get,
    start_collector,
    wait_for,
)

TRANSCRIPTS = ROOT / "tests" / "data" / "transcripts" / "claude-code"
CLI_TIMEOUT_S = 300.0

DEMO_BODIES = (
    "Lisbon",  # the user's question, the tool's arguments, the answer
    "sunny",  # the tool's output and the answer
    "weather demo",  # the session's metadata
)
"""Strings that occur only in the bodies of the quickstart session."""

MIN_BODY_CHARS = 24
"""Transcript texts at least this long serve as canaries (shorter ones could be a tool name)."""


def _clean_env() -> dict[str, str]:
    """The environment without OTLP settings: loopscribe then writes span files."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env={**_clean_env(), "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


NOT_BODIES = frozenset({"id", "tool_use_id", "type", "name"})
"""Keys of a transcript's content blocks that hold IDs and names, which spans do carry."""


def _transcript_texts(path: Path) -> set[str]:
    """The message texts, tool inputs and tool outputs of a Claude Code transcript."""
    texts: set[str] = set()

    def collect(value: object) -> None:
        if isinstance(value, str):
            if len(value) >= MIN_BODY_CHARS:
                texts.add(value)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if key not in NOT_BODIES:
                    collect(item)

    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        if isinstance(message, dict):
            collect(message.get("content"))
    return texts


@dataclass(frozen=True, slots=True)
class Sessions:
    """The recorded and imported sessions, and the spans their span files hold."""

    folder: Path
    span_files: list[Path]
    expected: list[Span]
    bodies: set[str]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Sessions:
    """``make demo``'s session and the imported transcripts, with their span files."""
    folder = tmp_path_factory.mktemp("sessions")
    python = sys.executable
    _run([python, str(ROOT / "examples" / "quickstart.py"), str(folder / "demo")], ROOT)
    _run(
        [
            python,
            "-m",
            "loopscribe",
            "import",
            "claude-code",
            str(TRANSCRIPTS),
            "--out",
            str(folder / "imported"),
            "--export",
            "--settle",
            "0",
        ],
        ROOT,
    )
    span_files = sorted(folder.glob("**/*.otlp.jsonl"))
    assert len(span_files) >= 2, f"no span files written: {sorted(folder.rglob('*'))}"
    expected = [span for path in span_files for span in spans_of_file(path)]
    bodies = set(DEMO_BODIES)
    for transcript in TRANSCRIPTS.rglob("*.jsonl"):
        bodies |= _transcript_texts(transcript)
    for path in (folder / "demo").glob("*.jsonl"):
        if not path.name.endswith(".otlp.jsonl"):
            text = path.read_text(encoding="utf-8")
            assert all(b in text for b in DEMO_BODIES), "the demo session lost a canary body"
    return Sessions(folder, span_files, expected, bodies)


@pytest.fixture(scope="module")
def stored(
    sessions: Sessions, jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Span]]:
    """What Jaeger holds for the sessions' traces once the Collector delivered every span."""
    workdir = tmp_path_factory.mktemp("collector-files")
    collector = start_collector(
        workdir,
        jaeger=jaeger,
        files=f"{sessions.folder}/**/*.otlp.jsonl",
        storage=workdir / "storage",
    )
    try:
        wait_for_spans(jaeger, sessions.expected, extra=collector.program.log_tail())
        collector.program.check_alive()
        yield jaeger_spans(jaeger, {s.trace_id for s in sessions.expected})
    finally:
        collector.stop()


def test_every_span_of_the_files_arrives_once_with_its_tree_name_and_kind(
    sessions: Sessions, stored: list[Span]
) -> None:
    """Jaeger holds each span of the demo and import span files once, equal to the file's."""
    names = {s.name for s in sessions.expected}
    assert {"invoke_agent weather-bot", "chat demo-model-1", "execute_tool get_weather"} <= names
    assert len(sessions.expected) > 100, "the import wrote fewer spans than its transcripts hold"
    assert_same_spans(stored, sessions.expected)
    # The file receiver names the file each span was read from.
    files = {s.span_id: path.name for path in sessions.span_files for s in spans_of_file(path)}
    assert {s.span_id: s.attributes.get("log.file.name") for s in stored} == files
    roots = [s for s in stored if s.parent_id is None]
    assert len(roots) == len({s.trace_id for s in stored}), "one root span per trace (the run)"


def test_spans_carry_references_and_not_one_body(
    sessions: Sessions, stored: list[Span], jaeger: Jaeger
) -> None:
    """Every model and tool span keeps its ``gen_ai.*_ref`` attributes; no body reaches Jaeger."""
    refs = {
        (s.span_id, k): v
        for s in sessions.expected
        for k, v in s.attributes.items()
        if re.fullmatch(r"gen_ai\..*_ref", k)
    }
    assert any(k == "gen_ai.input.messages_ref" for _, k in refs)
    assert any(k == "gen_ai.output.messages_ref" for _, k in refs)
    names = {k for _, k in refs}
    got = {(s.span_id, k): v for s in stored for k, v in s.attributes.items() if k in names}
    assert {key: got.get(key) for key in refs} == refs
    traces = {s.trace_id for s in sessions.expected}
    assert len(sessions.bodies) > 20, "too few canary bodies: the transcript format changed?"
    # Jaeger's own answers, raw: tags, process tags, logs, warnings, everything.
    for trace_id in traces:
        status, raw = http_get(f"{jaeger.query_url}/api/traces/{trace_id}")
        assert status == 200
        text = json.dumps(json.loads(raw), ensure_ascii=False)
        leaked = sorted(b[:60] for b in sessions.bodies if b in text)
        assert not leaked, f"trace {trace_id}: bodies in Jaeger: {leaked}"


# -- one click: from a span in Jaeger to its records in loopscribe serve --------------


@pytest.fixture(scope="module")
def viewer(sessions: Sessions, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``loopscribe serve`` over the sessions folder, on a free port; its base URL."""
    workdir = tmp_path_factory.mktemp("serve")
    program = Program(
        "loopscribe serve",
        [sys.executable, "-m", "loopscribe", "serve", str(sessions.folder), "--port", "0"],
        {**_clean_env(), "PYTHONPATH": str(ROOT / "src")},
        workdir / "serve.log",
    )

    def listening() -> str | None:
        program.check_alive()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", program.log_text())
        return found.group(0) if found else None

    try:
        yield wait_for(
            "loopscribe serve", listening, timeout_s=STARTUP_TIMEOUT_S, detail=program.log_tail
        )
    finally:
        program.stop()


def _page_data(url: str) -> dict[str, Any]:
    """GET a viewer page (following redirects) and return the JSON it embeds."""
    status, body = http_get(url)
    assert status == 200, f"{url}: {status} {body[:300]!r}"
    found = re.search(rb'<script id="ls-data" type="application/json">(.*?)</script>', body, re.S)
    assert found, f"{url}: no page data"
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def _fill_jaeger(template: str, values: Mapping[str, str]) -> str:
    """Fill ``#{name}`` as Jaeger's UI does: each value URL-encoded."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in values, f"{template}: the span has no tag {name!r}"
        return urllib.parse.quote(values[name], safe="")

    return re.sub(r"#\{([^}]+)\}", value, template)


def _fill_grafana(template: str, values: Mapping[str, str]) -> str:
    """Fill a provisioned correlation URL: ``$$`` is a literal ``$``, then ``${field}``."""
    url = template.replace("$$", "$")
    return re.sub(r"\$\{([^}]+)\}", lambda m: urllib.parse.quote(values[m.group(1)], safe=""), url)


def _local(url: str, base: str) -> str:
    """The same path and query on the test's viewer instead of the configured host."""
    parts = urllib.parse.urlsplit(url)
    return base + urllib.parse.urlunsplit(("", "", parts.path, parts.query, ""))


def _link_spans(stored: list[Span]) -> list[Span]:
    """A span of each name of the demo trace and a few imported ones: runs, models, tools."""
    picked: dict[str, Span] = {}
    for span in stored:
        kind = span.attributes.get("gen_ai.operation.name", "run")
        picked.setdefault(f"{span.name.split(' ')[0]}:{kind}", span)
    return list(picked.values())


def _assert_selects(data: Mapping[str, Any], span: Span) -> None:
    assert data["view"] == "run", data.get("view")
    run = data["run"]
    selected = data.get("select") or run["span_id"]
    assert selected == span.span_id, f"{span.name}: the page selects {selected}, not {span.span_id}"
    assert run["run_id"] == span.attributes["loopscribe.run.id"]


def test_every_jaeger_link_pattern_opens_the_spans_records(
    stored: list[Span], viewer: str, jaeger: Jaeger
) -> None:
    """Each link of jaeger-ui.json, filled from a span's tags in Jaeger, opens that span's page."""
    patterns = json.loads((CONFIG_DIR / "jaeger-ui.json").read_text())["linkPatterns"]
    team = json.loads((CONFIG_DIR / "team-viewer" / "jaeger-ui.json").read_text())["linkPatterns"]
    assert patterns
    assert team
    opened: set[str] = set()
    for span in _link_spans(stored):
        values = {**span.attributes, "traceID": span.trace_id, "spanID": span.span_id}
        for pattern in [*patterns, *team]:
            if pattern["type"] == "tags" and pattern["key"] not in span.attributes:
                continue  # Jaeger shows this link on spans that carry the tag only
            url = _local(_fill_jaeger(pattern["url"], values), viewer)
            data = _page_data(url)
            path = urllib.parse.urlsplit(url).path
            if pattern["type"] == "traces":
                root = next(
                    s.span_id for s in stored if s.trace_id == span.trace_id and s.parent_id is None
                )
                assert data["view"] == "run", url
                assert data["run"]["span_id"] == root, url
            elif "/record/" in path:
                assert data["view"] == "record", url
                assert data["record"]["seq"] == int(path.rsplit("/", 1)[1]), url
                assert data["span"]["span_id"] == span.span_id, url
            elif "execution=" in url:
                _assert_selects(data, span)
            else:
                assert data["view"] == "run", url
                assert data["run"]["run_id"] == span.attributes["loopscribe.run.id"], url
            opened.add(pattern["url"])
    not_opened = {p["url"] for p in [*patterns, *team]} - opened
    assert not not_opened, f"no span of the sessions shows these links: {not_opened}"


def test_grafana_correlation_urls_open_the_spans_records(stored: list[Span], viewer: str) -> None:
    """The Tempo data sources' correlation URL, filled from a span, opens that span's page."""
    templates = []
    for path in (
        CONFIG_DIR / "grafana" / "provisioning" / "datasources" / "tempo.yaml",
        CONFIG_DIR / "team-viewer" / "grafana-tempo.yaml",
    ):
        for source in yaml.safe_load(path.read_text())["datasources"]:
            for correlation in source.get("correlations", []):
                templates.append(correlation["config"]["target"]["url"])
    assert len(templates) == 2
    for span in _link_spans(stored):
        for template in templates:
            ids = {"traceID": span.trace_id, "spanID": span.span_id}
            _assert_selects(_page_data(_local(_fill_grafana(template, ids), viewer)), span)
