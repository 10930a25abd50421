"""Record pydantic-ai agent runs into a loopscribe Run.

``pip install 'loopscribe[pydantic-ai]'``. :class:`LoopscribeCapability` is a
pydantic-ai *capability*: pass it to a run (or to the ``Agent``) and every
model call, tool call and agent run is written through ``Run.record``::

    from loopscribe import Session
    from loopscribe.adapters.pydantic_ai import LoopscribeCapability

    with Session.create("chat.jsonl") as session, session.begin_run() as run:
        result = await agent.run("hi", capabilities=[LoopscribeCapability(run)])

How pydantic-ai's lifecycle maps onto executions (``agent`` is ``{name}_{n}``:
the agent's name, as pydantic-ai names it, and ``n`` counting the agent runs
this capability has recorded into its loopscribe Run; ``s`` is pydantic-ai's
``RunContext.run_step``, one model request step):

=================================  =======================  =====  ==========================
pydantic-ai                        ``Execution.id``         kind   ``parent_id``
=================================  =======================  =====  ==========================
``agent.run(...)`` (``wrap_run``)  ``agent``                agent  the tool call that started
                                                                   it (a delegate), or none
request step ``s``                 ``agent/turn_{s}``       turn   ``agent``
attempt ``a`` at step ``s``        ``agent/model_{s}``      model  ``agent/turn_{s}``
                                   with attempt ``a``
``ToolCallPart.tool_call_id``      the tool-call ID         tool   ``agent/turn_{s}``, or
                                                                   ``agent`` for approved
                                                                   deferred calls run before
                                                                   the first step
=================================  =======================  =====  ==========================

Attempt numbering:

* A model attempt is ``ModelRequestContext.attempt``: another attempt at the
  same step happens when a capability raises ``RetryModelRequest`` (a
  fallback or back-off). It keeps the execution ID, increments the attempt,
  and follows a ``retry_scheduled`` on the failed attempt.
* ``ModelRetry`` raised by a tool is *not* a retry of that execution:
  pydantic-ai sends the failure back to the model, which answers with a new
  tool call (a new ID) in the next step. The failed call ends with
  ``disposition="retry"`` and the retry pydantic-ai charged in
  ``details.retry = {cause, attempt, max_retries}``; the next call's
  ``tool_exec_start`` carries ``retry``/``max_retries`` from ``RunContext``.
* A tool-call ID seen again in the same loopscribe Run (a capability
  re-running a tool, a deferred call run after approval, a model that reuses
  IDs) gets the next attempt; a re-run within the same step follows a
  ``retry_scheduled``.

``tool_exec_end.disposition``: none on success; ``retry`` (``ModelRetry``
or invalid arguments, which end the call before ``tool_invoke_start``),
``failed`` (``ToolFailed``), ``deferred`` (waiting for approval or an
external result), ``raised`` (any other exception: the run fails),
``cancelled`` (still running when the run was cancelled or failed),
``not_executed`` (validated but never run).

The model boundary is observed by a ``WrapperModel`` that the capability
puts innermost around the serving model (``get_wrapper_model``): it records
exactly the messages, tool definitions and settings the model receives,
and the response, usage and error of every attempt, streamed or not
(partial content when a stream fails), with whether it streamed, the
provider (``model.system`` as a well-known name), the response's model,
``provider_response_id``, finish reason and usage (cached, cache-write and
reasoning tokens). Messages are loopscribe's own types (see
:func:`from_pydantic_ai`): one per request part (system prompt, user
prompt, tool return, retry feedback) and one ``AssistantMessage`` per
response; what loopscribe has no type for keeps pydantic-ai's JSON form.
``conversation_id`` and pydantic-ai's ``run_id`` are kept in ``agent_start``.

Committed messages (``message_end``): every message pydantic-ai appends to
the run's history -- the request of each step (user prompt, tool returns,
retry feedback; one ``message_end`` per part) under its turn, each model
response under the model execution that produced it. Messages passed in ``message_history`` were
committed by an earlier run and are not written again.

Not mapped: output tools (``final_result``) and output functions are part
of the response message, not tool executions; a call to an unknown tool
never reaches the tool hooks (its retry feedback is in the next request);
durable execution (Temporal, DBOS, Prefect) runs model calls in other
processes and is not supported.

Streaming deltas (text, thinking and tool-call parts of a streamed response,
read from the model's own stream as pydantic-ai reads it) are published as
transient ``message_update`` events of the model attempt: a
``loopscribe.live.Bus`` delivers them, the file never holds them. With
``checkpoints=True`` each finished top-level run ends with a ``checkpoint``
(message counts, agent, ``run_id``, ``conversation_id``).

The capability never raises into pydantic-ai: a recording failure is logged
on the ``loopscribe`` logger and counted in :attr:`LoopscribeCapability.errors`;
the Session keeps the sticky error in ``run.session.error``.

Unlike the LangChain and OpenAI Agents adapters this one has no
``install()`` / ``uninstall()``: it patches and registers nothing global.
The capability is given per run or per agent, and ``wrap_run`` ends what a
failed or cancelled run left open (its tool calls ``cancelled``).
"""

from ._capability import LoopscribeCapability
from ._messages import from_pydantic_ai, to_pydantic_ai

__all__ = ["LoopscribeCapability", "from_pydantic_ai", "to_pydantic_ai"]
