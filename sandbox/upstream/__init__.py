"""Code mode over the MCP servers people already run: their tools as a program's host tools.

An agent that calls tools one at a time sends every intermediate result through the model's
context; a program that calls them, filters and joins what they return, and returns only
what matters, sends one value. :class:`Upstreams` connects to upstream MCP servers with the
official SDK's client, over stdio (:func:`stdio`) or streamable HTTP (:func:`http`), lists
their tools, and offers each one:

* to a run, as ``host.<server>__<tool>(**arguments)`` (:meth:`Upstreams.host_tools`);
* to an executor (``sandbox serve``, the agent), as an execution-plane tool
  (:meth:`Upstreams.tools`), which a program run by the program tool calls the same way;
* to a model, as typed Python stubs (:meth:`Upstreams.describe`).

A call's arguments are checked against the tool's input schema before they are sent (an
``invalid`` :class:`~protocol.CallError` in the program otherwise), then decided by the
policy, which sees the call, the tool's definition and its annotations (``readOnlyHint``,
``destructiveHint``...). Its value is the tool's ``structuredContent`` when it has some;
else the text of its content (a ``str``, text blocks joined by newlines) when it is all
text; else its content blocks as JSON objects (``{"type": "image", "data": ...,
"mimeType": ...}``, as MCP writes them). A result with ``isError`` raises ``CallError``
of kind ``raised`` with the server's text. As host calls, upstream calls count against the
run's budget (calls, result bytes, the in-flight cap, the per-call deadline) like any
other; a call cut off by its deadline or by the end of the run is cancelled upstream too
(MCP's ``notifications/cancelled``).

::

    memory = stdio("npx -y @modelcontextprotocol/server-memory", name="memory")
    async with Upstreams([memory]) as up:
        result = await sandbox.run("await host.memory__read_graph()", tools=up.host_tools())
"""

from __future__ import annotations

from ._client import (
    CONNECT_TIMEOUT,
    SEPARATOR,
    Upstream,
    UpstreamError,
    Upstreams,
    UpstreamTool,
    http,
    parse_mcp,
    read_only,
    stdio,
)

__all__ = [
    "CONNECT_TIMEOUT",
    "SEPARATOR",
    "Upstream",
    "UpstreamError",
    "UpstreamTool",
    "Upstreams",
    "http",
    "parse_mcp",
    "read_only",
    "stdio",
]
