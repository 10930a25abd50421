"""A realistic, deterministic agent workload shared by the benchmarks.

One turn of a tool-using agent, as a host publishes it: ``turn_start``,
``model_exec_start``, a ``model_request`` carrying the last 20 messages of the
conversation (built-in ``UserMessage``/``AssistantMessage`` values mixed with
plain dicts) plus tool declarations and a config with a credential in it,
``model_exec_end`` with the message and usage, ``message_end``, then for each
of one to three tool calls ``tool_exec_start``, ``tool_invoke_start`` and a
``tool_exec_end`` whose result is 1-64 KiB of code-like text (log-uniform, so
most are small), a ``message_end`` with the tool result, and ``turn_end``.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loopscribe import (
    AssistantMessage,
    Event,
    Execution,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    events,
)

HISTORY_MESSAGES = 20
MIN_RESULT_BYTES = 1 << 10
MAX_RESULT_BYTES = 64 << 10
_VOCABULARY = (
    "def return self value import from class for while if else None True False "
    "session record event model tool result message usage token request config "
    "the of and to in is that it with as on be at by this an are or was"
)
_WORDS = _VOCABULARY.split()
_TOOL_NAMES = ("read_file", "write_file", "grep", "list_dir", "run_tests", "web_fetch")
_TOOLS = [
    {
        "name": name,
        "description": f"{name.replace('_', ' ')}: see the tool manual for details",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file or folder"},
                "pattern": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
        },
    }
    for name in _TOOL_NAMES
]
_CONFIG = {
    "temperature": 0.2,
    "max_tokens": 4096,
    "api_key": "sk-not-a-real-key",
    "tool_choice": "auto",
    "response_format": {"type": "text"},
    "metadata": {"user": "bench", "headers": {"Authorization": "Bearer not-real"}},
}


def _text_blob(rng: random.Random, size: int) -> str:
    """Code-like text: indented lines, quotes and backslashes that JSON must escape."""
    lines: list[str] = []
    length = 0
    while length < size:
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(2, 12)))
        if rng.random() < 0.2:
            words += f' = "{rng.choice(_WORDS)}\\n"'
        if rng.random() < 0.02:
            words += "  # naïve café ✓"
        line = "    " * rng.randrange(4) + words
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


class _Text:
    """Slices of one pre-generated blob, so building a large workload stays cheap."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._blob = _text_blob(rng, 4 * MAX_RESULT_BYTES)

    def take(self, size: int) -> str:
        start = self._rng.randrange(len(self._blob) - size)
        return self._blob[start : start + size]

    def log_uniform(self, low: int, high: int) -> str:
        return self.take(int(low * (high / low) ** self._rng.random()))


def build_events(turns: int, seed: int = 0) -> list[Event]:
    """The events of ``turns`` agent turns, deterministic for a ``seed``."""
    rng = random.Random(seed)
    text = _Text(rng)
    history: list[Any] = [UserMessage(text.take(400))]
    out: list[Event] = []
    agent = Execution("agent", "agent")
    for turn in range(1, turns + 1):
        turn_ex = Execution(f"turn_{turn}", "turn", parent_id=agent.id)
        model_ex = Execution(f"model_{turn}", "model", parent_id=turn_ex.id)
        calls = [
            ToolCall(
                f"call_{turn}_{n}",
                rng.choice(_TOOL_NAMES),
                {"path": f"src/module_{rng.randrange(100)}.py", "limit": rng.randrange(1, 500)},
            )
            for n in range(rng.randrange(1, 4))
        ]
        reply = AssistantMessage(
            (TextContent(text.log_uniform(40, 1500)), *calls),
            model="model-x",
            provider="provider-y",
            usage=Usage(rng.randrange(1000, 90000), rng.randrange(10, 2000), rng.randrange(5000)),
            stop_reason="tool_use",
        )
        out += [
            events.turn_start(turn_ex, turn),
            events.model_exec_start(model_ex, "model-x", provider="provider-y"),
            events.model_request(
                model_ex, history[-HISTORY_MESSAGES:], _TOOLS, _CONFIG, model="model-x"
            ),
            events.model_exec_end(
                model_ex, message=reply, usage=reply.usage, model="model-x", stop_reason="tool_use"
            ),
            events.message_end(model_ex, reply),
        ]
        history.append(reply)
        for call in calls:
            tool_ex = Execution(call.id, "tool", parent_id=turn_ex.id)
            result = text.log_uniform(MIN_RESULT_BYTES, MAX_RESULT_BYTES)
            out += [
                events.tool_exec_start(tool_ex, call.name, call.arguments),
                events.tool_invoke_start(tool_ex, call.name, {**call.arguments, "cwd": "/work"}),
                events.tool_exec_end(tool_ex, call.name, result, disposition="completed"),
            ]
            # The conversation keeps a shortened copy, as hosts do with long outputs.
            if rng.random() < 0.5:
                message: Any = ToolResultMessage(
                    call.id,
                    call.name,
                    (TextContent(result[:2000]),),
                    details={"bytes": len(result)},
                )
            else:
                message = {"role": "tool", "tool_call_id": call.id, "content": result[:2000]}
            out.append(events.message_end(tool_ex, message))
            history.append(message)
        user: Any = (
            UserMessage(text.log_uniform(20, 800))
            if rng.random() < 0.5
            else {"role": "user", "content": text.log_uniform(20, 800)}
        )
        history.append(user)
        out.append(events.turn_end(turn_ex, turn, stop_reason="tool_use", tool_calls=len(calls)))
    return out


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temporary folder for benchmark files, removed afterwards.

    ``LOOPSCRIBE_BENCH_DIR`` chooses the parent (default: the system temp folder).
    """
    parent = os.environ.get("LOOPSCRIBE_BENCH_DIR")
    with tempfile.TemporaryDirectory(prefix="loopscribe-bench-", dir=parent) as folder:
        yield Path(folder)


def median(values: list[float]) -> float:
    """The median of ``values``."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(sorted_values: list[int], fraction: float) -> int:
    """The value at ``fraction`` (0..1) of an ascending list (nearest rank)."""
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]
