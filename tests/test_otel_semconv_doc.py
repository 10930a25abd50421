"""docs/semconv.md covers every Required and Recommended attribute, with a reason when absent.

The attribute lists are the GenAI semantic conventions' (``model/gen-ai/spans.yaml``
of the ``semantic-conventions-genai`` repository): the inference span, the
in-process ``invoke_agent`` span and the ``execute_tool`` span, Required,
Conditionally Required and Recommended levels (Opt-In ones are bodies,
documented as references).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).parents[1] / "docs" / "semconv.md"

USAGE = [
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.text.input_tokens",
    "gen_ai.usage.image.input_tokens",
    "gen_ai.usage.audio.input_tokens",
    "gen_ai.usage.video.input_tokens",
    "gen_ai.usage.text.output_tokens",
    "gen_ai.usage.audio.output_tokens",
]
REQUEST = [
    "gen_ai.request.max_tokens",
    "gen_ai.request.temperature",
    "gen_ai.request.top_p",
    "gen_ai.request.stop_sequences",
    "gen_ai.request.frequency_penalty",
    "gen_ai.request.presence_penalty",
]
CONVENTIONS = {
    "Inference span": [
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.conversation.id",
        "gen_ai.conversation.compacted",
        "gen_ai.output.type",
        "gen_ai.request.choice.count",
        "gen_ai.request.seed",
        "gen_ai.request.stream",
        "gen_ai.request.top_k",
        "gen_ai.response.id",
        "gen_ai.response.model",
        "gen_ai.response.finish_reasons",
        "gen_ai.response.time_to_first_chunk",
        "gen_ai.usage.reasoning.output_tokens",
        "server.address",
        "server.port",
        "error.type",
        *REQUEST,
        *USAGE,
    ],
    "Agent span": [
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.conversation.id",
        "gen_ai.agent.id",
        "gen_ai.agent.name",
        "gen_ai.agent.description",
        "gen_ai.agent.version",
        "gen_ai.data_source.id",
        "gen_ai.output.type",
        "gen_ai.request.choice.count",
        "gen_ai.request.seed",
        "error.type",
    ],
    "Execute tool span": [
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "gen_ai.tool.description",
        "gen_ai.tool.type",
        "error.type",
    ],
}


def tables() -> dict[str, list[list[str]]]:
    """Each ``### heading``'s table rows (cells), below ``## Attributes``."""
    found: dict[str, list[list[str]]] = {}
    heading = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            heading = line[4:]
            found[heading] = []
        elif line.startswith("## "):
            heading = None
        elif heading and line.startswith("|") and not line.startswith("|---"):
            found[heading].append([c.strip() for c in line.strip("|").split("|")])
    return found


def table(title: str) -> list[list[str]]:
    for heading, rows in tables().items():
        if heading.startswith(title):
            return rows[1:]  # below the header row
    raise AssertionError(f"docs/semconv.md has no '### {title}' table")


@pytest.mark.parametrize("title", sorted(CONVENTIONS))
def test_every_required_and_recommended_attribute_has_a_row(title: str) -> None:
    named = {n for row in table(title) for n in re.findall(r"`([a-z_.]+)`", row[0])}
    missing = [a for a in CONVENTIONS[title] if a not in named]
    assert not missing, f"{title}: no row for {missing}"


@pytest.mark.parametrize("title", sorted(CONVENTIONS))
def test_nothing_is_left_not_emitted_without_a_reason(title: str) -> None:
    for name, level, emits, *_ in table(title):
        if level.startswith("Opt") or "not emitted" not in emits:
            continue
        reason = emits.split(":", 1)[1] if ":" in emits else ""
        assert len(reason.split()) >= 5, f"{title}: {name} ({level}) not emitted without a reason"


def test_every_metric_instrument_has_a_row() -> None:
    """Each instrument loopscribe can record is in the Metrics table, and nothing else is."""
    from loopscribe.otel._metrics import INSTRUMENTS

    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {re.findall(r"`([a-z_.]+)`", row)[0] for row in rows}
    assert named == set(INSTRUMENTS)
    assert "LOOPSCRIBE_GENAI_SEMCONV" in text
