"""The span attributes the bridge writes: their keys, and the chat span's set.

Keys are spelled out rather than imported from the semantic-conventions
package, whose GenAI constants are deprecated there (and warn) as they move.
``docs/semconv.md`` has the full table, with the record field behind each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.util.types import AttributeValue

from .._fields import span_name
from ._metrics import OTHER_PROVIDER

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._run_state import _Attempt

OPERATION_NAME = "gen_ai.operation.name"
CONVERSATION_ID = "gen_ai.conversation.id"
SESSION_ID = "session.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_STREAM = "gen_ai.request.stream"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_TOP_K = "gen_ai.request.top_k"
REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
REQUEST_SEED = "gen_ai.request.seed"
REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
"""The name cache writes had before the conventions renamed it (kept unless ``latest``)."""
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_write.input_tokens"
CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
AGENT_NAME = "gen_ai.agent.name"
INPUT_MESSAGES_REF = "gen_ai.input.messages_ref"
OUTPUT_MESSAGES_REF = "gen_ai.output.messages_ref"
SYSTEM_INSTRUCTIONS_REF = "gen_ai.system_instructions_ref"
TOOL_DEFINITIONS_REF = "gen_ai.tool.definitions_ref"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
OPENINFERENCE_KIND = "openinference.span.kind"
LS_RUN_ID = "loopscribe.run.id"
LS_EXECUTION_ID = "loopscribe.execution.id"
LS_EXECUTION_KIND = "loopscribe.execution.kind"
LS_PARENT_ID = "loopscribe.execution.parent_id"
LS_ATTEMPT = "loopscribe.attempt"
LS_SEQ_FIRST = "loopscribe.seq.first"
LS_SEQ_LAST = "loopscribe.seq.last"
LS_FILE = "loopscribe.file"
LS_INCOMPLETE = "loopscribe.incomplete"
LS_SOURCE_FILE = "loopscribe.source.file"
LS_SOURCE_LINE = "loopscribe.source.line"


def _model_attrs(
    attrs: dict[str, AttributeValue],
    attempt: _Attempt,
    ref: Callable[[int], str | None],
    legacy_cache: bool = True,
) -> str:
    """The chat span's GenAI attributes, ``ref(seq)`` naming a record; returns the span name.

    Written out rather than through :func:`_put`: this runs for every model call.
    ``legacy_cache`` also writes cache writes under their former name.
    """
    value: str | int | float | None
    model = attempt.request_model or attempt.response_model
    # Every inference span names a provider: the conventions' "other" when none is known.
    attrs[PROVIDER_NAME] = attempt.provider or OTHER_PROVIDER
    if attempt.compacted:
        attrs[CONVERSATION_COMPACTED] = True
    if (value := attempt.request_model) is not None:
        attrs[REQUEST_MODEL] = value
    if (value := attempt.response_model) is not None:
        attrs[RESPONSE_MODEL] = value
    if (value := attempt.response_id) is not None:
        attrs[RESPONSE_ID] = value
    first, sent = attempt.first_chunk_ns, attempt.request_ns
    if first is not None and sent is not None and attempt.stream is not False:
        attrs[TIME_TO_FIRST_CHUNK] = max(0, first - sent) / 1e9
    if attempt.stream is not None:
        attrs[REQUEST_STREAM] = attempt.stream
    if (address := attempt.server_address) is not None:
        attrs[SERVER_ADDRESS] = address
        if (value := attempt.server_port) is not None:
            attrs[SERVER_PORT] = value
    params = attempt.params
    if params is not None:
        if (value := params.temperature) is not None:
            attrs[REQUEST_TEMPERATURE] = value
        if (value := params.max_tokens) is not None:
            attrs[REQUEST_MAX_TOKENS] = value
        if (value := params.top_p) is not None:
            attrs[REQUEST_TOP_P] = value
        if (value := params.top_k) is not None:
            attrs[REQUEST_TOP_K] = value
        if (value := params.frequency_penalty) is not None:
            attrs[REQUEST_FREQUENCY_PENALTY] = value
        if (value := params.presence_penalty) is not None:
            attrs[REQUEST_PRESENCE_PENALTY] = value
        if params.stop_sequences:
            attrs[REQUEST_STOP_SEQUENCES] = params.stop_sequences
        if (value := params.seed) is not None:
            attrs[REQUEST_SEED] = value
        if params.choice_count is not None and params.choice_count != 1:
            attrs[REQUEST_CHOICE_COUNT] = params.choice_count
    usage = attempt.usage
    if usage is not None:
        if (value := usage.input_tokens) is not None:
            attrs[INPUT_TOKENS] = value
        if (value := usage.output_tokens) is not None:
            attrs[OUTPUT_TOKENS] = value
        # Zero counts of these are left out: most providers report 0 for "none".
        if usage.cache_read:
            attrs[CACHE_READ_TOKENS] = usage.cache_read
        if usage.cache_creation:
            attrs[CACHE_WRITE_TOKENS] = usage.cache_creation
            if legacy_cache:
                attrs[CACHE_CREATION_TOKENS] = usage.cache_creation
        if usage.reasoning:
            attrs[REASONING_TOKENS] = usage.reasoning
    if attempt.finish_reasons:
        attrs[FINISH_REASONS] = attempt.finish_reasons
    request = None if attempt.request_seq is None else ref(attempt.request_seq)
    if request is not None:
        attrs[INPUT_MESSAGES_REF] = request
        if attempt.has_system:
            attrs[SYSTEM_INSTRUCTIONS_REF] = request
        if attempt.has_tools:
            attrs[TOOL_DEFINITIONS_REF] = request
    response = None if attempt.response_seq is None else ref(attempt.response_seq)
    if response is not None:
        attrs[OUTPUT_MESSAGES_REF] = response
    return span_name("model", model=model, tool=None, agent=None, node=None)


def _put(attrs: dict[str, AttributeValue], key: str, value: str | int | float | None) -> None:
    if value is not None:
        attrs[key] = value
