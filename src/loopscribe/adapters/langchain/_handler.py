"""The LangChain callback handler: each callback mapped to records (see ``_runs`` for state)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, GenerationChunk, LLMResult

from ... import events as ev
from ..._freeze import strip_secrets
from ..._messages import (
    AssistantMessage,
    TextContent,
    UserMessage,
)
from ..._model import Event
from ._messages import from_langchain

if TYPE_CHECKING:
    from langchain_core.agents import AgentAction, AgentFinish
    from tenacity import RetryCallState
from ._runs import RunTracker, _Child, _Conversation, _guarded
from ._values import (
    _block_texts,
    _config,
    _control_flow,
    _document,
    _document_ref,
    _first_str,
    _interrupt_values,
    _interrupts,
    _is_command,
    _outcome_error,
    _partial,
    _provider,
    _serialized_name,
    _state_messages,
    _usage,
)

__all__ = ["LoopscribeCallbackHandler"]


class LoopscribeCallbackHandler(RunTracker):
    """A LangChain callback handler that records runs into a loopscribe :class:`~loopscribe.Run`.

    Give it in ``config={"callbacks": [handler]}`` (or ``callbacks=`` of a
    model, tool or chain). One handler belongs to one loopscribe run; the
    host opens and closes the Session and the run.

    Args:
        run: The open run to record into.

    Attributes:
        errors: How many callbacks failed (each was logged on the ``loopscribe``
            logger and swallowed).
    """

    raise_error: bool = False
    run_inline: bool = True

    # -- chains and agents -----------------------------------------------------------

    @_guarded
    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain (any Runnable, a LangGraph graph or node) started."""
        name = _first_str(kwargs.get("name"), _serialized_name(serialized)) or "chain"
        parent_run_id = self._parent(parent_run_id)
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        # A graph or chain run by a tool is an agent of its own with its own conversation.
        own = parent is None or parent.execution.kind == "tool"
        kind = "agent" if own else "chain"
        meta = metadata or {}
        thread_id = _first_str(meta.get("thread_id")) if own else None
        # A graph node (in a graph or a sub-graph) runs in a checkpoint namespace of its
        # own, which its task keeps across RetryPolicy attempts; runs inside the node
        # share the node's namespace.
        namespace = _first_str(meta.get("langgraph_checkpoint_ns"))
        task = None
        if (
            parent is not None
            and namespace != parent.namespace
            and name == meta.get("langgraph_node")
        ):
            task = namespace
        tasks = self._tasks.setdefault(parent_run_id, {}) if task and parent_run_id else {}
        previous = tasks.get(task) if task else None
        execution = self._start(
            run_id,
            parent_run_id,
            kind,
            name,
            tags=tags,
            named=True,
            retry_of=previous if previous is not None and previous.error is not None else None,
        )
        self._open[run_id].namespace = namespace
        if task:
            tasks[task] = _Child(execution)
            self._open[run_id].task = task
        if own:
            scope = None if parent is None else execution
            conversation = self._thread(thread_id, scope) if thread_id and parent is None else None
            if conversation is None:
                conversation = (
                    self._conversation
                    if parent is None
                    else _Conversation(execution, checkpointed=bool(thread_id))
                )
            self._open[run_id].conversation = conversation
        start = self._extra(
            ev.agent_start(execution, name),
            tags=list(tags or ()),
            metadata=self._json(strip_secrets(meta)) if kind == "agent" else None,
            thread_id=thread_id,
            resume=self._json(cast(Any, inputs).resume) if own and _is_command(inputs) else None,
            lc_run_id=str(run_id),
        )
        self._starting(run_id, start)
        if own:
            conversation = self._open[run_id].conversation
            self._commit_request(conversation, self._input_messages(inputs), inputs=True)

    @_guarded
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain ended; a graph node's new messages are committed (host-made ones too)."""
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        opened = self._end(run_id)
        if opened is None:
            return
        if parent is not None and parent.execution.kind == "agent":
            # A graph node: what it returns is written to the graph's state.
            conversation = opened.conversation
            for message in _state_messages(outputs):
                if not conversation.known(message):
                    owner = self._tool_executions.get(getattr(message, "tool_call_id", ""))
                    self._commit(conversation, owner or opened.execution, message)
        pending = outputs.get("__interrupt__") if isinstance(outputs, Mapping) else None
        interrupts = opened.interrupts or self._json(_interrupt_values(pending))
        self._record(
            self._extra(
                ev.agent_end(
                    opened.execution,
                    opened.name,
                    stop_reason="interrupted" if interrupts else None,
                ),
                interrupts=interrupts,
            )
        )

    @_guarded
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain failed, or a LangGraph node paused the graph (``interrupt()``)."""
        stopped = _control_flow(error)
        opened = self._end(run_id, None if stopped else error)
        if opened is None:
            return
        if stopped is None:
            self._record(ev.agent_end(opened.execution, opened.name, error=error))
            return
        interrupts = self._json(_interrupts(error))
        self._pass_up(opened, interrupts)
        self._record(
            self._extra(
                ev.agent_end(opened.execution, opened.name, stop_reason=stopped),
                interrupts=interrupts,
            )
        )

    @_guarded
    def on_agent_action(
        self,
        action: AgentAction,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """An agent chose a tool (``AgentExecutor`` and hosts that report actions)."""
        opened = self._open.get(run_id)
        data = {
            "tool": action.tool,
            "tool_input": self._json(action.tool_input),
            "log": action.log,
            "tool_call_id": getattr(action, "tool_call_id", None),
        }
        execution = opened.execution if opened is not None else None
        self._record(Event("agent_action", execution, {k: v for k, v in data.items() if v}))

    @_guarded
    def on_agent_finish(
        self,
        finish: AgentFinish,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """An agent produced its final answer."""
        opened = self._open.get(run_id)
        data = {"return_values": self._json(finish.return_values), "log": finish.log}
        execution = opened.execution if opened is not None else None
        self._record(Event("agent_finish", execution, {k: v for k, v in data.items() if v}))

    # -- models ------------------------------------------------------------------

    def _model_start(
        self,
        serialized: Mapping[str, Any] | None,
        messages: Sequence[Any],
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        metadata: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> None:
        meta = metadata or {}
        params = kwargs.get("invocation_params")
        params = dict(params) if isinstance(params, Mapping) else {}
        model = (
            _first_str(
                meta.get("ls_model_name"),
                params.get("model"),
                params.get("model_name"),
                kwargs.get("name"),
                _serialized_name(serialized),
            )
            or "unknown"
        )
        execution = self._start(run_id, parent_run_id, "model", model, tags=tags)
        tools = self._json(params.pop("tools", None) or ())
        stream = params.get("stream", params.get("streaming"))
        config = self._json(_config(params))
        for key in ("temperature", "max_tokens", "stop"):
            # LangChain's own names for the request parameters, when the params lack them.
            if config.get(key) is None and meta.get(f"ls_{key}") is not None:
                config[key] = self._json(meta[f"ls_{key}"])
        start = self._extra(
            ev.model_exec_start(
                execution,
                model,
                provider=_provider(meta, serialized),
                stream=stream if isinstance(stream, bool) else None,
            ),
            tags=list(tags or ()),
            lc_run_id=str(run_id) if execution.id != str(run_id) else None,
        )
        request = ev.model_request(
            execution, messages, tools, config, model=model, codec=self._run.session.codec
        )
        self._starting(run_id, start, request)

    @_guarded
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chat model call started: the new messages, then the request."""
        parent_run_id = self._parent(parent_run_id)
        # LangChain calls this once per message list, so there is exactly one.
        batch = [m for message_list in messages for m in message_list]
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        conversation = parent.conversation if parent is not None else self._conversation
        self._commit_request(conversation, batch)
        converted = [from_langchain(m) for m in batch]
        self._model_start(serialized, converted, run_id, parent_run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A text-completion model call started; its prompts are the request's messages."""
        parent_run_id = self._parent(parent_run_id)
        messages = [UserMessage(prompt) for prompt in prompts]
        self._model_start(serialized, messages, run_id, parent_run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A model call succeeded: the response, its usage, then the committed message."""
        opened = self._end(run_id)
        if opened is None:
            return
        execution = opened.execution
        generation = next(iter(response.generations[0]), None) if response.generations else None
        if isinstance(generation, ChatGeneration):
            message: Any = generation.message
            lowered: Any = from_langchain(message)
            metadata = message.response_metadata or {}
        elif generation is not None:
            message = None
            lowered = AssistantMessage((TextContent(generation.text),))
            metadata = {}
        else:
            message = lowered = None
            metadata = {}
        info = (generation.generation_info or {}) if generation is not None else {}
        llm_output = response.llm_output or {}
        self._record(
            ev.model_exec_end(
                execution,
                message=lowered,
                usage=_usage(message, llm_output),
                model=_first_str(
                    metadata.get("model_name"),
                    metadata.get("model"),
                    llm_output.get("model_name"),
                    llm_output.get("model"),
                ),
                stop_reason=_first_str(
                    info.get("finish_reason"),
                    metadata.get("finish_reason"),
                    metadata.get("stop_reason"),
                ),
                response_id=_first_str(
                    metadata.get("id"), llm_output.get("id"), getattr(message, "id", None)
                ),
            )
        )
        if isinstance(generation, ChatGeneration):
            self._commit(opened.conversation, execution, generation.message)

    @_guarded
    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A streamed delta: published to live subscribers (a ``Bus``), never written.

        Text arrives as ``token`` (a string, or content blocks whose text
        parts are joined); a tool call's name and argument fragments as the
        chunk's ``tool_call_chunks``.
        """
        opened = self._open.get(run_id)
        if opened is None:
            return
        text = token if isinstance(token, str) else "".join(_block_texts(token))
        if text:
            self._record(ev.message_update(opened.execution, None, delta=text))
        message = getattr(chunk, "message", None)
        for part in getattr(message, "tool_call_chunks", None) or ():
            if not isinstance(part, Mapping):
                continue
            delta = {k: part.get(k) for k in ("id", "name", "args", "index") if part.get(k)}
            if delta:
                delta = {"type": "tool_call", **delta}
                self._record(ev.message_update(opened.execution, None, delta=delta))

    @_guarded
    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A model call failed; a streamed partial message is kept with the error."""
        opened = self._end(run_id, error)
        if opened is None:
            return
        response = kwargs.get("response")
        partial = _partial(response) if isinstance(response, LLMResult) else None
        self._record(ev.model_exec_end(opened.execution, partial_message=partial, error=error))

    # -- tools ---------------------------------------------------------------------

    @_guarded
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool started; LangChain passes the model's ``tool_call_id`` when there is one."""
        parent_run_id = self._parent(parent_run_id)
        name = _first_str(_serialized_name(serialized), kwargs.get("name")) or "tool"
        call_id = _first_str(kwargs.get("tool_call_id"))
        execution = self._start(
            run_id, parent_run_id, "tool", name, tool_call_id=call_id, tags=tags
        )
        args = self._json(inputs) if inputs is not None else input_str
        description = serialized.get("description") if serialized else None
        start = self._extra(
            ev.tool_exec_start(
                execution,
                name,
                args,
                tool_type="function",
                description=description if isinstance(description, str) else None,
            ),
            tags=list(tags or ()),
            lc_run_id=str(run_id) if execution.id != str(run_id) else None,
        )
        self._starting(run_id, start)

    @_guarded
    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool returned a ``ToolMessage`` (``status="error"``: a handled error) or a value."""
        opened = self._end(run_id)
        if opened is None:
            return
        execution = opened.execution
        messages: list[ToolMessage] = []
        if isinstance(output, ToolMessage):
            messages = [output]
        elif (
            isinstance(output, list) and output and all(isinstance(m, ToolMessage) for m in output)
        ):
            messages = list(output)
        converted = [from_langchain(m) for m in messages]
        result: Any = self._json(output) if not messages else converted
        if isinstance(output, ToolMessage):
            result = converted[0]
        is_error = any(m.status == "error" for m in messages)
        self._record(ev.tool_exec_end(execution, opened.name, result, is_error=is_error))
        for message in messages:
            self._commit(opened.conversation, execution, message)

    @_guarded
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool raised (an unhandled ``ToolException`` or any other error), or interrupted."""
        stopped = _control_flow(error)
        opened = self._end(run_id, None if stopped else error)
        if opened is None:
            return
        if stopped is None:
            self._record(ev.tool_exec_end(opened.execution, opened.name, error=error))
            return
        # interrupt() in a tool: the call waits for a Command(resume=...) and runs again then.
        details = {"reason": stopped, "interrupts": self._json(_interrupts(error))}
        self._pass_up(opened, details["interrupts"])
        self._record(
            ev.tool_exec_end(
                opened.execution,
                opened.name,
                details={k: v for k, v in details.items() if v},
                disposition="deferred" if stopped == "interrupted" else stopped,
            )
        )

    # -- retrievers ------------------------------------------------------------------

    @_guarded
    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever was queried: a datastore tool call."""
        parent_run_id = self._parent(parent_run_id)
        name = _first_str(kwargs.get("name"), _serialized_name(serialized)) or "retriever"
        execution = self._start(run_id, parent_run_id, "tool", name, tags=tags, named=True)
        start = self._extra(
            ev.tool_exec_start(execution, name, {"query": query}, tool_type="datastore"),
            tags=list(tags or ()),
            lc_run_id=str(run_id),
        )
        self._starting(run_id, start)

    @_guarded
    def on_retriever_end(
        self,
        documents: Sequence[Document],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever returned documents: their bodies, and their sources as references."""
        opened = self._end(run_id)
        if opened is None:
            return
        docs = [d for d in documents if isinstance(d, Document)]
        self._record(
            ev.tool_exec_end(
                opened.execution,
                opened.name,
                self._json([_document(d) for d in docs]),
                content=[_document_ref(d) for d in docs],
            )
        )

    @_guarded
    def on_retriever_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever raised."""
        opened = self._end(run_id, error)
        if opened is not None:
            self._record(ev.tool_exec_end(opened.execution, opened.name, error=error))

    # -- retries -------------------------------------------------------------------

    @_guarded
    def on_retry(
        self,
        retry_state: RetryCallState,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A run is retried in place (tenacity): end this attempt, start the next.

        The failed attempt ends with its kind's terminal record, then
        ``retry_scheduled``, then the next attempt begins with the same start
        records (for a model: the same request).
        """
        opened = self._open.get(run_id)
        if opened is None:
            return
        failed = opened.execution
        error = _outcome_error(retry_state)
        if failed.kind == "model":
            self._record(ev.model_exec_end(failed, error=error or "retry"))
        elif failed.kind == "tool":
            self._record(ev.tool_exec_end(failed, opened.name, error=error or "retry"))
        else:
            self._record(ev.agent_end(failed, opened.name, error=error or "retry"))
        action = retry_state.next_action
        delay_ms = None if action is None else float(action.sleep) * 1000
        nxt = dataclasses.replace(failed, attempt=failed.attempt + 1)
        self._record(
            ev.retry_scheduled(failed, next_attempt=nxt.attempt, delay_ms=delay_ms, error=error)
        )
        if nxt.kind == "tool":
            self._ids.note(nxt)
        opened.execution = nxt
        starts = tuple(dataclasses.replace(e, execution=nxt, timestamp=None) for e in opened.starts)
        self._starting(run_id, *starts)
