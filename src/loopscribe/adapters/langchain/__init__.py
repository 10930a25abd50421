"""Record LangChain and LangGraph runs with a callback handler.

Pass a :class:`LoopscribeCallbackHandler` wherever LangChain takes callbacks;
every chain, graph node, chat model, tool and retriever run below that point
is recorded into the loopscribe run::

    from loopscribe import Session
    from loopscribe.adapters.langchain import LoopscribeCallbackHandler

    with Session.create("agent.jsonl") as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        agent.invoke(inputs, config={"callbacks": [handler], "run_name": "weather-bot"})

Or record every LangChain run of the context without passing callbacks:
``handler = install(run)`` adds the handler to each run through a LangChain
configure hook (as LangSmith tracing does); ``uninstall()`` stops that and
closes the handler, ending what its runs still hold open (``NotEnded``).

How LangChain runs become executions (a pure function of what LangChain
reports, so the same run always gives the same executions):

=============================  ==============================================
LangChain run                  ``Execution(id, kind, attempt, parent_id)``
=============================  ==============================================
chain or graph, no parent      ``(f"{name}_{n}", "agent", 1, None)``
chain or graph run by a tool   ``(f"{name}_{n}", "agent", 1, tool)``: a
                               sub-graph, with a conversation of its own
chain or node, nested          ``(f"{name}_{n}", "chain", 1, parent)``
chat model / LLM               ``(str(run_id), "model", 1, parent)``
tool with a tool call          ``(tool_call_id, "tool", n, parent)``; ``n``
                               counts runs of that call in this recording run
tool without a tool call       ``(str(run_id), "tool", 1, parent)``
retriever                      ``(f"{name}_{n}", "tool", 1, parent)``,
                               ``tool_type="datastore"``
``with_retry`` attempt ``k``   the first attempt's ``id``, ``attempt=k``
``on_retry`` (tenacity)        same ``id``, ``attempt + 1``
graph node ``RetryPolicy``     same ``id``, ``attempt + 1`` (the same LangGraph
                               task, ``langgraph_checkpoint_ns``, run again)
=============================  ==============================================

A run LangChain reports under a coarser parent than the one it ran in
(``RunnableWithFallbacks`` calls each model with its caller's callbacks)
is nested under the run LangChain's config context names, when that run
is open and inside the reported parent.

LangGraph's control flow is not a failure: a node or graph stopped by
``interrupt()`` ends with ``stop_reason="interrupted"`` and the
``interrupts`` (``id``, ``value``) it raised, a graph that catches its
children's interrupts ends the same way, and a tool that calls
``interrupt()`` ends ``disposition="deferred"`` (``details.reason``).
``Command(resume=...)`` keeps its ``resume`` value in the top-level
``agent_start``.

``name`` is the runnable's or graph node's name and ``n`` counts that name in
the loopscribe run, so spans read ``chain agent_2``, never a UUID; the
LangChain ``run_id`` (what LangSmith shows) is kept as ``lc_run_id`` in the
start record, and ``config={"run_id": ...}`` pins it. Model executions use
the ``run_id`` itself. Tool executions use the model's tool-call ID, so the
span's ``gen_ai.tool.call.id`` matches the assistant message's tool call.
A LangGraph ``thread_id`` is kept in the top-level ``agent_start``.

Messages are recorded as loopscribe's own types (``UserMessage``,
``AssistantMessage`` with text, reasoning and tool calls, ``ToolResultMessage``,
``SystemMessage``; images and files as references); see
:func:`from_langchain` and :func:`to_langchain`. A message loopscribe has no
type for stays the plain dict of :func:`lower_message`.

Committed messages (``message_end``): each message once per conversation,
known by its id, its ``tool_call_id`` or, before LangGraph gives it an id,
its content. A graph's input messages are committed when it starts, each
model output under its model execution, each ``ToolMessage`` under its tool
execution, and a message that first appears in a request (a system prompt
the graph adds) with no execution. History a LangGraph checkpointer loads
for a second run on the same ``thread_id`` is not committed again. A
sub-graph run inside a tool keeps its own conversation, recorded under its
own execution.

Streamed tokens (``on_llm_new_token``: text and tool-call chunks) are
published as transient ``message_update`` events of their model execution:
a ``loopscribe.live.Bus`` delivers them, the file never holds them.

Checkpoints: compile a graph with ``LoopscribeCheckpointer(saver, session)``
in place of its checkpointer and each checkpoint LangGraph commits (one per
super-step) is also written as a loopscribe ``checkpoint`` that references
it (``thread_id``, ``checkpoint_ns``, ``checkpoint_id``, ``step``); the
state stays in the saver.

Not recorded: chain inputs and outputs (intermediate state; the messages and
tool calls they carry are recorded where they are produced), ``on_text``
and custom events.

The handler is synchronous with ``run_inline = True``: in async code
LangChain calls it directly on the event loop thread (recording is one
unbuffered write), and sync code that runs callbacks on worker threads
(``batch``, ``RunnableParallel``) is serialized by a lock. The handler never
raises into LangChain: a failure is logged on the ``loopscribe`` logger and
counted in :attr:`LoopscribeCallbackHandler.errors`.
"""

from ._checkpoint import LoopscribeCheckpointer, checkpoint_reference
from ._handler import LoopscribeCallbackHandler
from ._install import install, installed, uninstall
from ._messages import from_langchain, lower_message, to_langchain

__all__ = [
    "LoopscribeCallbackHandler",
    "LoopscribeCheckpointer",
    "checkpoint_reference",
    "from_langchain",
    "install",
    "installed",
    "lower_message",
    "to_langchain",
    "uninstall",
]
