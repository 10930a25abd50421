"""Every instrument function's handle puts back exactly what it patched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loopscribe import instrument


def _targets() -> dict[str, list[tuple[Any, str]]]:
    import anthropic._base_client
    import openai._base_client
    from google.genai import _api_client
    from mcp.client.session import ClientSession
    from mcp.server.mcpserver import MCPServer

    return {
        "openai": [
            (openai._base_client.SyncAPIClient, "request"),
            (openai._base_client.AsyncAPIClient, "request"),
        ],
        "anthropic": [
            (anthropic._base_client.SyncAPIClient, "request"),
            (anthropic._base_client.AsyncAPIClient, "request"),
        ],
        "google_genai": [
            (_api_client.BaseApiClient, "_request"),
            (_api_client.BaseApiClient, "_async_request"),
        ],
        "mcp": [
            (ClientSession, "call_tool"),
            (ClientSession, "list_tools"),
            (MCPServer, "call_tool"),
        ],
    }


@pytest.mark.parametrize("name", ["openai", "anthropic", "google_genai", "mcp"])
def test_uninstrument_restores_the_sdk_exactly(name: str) -> None:
    """Patched while active (twice is one patch), the SDK's own functions after uninstrument."""
    targets = _targets()[name]
    before = [vars(owner)[attr] for owner, attr in targets]
    function: Callable[[], instrument.Instrumentation] = getattr(instrument, name)
    handle = function()
    assert function() is handle
    assert all(vars(o)[a] is not b for (o, a), b in zip(targets, before, strict=True))
    handle.uninstrument()
    handle.uninstrument()
    assert [vars(owner)[attr] for owner, attr in targets] == before
    assert not handle.active
