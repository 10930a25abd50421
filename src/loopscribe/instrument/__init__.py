"""One line per SDK: the calls an agent makes itself, recorded as they were sent and received.

::

    import loopscribe.instrument

    loopscribe.instrument.openai()      # every OpenAI client; or openai(client) for one
    loopscribe.instrument.anthropic()

    with Session.create("chat.jsonl") as session, session.begin_run() as run:
        client.chat.completions.create(...)   # recorded into ``run``

Each function patches the installed SDK (or one client) and returns an
:class:`Instrumentation` whose ``uninstrument()`` puts it back. A call made
inside a run made current with ``with session.begin_run() as run:`` is
recorded into that run (threads started with ``contextvars.copy_context()``
and asyncio tasks see it too); a call outside any run goes to one session
per process in the folder given to :func:`configure` (default:
the sessions home: ``LOOPSCRIBE_DIR``, else the XDG data folder).

What a model call records: every HTTP attempt the SDK's retry loop makes,
as an attempt of one execution (``retry_scheduled`` between), each with the
request read from the exact body the SDK sent; the response as a message
with usage, finish reason and response id; for streams, deltas to live
subscribers and the assembled message, or the partial message and the
error when the stream breaks or the caller stops reading. The SDKs are
optional: nothing here imports one until its function is called, and
nothing here raises into the caller. See ``docs/instrument.md``.
"""

from __future__ import annotations

from typing import Any

from ._patch import Instrumentation
from ._target import DEFAULT_DIR, DIR_ENV, configure, default_session

__all__ = [
    "DEFAULT_DIR",
    "DIR_ENV",
    "Instrumentation",
    "anthropic",
    "configure",
    "default_session",
    "google_genai",
    "mcp",
    "openai",
]


def openai(client: Any = None) -> Instrumentation:
    """Record OpenAI Chat Completions and Responses calls (every client, or ``client``).

    Args:
        client: An ``openai.OpenAI`` / ``AsyncOpenAI`` (or Azure) client to
            instrument alone; ``None`` patches the SDK for every client.

    Returns:
        The handle; ``uninstrument()`` restores the SDK.
    """
    from ._openai import instrument as patch_openai

    return patch_openai(client)


def anthropic(client: Any = None) -> Instrumentation:
    """Record Anthropic Messages calls (every client, or ``client``)."""
    from ._anthropic import instrument as patch_anthropic

    return patch_anthropic(client)


def mcp(*, client: bool = True, server: bool = True) -> Instrumentation:
    """Record MCP tool calls: ``ClientSession.call_tool`` and ``MCPServer`` tool handlers.

    Args:
        client: Record the calls a client session makes (and note the tools
            ``list_tools`` returns, for the next model request).
        server: Record the calls an ``MCPServer`` (formerly FastMCP) handles,
            in the server process's own run.
    """
    from ._mcp import instrument as patch_mcp

    return patch_mcp(client=client, server=server)


def google_genai(client: Any = None) -> Instrumentation:
    """Record Google GenAI ``generate_content`` calls and streams (every client, or ``client``).

    Calls the SDK sends through ``httpx`` (an API key, or a given HTTP
    client) are recorded; Vertex AI calls it sends through
    ``google.auth``'s requests session are not.
    """
    from ._google import instrument as patch_google

    return patch_google(client)
