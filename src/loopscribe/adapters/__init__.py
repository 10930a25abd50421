"""Adapters that record real agent frameworks through ``Run.record``.

Each adapter is an optional extra and is imported only when used:

* ``loopscribe.adapters.openai_agents`` — ``pip install 'loopscribe[openai-agents]'``
* ``loopscribe.adapters.langchain`` — ``pip install 'loopscribe[langchain]'``
* ``loopscribe.adapters.pydantic_ai`` — ``pip install 'loopscribe[pydantic-ai]'``
* ``loopscribe.adapters.claude_agent_sdk`` — ``pip install 'loopscribe[claude-agent-sdk]'``
  (a session store, not a ``Run.record`` hook: it maps Claude Code's transcript lines)

``import loopscribe`` never imports a framework.
"""

__all__: list[str] = []
