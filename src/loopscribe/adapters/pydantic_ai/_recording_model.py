"""The model boundary: the innermost wrapper around a model, which sees exactly what it is
sent and what it streams back, and hands both to the capability."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models import (
    Model,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ._state import (
    _ModelAttempt,
)
from ._values import (
    _lower,
)

if TYPE_CHECKING:
    from ._capability import LoopscribeCapability

# -- the model boundary --------------------------------------------------------------------


class _RecordingModel(WrapperModel):
    """The innermost wrapper around the model serving one attempt: sees exactly what it is sent."""

    def __init__(self, wrapped: Model, recorder: LoopscribeCapability, attempt: _ModelAttempt):
        super().__init__(wrapped)
        self._recorder = recorder
        self._attempt = attempt

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        self._recorder._model_started(
            self._attempt, self.wrapped, messages, model_settings, model_request_parameters, False
        )
        try:
            response = await super().request(messages, model_settings, model_request_parameters)
        except BaseException as exc:
            self._recorder._model_ended(self._attempt, None, exc)
            raise
        self._recorder._model_ended(self._attempt, response, None)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        self._recorder._model_started(
            self._attempt, self.wrapped, messages, model_settings, model_request_parameters, True
        )
        stream: StreamedResponse | None = None
        try:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                self._tap(stream)
                yield stream
        except BaseException as exc:
            self._recorder._model_ended(self._attempt, _partial(stream), exc)
            raise
        self._recorder._model_ended(self._attempt, _partial(stream), None)

    def _tap(self, stream: StreamedResponse) -> None:
        """Publish the stream's deltas as it is read, without changing what it yields.

        pydantic-ai builds the events it hands on from the response's own
        ``_get_event_iterator()`` the first time the stream is iterated; the
        instance's iterator is wrapped once, before that.
        """
        try:
            if getattr(stream, "_event_iterator", None) is not None:
                return  # already being read: its events are not ours to see
            source = stream._get_event_iterator
            recorder, execution = self._recorder, self._attempt.execution

            async def tapped() -> AsyncIterator[ModelResponseStreamEvent]:
                async for event in source():
                    recorder._delta(execution, event)
                    yield event

            stream._get_event_iterator = tapped  # type: ignore[method-assign]
        except Exception:
            self._recorder._failed("a model stream")


def _delta_of(event: ModelResponseStreamEvent) -> Any:
    """A stream event's new content: text as a string, thinking and tool calls as dicts."""
    if isinstance(event, PartStartEvent):
        part: Any = event.part
        if isinstance(part, TextPart):
            return part.content or None
        if isinstance(part, ThinkingPart):
            return {"type": "thinking", "text": part.content} if part.content else None
        if isinstance(part, ToolCallPart):
            call = {"type": "tool_call", "id": part.tool_call_id, "name": part.tool_name}
            args = part.args if isinstance(part.args, str) else _lower(part.args)
            return {**call, "args": args} if args else call
        return None
    if isinstance(event, PartDeltaEvent):
        change: Any = event.delta
        if isinstance(change, TextPartDelta):
            return change.content_delta or None
        if isinstance(change, ThinkingPartDelta):
            text = change.content_delta
            return {"type": "thinking", "text": text} if text else None
        if isinstance(change, ToolCallPartDelta):
            args = change.args_delta
            fields = {
                "type": "tool_call",
                "id": change.tool_call_id,
                "name": change.tool_name_delta,
                "args": args if isinstance(args, str) else _lower(args),
            }
            return {k: v for k, v in fields.items() if v}
    return None


def _partial(stream: StreamedResponse | None) -> ModelResponse | None:
    if stream is None:
        return None
    try:
        return stream.get()
    except Exception:
        return None
