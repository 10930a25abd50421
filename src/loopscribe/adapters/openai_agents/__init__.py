"""Record OpenAI Agents SDK runs (``openai-agents``) into a loopscribe session.

Install with ``pip install 'loopscribe[openai-agents]'``. The simplest use
wraps ``Runner.run``::

    from agents import Agent, Runner
    from loopscribe import Session
    from loopscribe.adapters.openai_agents import LoopscribeHooks

    with Session.create("agent.jsonl") as session, session.begin_run() as run:
        result = await LoopscribeHooks(run).run(agent, "What's the weather in Lisbon?")

which is ``Runner.run(agent, input, hooks=hooks, run_config=hooks.run_config(...))``
followed by :meth:`LoopscribeHooks.record_result` (or, if the run raised,
:meth:`LoopscribeHooks.record_error`); :meth:`LoopscribeHooks.run_streamed`
does the same for ``Runner.run_streamed``. Passing ``hooks=LoopscribeHooks(run)``
to ``Runner.run`` or ``Runner.run_streamed`` alone records everything the
SDK reports through its hooks; the other steps add guardrail results,
failures, whether calls streamed, and the exception type of failed tools.

Two paths. :class:`LoopscribeHooks` (``RunHooks``) is the default: hooks see
every model call whatever the ``Model`` is (a custom or test model emits no
trace data), with the exact system prompt, input items and response.
:class:`LoopscribeTraceProcessor` (``agents.add_trace_processor``) records
from the SDK's own trace events instead, with nothing passed to ``Runner``;
it depends on the model emitting response or generation spans. Neither
needs the SDK's tracing disabled: it stays on and exports wherever the
host sends it.

How the SDK's calls become executions. Ids are the SDK's tool-call ids or
counters per loopscribe ``Run``, so the same script always gives the same ids:

* an agent activation (``on_agent_start`` until ``on_agent_end`` or
  ``on_handoff``): ``agent_N``, kind ``agent``; no parent, or the tool call
  that runs it (``agent.as_tool()``). The target of a handoff is an agent
  execution of its own whose ``agent_start`` names the handoff's tool call
  (``handoff_call_id``);
* a turn, which is one model call and the tool calls it asked for:
  ``turn_N``, kind ``turn``, parent ``agent_N``;
* the model call (``on_llm_start`` / ``on_llm_end``): ``model_N``, kind
  ``model``, parent ``turn_N``, with the provider (``openai`` unless the
  model names another), the response id, usage with cached and reasoning
  tokens, and the finish reason read from the output items;
* a local tool call (``on_tool_start`` / ``on_tool_end``) and a handoff's
  function call: the SDK's ``call_id`` (``tool_N`` for tools that get none),
  kind ``tool``, parent ``turn_N``. A ``call_id`` already used in the same
  loopscribe run (a scripted model that reuses ids) is the next attempt of
  that execution (attempt 2, 3, ...), as in every way in;
* the run of an agent used as a tool (``agent.as_tool()``): recorded in full
  by hooks nested under that tool call. ``as_tool`` starts the run through
  the SDK's default ``AgentRunner``, which these hooks wrap once
  (``set_default_agent_runner``) to hand the nested run its hooks; a run
  the host gives its own ``hooks=`` is left alone.

What the adapter changes in the SDK, and undoing it: :func:`install` wraps
the SDK's default runner (once; ``LoopscribeHooks`` does it too) and, given
a loopscribe ``Run``, registers a :class:`LoopscribeTraceProcessor`
recording into it; :func:`uninstall` ends what every live hooks object and
installed processor still holds open (``NotEnded``, ``stop_reason``
``cancelled``), stops them, removes the processors from the SDK's list and
restores the default runner it wrapped::

    from loopscribe.adapters.openai_agents import install, uninstall

    processor = install(run)       # trace-processor path, nothing passed to Runner
    await Runner.run(agent, "Weather in Lisbon?")
    uninstall()

Messages are loopscribe's own types (see :mod:`._messages`): the user input,
one ``AssistantMessage`` per model response (reasoning, text, tool calls),
one ``ToolResultMessage`` per tool result. Output items loopscribe has no
type for (hosted tool calls, citations) stay the SDK's dicts.

Each guardrail that ran is a ``guardrail_N`` execution (kind ``guardrail``)
under its agent: ``guardrail_start`` (name, ``kind``: input, output,
tool_input, tool_output) and ``guardrail_end`` (``triggered``, a tool
guardrail's ``behavior``, ``output_info``). The SDK has no guardrail hook:
hooks learn the results from the run's result or exception, so both records
are written when the run ends (under :meth:`LoopscribeHooks.stream_events`,
as soon as the streamed result lists them). Nothing here raises into the SDK: failures
are logged on the ``loopscribe`` logger and counted in
:attr:`LoopscribeHooks.errors`.

Streaming: :meth:`LoopscribeHooks.stream_events` iterates a streamed result
for the host and publishes each text, reasoning and tool-argument delta as
a transient ``message_update`` of its model execution (live subscribers
only; never written).

Checkpoints and resuming: ``LoopscribeHooks(run, checkpoints=True)`` writes a
``checkpoint`` after each recorded top-level run: the agent, the last
response id, and what the SDK resumes from, ``input`` (the run's
``to_input_list()``) or, for a run interrupted for tool approvals,
``run_state`` (the SDK's ``result.to_state().to_json()``). Rebuild the
state with ``RunState.from_json``, approve or reject its interruptions, and
pass it to :meth:`LoopscribeHooks.run`: the resumed part is an agent
execution marked ``resumed``, with an ``approval`` record per decision under
the call's execution, then the approved calls and the rest of the run.

Retries: each attempt of a model call the SDK's retry policy retried is an
attempt of the turn's ``model_N`` (the failed one's error, ``retry_scheduled``,
the next one's start and request). Hooks learn of them through the policy
the run config of :meth:`LoopscribeHooks.run_config` carries: it asks the
policy the run would have used and returns its answer unchanged.

What hooks cannot show, and so is not recorded: failed retry attempts when
the hooks are given to ``Runner`` without :meth:`LoopscribeHooks.run_config`
(``model_exec_end.failed_attempts`` still counts them), the SDK's implicit
model-setting defaults, tools listed at run time by MCP servers, hosted
tools (they run at the provider and appear only as output items), and the
response's model name (``ModelResponse`` has none). An output guardrail
trips after ``on_agent_end``; :meth:`LoopscribeHooks.record_error` then
records it on an agent execution of its own, which ends with the error.
"""

from ._hooks import GUARDRAIL, HANDOFF, LoopscribeHooks, provider_of
from ._install import install, installed, uninstall
from ._messages import assistant_message, from_chat_messages, from_items, to_items
from ._tracing import LoopscribeTraceProcessor

__all__ = [
    "GUARDRAIL",
    "HANDOFF",
    "LoopscribeHooks",
    "LoopscribeTraceProcessor",
    "assistant_message",
    "from_chat_messages",
    "from_items",
    "install",
    "installed",
    "provider_of",
    "to_items",
    "uninstall",
]
