"""A stdio MCP server for the instrument tests: ``add``, ``fail``, and ``hang`` (writes its pid)."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("calc")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


@server.tool()
def hang(marker: str) -> str:
    """Write this process's pid to ``marker``, then never return."""
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.stderr.close()
    server.run()
