"""An upstream MCP server written with the SDK's MCPServer, misbehaving on demand.

``python -m tests.upstream.fake_upstream [stdio|http PORT]``; ``FAKE_UPSTREAM`` says how it
behaves beyond its ordinary tools:

* ``crash``: ``crash()`` ends the process while the call is in flight;
* ``hang``: ``hang()`` never answers (until it is cancelled, which it records in the
  file ``FAKE_UPSTREAM_LOG`` names);
* ``changing``: ``grow()`` adds a tool ``added`` and says the tool list changed;
* ``clash``: tools ``get-sum`` and ``get_sum``, one binding apart.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer

MODE = os.environ.get("FAKE_UPSTREAM", "")
LOG = os.environ.get("FAKE_UPSTREAM_LOG", "")

server: MCPServer[Any] = MCPServer("fake-upstream")


def _log(line: str) -> None:
    if LOG:
        with Path(LOG).open("a") as f:
            f.write(line + "\n")


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Say ``text`` back, ``times`` times."""
    return text * times


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def fail(reason: str) -> str:
    """Fail with ``reason``."""
    raise ValueError(reason)


if MODE == "crash":

    @server.tool()
    async def crash() -> str:
        """End the server mid-call."""
        _log("crashing")
        os._exit(3)


if MODE == "hang":

    @server.tool()
    async def hang() -> str:
        """Never answer."""
        _log("hanging")
        try:
            await anyio.sleep_forever()
        finally:
            _log("cancelled")
        return "never"


if MODE == "changing":

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool and say so."""

        def added(x: int) -> int:
            """Twice ``x``."""
            return 2 * x

        server.add_tool(added, name="added")
        await ctx.session.send_tool_list_changed()
        return "grown"


if MODE == "clash":

    @server.tool(name="get-sum")
    def get_sum_dashed(a: int, b: int) -> int:
        """a + b."""
        return a + b

    @server.tool(name="get_sum")
    def get_sum(a: int, b: int) -> int:
        """a + b, again."""
        return a + b


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
