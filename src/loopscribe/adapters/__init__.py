"""Adapters that record real agent frameworks through ``Run.record``.

Each adapter is an optional extra and is imported only when used:

* ``loopscribe.adapters.openai_agents`` — ``pip install 'loopscribe[openai-agents]'``
* ``loopscribe.adapters.langchain`` — ``pip install 'loopscribe[langchain]'``
* ``loopscribe.adapters.pydantic_ai`` — ``pip install 'loopscribe[pydantic-ai]'``

``import loopscribe`` never imports a framework.
"""
