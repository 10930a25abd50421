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


def test_chat_spans_show_model_provider_and_tokens(sent: Sent) -> None:
    """Phoenix reads model, provider and token counts off every chat span that carries them."""
    chats = [s for s in sent.stored if s["span_kind"] == "LLM"]
    assert chats
    with_everything = 0
    for stored in chats:
        attrs = stored["attributes"]
        ours = sent.ours[stored["context"]["span_id"]].attributes or {}
        assert attrs["llm.model_name"] in (
            ours.get("gen_ai.request.model"),
            ours.get("gen_ai.response.model"),
        )
        if "gen_ai.provider.name" in ours:
            assert attrs["llm.system"] == ours["gen_ai.provider.name"]
        if "gen_ai.usage.input_tokens" in ours:
            assert attrs["llm.token_count.prompt"] == ours["gen_ai.usage.input_tokens"]
            assert attrs["llm.token_count.completion"] == ours["gen_ai.usage.output_tokens"]
            with_everything += "gen_ai.provider.name" in ours
    # The imported Claude Code session records all three for every response.
    assert with_everything >= 2


def test_sessions_group_by_session_id(phoenix: Phoenix, sent: Sent) -> None:
    """Each session file is one Phoenix session holding one trace per run."""
    path = f"/v1/projects/{urllib.parse.quote(PROJECT, safe='')}/sessions"
    sessions = phoenix.get_json(path, [("limit", "100")])["data"]
    by_id = {s["session_id"]: len(s["traces"]) for s in sessions}
    expected = {}
    for file in sent.files:
        records = list(read(file, decode=False))
        expected[records[0].session_id] = sum(r.type == "run_start" for r in records)
    assert by_id == expected
