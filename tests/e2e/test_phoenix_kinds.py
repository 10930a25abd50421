"""What Phoenix shows of the framework examples and an imported Claude Code session.

The three examples run as their users run them (``python examples/X.py DIR``,
configured only by ``OTEL_*`` variables, spans sent live over OTLP/HTTP), and
a real Claude Code transcript is imported and sent by ``loopscribe export``
over gRPC, all into one Phoenix project. Phoenix must type every span (none
UNKNOWN), show each chat span's model and, where loopscribe sent them, its
provider and token counts, and group each session file's runs as one
Phoenix session by ``session.id``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from loopscribe import read
from loopscribe.importers import claude_code
from loopscribe.otel import replay
from loopscribe.testing import captured_spans

from .conftest import Phoenix
from .test_phoenix import loopscribe_cli, wait_for_spans

PROJECT = "loopscribe-e2e-kinds"
ROOT = Path(__file__).parents[2]
EXAMPLES = ("pydantic_ai_agent.py", "langchain_agent.py", "openai_agents_agent.py")
TRANSCRIPT = ROOT / "tests/data/transcripts/claude-code/short.jsonl"
EXAMPLE_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Sent:
    """The session files sent, loopscribe's own spans for them, and what Phoenix stored."""

    files: list[Path]
    ours: dict[str, ReadableSpan]
    stored: list[dict[str, Any]]


def _env(phoenix: Phoenix, *, grpc: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if grpc:
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{phoenix.grpc_port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_EXPORTER_OTLP_INSECURE="true",
        )
    else:
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.base_url,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
    env["OTEL_RESOURCE_ATTRIBUTES"] = f"openinference.project.name={PROJECT}"
    return env


@pytest.fixture(scope="module")
def sent(phoenix: Phoenix, tmp_path_factory: pytest.TempPathFactory) -> Sent:
    folder = tmp_path_factory.mktemp("kinds")
    for example in EXAMPLES:
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / example), str(folder)],
            env=_env(phoenix, grpc=False),
            capture_output=True,
            text=True,
            timeout=EXAMPLE_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"{example} failed:\n{done.stderr}"
    imported = tmp_path_factory.mktemp("imported")
    claude_code.import_transcript(TRANSCRIPT, imported, finished=True)
    transcript = imported / TRANSCRIPT.name
    loopscribe_cli("--json", "export", str(transcript), env=_env(phoenix, grpc=True))
    files = sorted(folder.glob("*.jsonl"))
    files = [f for f in files if not f.name.endswith(".otlp.jsonl")] + [transcript]
    assert len(files) == 4
    captured = captured_spans()
    for path in files:
        replay(path, captured.processor)
    ours = {f"{s.context.span_id:016x}": s for s in captured.spans if s.context is not None}
    stored = wait_for_spans(phoenix, PROJECT, len(ours))
    return Sent(files, ours, stored)


def test_no_span_is_unknown(sent: Sent) -> None:
    """Every span of the examples and the import has a kind Phoenix shows."""
    kinds = Counter(span["span_kind"] for span in sent.stored)
    assert len(sent.stored) == len(sent.ours)
    assert "UNKNOWN" not in kinds, kinds
    assert {"AGENT", "LLM", "TOOL", "CHAIN"} <= set(kinds), kinds


def _session_of(span: ReadableSpan) -> str:
    return str((span.attributes or {})["session.id"])


def test_chat_spans_show_model_provider_and_tokens(sent: Sent) -> None:
    """Every chat span of every example and of the import shows model, provider and tokens.

    Phoenix reads them off loopscribe's GenAI attributes (``llm.model_name``,
    ``llm.provider`` / ``llm.system``, ``llm.token_count.*``); a chat span
    without any of them would show an LLM call of unknown model or cost.
    """
    chats = [s for s in sent.stored if s["span_kind"] == "LLM"]
    sessions = {records[0].session_id: path.name for path, records in _files(sent)}
    by_session: Counter[str] = Counter()
    for stored in chats:
        attrs = stored["attributes"]
        span = sent.ours[stored["context"]["span_id"]]
        ours = span.attributes or {}
        where = f"{sessions[_session_of(span)]}: {span.name}"
        by_session[_session_of(span)] += 1
        assert attrs.get("llm.model_name"), where
        assert attrs["llm.model_name"] in (
            ours.get("gen_ai.request.model"),
            ours.get("gen_ai.response.model"),
        ), where
        assert ours.get("gen_ai.provider.name"), where
        shown = {attrs.get("llm.provider"), attrs.get("llm.system")} - {None}
        assert ours["gen_ai.provider.name"] in shown, (where, shown)
        prompt, completion = (
            attrs.get("llm.token_count.prompt"),
            attrs.get("llm.token_count.completion"),
        )
        assert isinstance(prompt, int), (where, attrs)
        assert isinstance(completion, int), (where, attrs)
        assert prompt > 0, where
        assert completion > 0, where
        assert prompt == ours["gen_ai.usage.input_tokens"], where
        assert completion == ours["gen_ai.usage.output_tokens"], where
        assert attrs.get("llm.token_count.total") in (None, prompt + completion), where
    # Each of the three examples and the import made chat spans, and all were checked.
    assert set(by_session) == set(sessions), (by_session, sessions)


def _files(sent: Sent) -> list[tuple[Path, list[Any]]]:
    return [(path, list(read(path, decode=False))) for path in sent.files]


def test_sessions_group_by_session_id(phoenix: Phoenix, sent: Sent) -> None:
    """Each session file is one Phoenix session holding one trace per run."""
    path = f"/v1/projects/{urllib.parse.quote(PROJECT, safe='')}/sessions"
    sessions = phoenix.get_json(path, [("limit", "100")])["data"]
    by_id = {s["session_id"]: len(s["traces"]) for s in sessions}
    expected = {}
    for _path, records in _files(sent):
        expected[records[0].session_id] = sum(r.type == "run_start" for r in records)
    assert by_id == expected
    assert len(expected) == len(EXAMPLES) + 1  # every example, and the import
    # Every span Phoenix stored is in the session of the file it came from.
    for stored in sent.stored:
        span = sent.ours[stored["context"]["span_id"]]
        assert stored["attributes"].get("session.id") == _session_of(span)
