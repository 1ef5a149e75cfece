"""An MCP server that says whatever it is told to: the Remote's refusal table.

It runs in the test's own event loop, connected to the client by the SDK's in-memory
streams: a real MCP session (the SDK's server and client, JSON-RPC messages and all), with
no process to start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.memory import create_client_server_memory_streams

from sandbox import plane

KEY = "io.github.sandbox-runtime/executor"


def fake_dialer(config: dict[str, Any]) -> plane.parts.Dialer:
    """A dialer of a server advertising ``config["capability"]`` (if there is one) and
    listing ``config["tools"]``: each ``{"name", "readOnly"?, "meta"?}``. With
    ``config["facts"]``, it answers the facts method with that, whatever is asked."""
    tools = [
        types.Tool(
            name=t["name"],
            description="",
            input_schema={"type": "object"},
            annotations=types.ToolAnnotations(read_only_hint=t.get("readOnly", False)),
            _meta=t.get("meta"),
        )
        for t in config["tools"]
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    @asynccontextmanager
    async def dial() -> AsyncIterator[Any]:
        server: Server[Any] = Server("fake", version="0", on_list_tools=list_tools)
        if "facts" in config:

            async def facts(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
                reply: dict[str, Any] = config["facts"]
                return reply

            server.add_request_handler(f"{KEY}/facts", types.RequestParams, facts)
        experimental = {KEY: config["capability"]} if "capability" in config else None
        options = server.create_initialization_options(experimental_capabilities=experimental)
        async with (
            create_client_server_memory_streams() as (client, served),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(server.run, served[0], served[1], options)
            try:
                yield client
            finally:
                tg.cancel_scope.cancel()

    return dial
