"""MCP: a client session's tool calls as tool executions, and a server's tool handlers.

Client side (``ClientSession.call_tool``): ``tool_exec_start`` with the
tool's name and arguments, ``tool_exec_end`` with the result's content,
structured content and ``isError``; a call cancelled, or cut by a server
that died, ends with that error (and re-raises it). Both records carry
``mcp``: the method (``tools/call``), the server's name and version and the
protocol version, which the span bridge turns into the ``mcp.*``
attributes of the semantic conventions.

``ClientSession.list_tools`` records nothing by itself: the tools it lists
are remembered per run, and the next model request that declares one of
them names its server under ``mcp_tools``.

Server side (``MCPServer.call_tool``, the handler dispatch of the server
formerly called FastMCP): each handled call is a tool execution in the
server process's own run (its current run, else its per-process session).
"""

from __future__ import annotations

import logging
import secrets
import weakref
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .. import events as ev
from .._hostkit import LOGGER
from .._model import Event, Execution
from .._session import Run
from ._body import GUARD
from ._patch import Instrumentation, patch
from ._target import target_run

logger = logging.getLogger(LOGGER)

METHOD = "tools/call"

_listed: weakref.WeakKeyDictionary[Run, dict[str, str]] = weakref.WeakKeyDictionary()


def mcp_tools_of(run: Run, tools: list[Any]) -> dict[str, str]:
    """The tools of a model request an MCP server listed in this run: name → server."""
    listed = _listed.get(run)
    if not listed:
        return {}
    out: dict[str, str] = {}
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        name = (function if isinstance(function, Mapping) else tool).get("name")
        if isinstance(name, str) and name in listed:
            out[name] = listed[name]
    return out


def _record(run: Run, event: Event) -> None:
    GUARD.record(run, event)


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json", by_alias=True, exclude_none=True)
        except Exception:
            return repr(value)
    return value


def _server_of(session: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"method": METHOD}
    try:
        server = getattr(session, "server_info", None)
        if server is not None:
            info["server"] = getattr(server, "name", None)
            info["server_version"] = getattr(server, "version", None)
        version = getattr(session, "protocol_version", None)
        if isinstance(version, str):
            info["protocol_version"] = version
    except Exception:
        logger.debug("no server info on %r", session)
    return {k: v for k, v in info.items() if v is not None}


async def _recorded(run: Run, name: str, arguments: Any, mcp: dict[str, Any], call: Any) -> Any:
    ex = Execution(f"mcp_{secrets.token_hex(6)}", "tool")
    start = ev.tool_exec_start(
        ex, name, _plain(arguments), tool_type="extension", timestamp=datetime.now(UTC)
    )
    _record(run, Event(start.type, ex, {**start.data, "mcp": mcp}, start.timestamp))
    try:
        result = await call()
    except BaseException as exc:
        end = ev.tool_exec_end(ex, name, error=exc, timestamp=datetime.now(UTC))
        _record(run, Event(end.type, ex, {**end.data, "mcp": mcp}, end.timestamp))
        raise
    plain = _plain(result)
    content = plain.get("content") if isinstance(plain, Mapping) else None
    structured = plain.get("structuredContent") if isinstance(plain, Mapping) else None
    is_error = bool(getattr(result, "is_error", False) or getattr(result, "isError", False))
    end = ev.tool_exec_end(
        ex,
        name,
        result=content if content is not None else plain,
        details=structured,
        is_error=is_error,
        timestamp=datetime.now(UTC),
    )
    _record(run, Event(end.type, ex, {**end.data, "mcp": mcp}, end.timestamp))
    return result


def _client_call_tool(original: Any) -> Any:
    async def call_tool(
        self: Any, name: str, arguments: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        try:
            run = target_run()
        except Exception:
            run = None
        if run is None:
            return await original(self, name, arguments, *args, **kwargs)
        return await _recorded(
            run,
            name,
            arguments,
            _server_of(self),
            lambda: original(self, name, arguments, *args, **kwargs),
        )

    call_tool.__wrapped__ = original  # type: ignore[attr-defined]
    return call_tool


def _client_list_tools(original: Any) -> Any:
    async def list_tools(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        try:
            run = target_run()
            if run is not None:
                server = _server_of(self).get("server") or "mcp"
                listed = _listed.setdefault(run, {})
                for tool in getattr(result, "tools", None) or ():
                    name = getattr(tool, "name", None)
                    if isinstance(name, str):
                        listed[name] = str(server)
        except Exception:
            GUARD.failed("noting the tools an MCP server listed")
        return result

    list_tools.__wrapped__ = original  # type: ignore[attr-defined]
    return list_tools


def _server_call_tool(original: Any) -> Any:
    async def call_tool(self: Any, name: str, arguments: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            run = target_run()
        except Exception:
            run = None
        if run is None:
            return await original(self, name, arguments, *args, **kwargs)
        mcp = {"method": METHOD, "server": getattr(self, "name", None), "side": "server"}
        return await _recorded(
            run,
            name,
            arguments,
            {k: v for k, v in mcp.items() if v is not None},
            lambda: original(self, name, arguments, *args, **kwargs),
        )

    call_tool.__wrapped__ = original  # type: ignore[attr-defined]
    return call_tool


_patched: list[Instrumentation] = []


def instrument(*, client: bool = True, server: bool = True) -> Instrumentation:
    """Record MCP tool calls: a client session's, a server's handlers', or both."""
    if _patched and _patched[0].active:
        return _patched[0]
    undos = []
    if client:
        from mcp.client.session import ClientSession

        undos.append(patch(ClientSession, "call_tool", _client_call_tool))
        undos.append(patch(ClientSession, "list_tools", _client_list_tools))
    if server:
        try:
            from mcp.server.mcpserver import MCPServer as server_class
        except ImportError:  # mcp 1.x: the same server, called FastMCP
            from mcp.server.fastmcp import FastMCP as server_class  # type: ignore[no-redef,attr-defined]

        undos.append(patch(server_class, "call_tool", _server_call_tool))

    def undo() -> None:
        for step in reversed(undos):
            step()

    _patched[:] = [Instrumentation("mcp", undo)]
    return _patched[0]
