"""What the MCP SDK lacks a public hook for, in one place, for both ends of the connection.

* The client's own ``experimental`` capabilities at initialize: the SDK's session always
  sends none, so :func:`initialize` makes the (2025-11-25, "handshake era") initialize
  request itself with public calls. The executor needs that era: its server sends requests
  back to the client while a call is in flight, which the stateless 2026 era cannot.
* Answering a custom server -> client request: the SDK answers any method it does not know
  with "method not found", so :class:`_Dispatcher` serves ours before it does.
* Custom requests: :func:`raw_request` sends any method and takes any result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
import pydantic
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import DispatchContext, OnRequest
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.version import LATEST_HANDSHAKE_VERSION

__all__ = ["Dispatcher", "RawRequest", "initialize", "raw_request"]


class _AnyResult(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")


async def raw_request(
    session: ClientSession, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Send a request of any method; its result as a JSON object."""
    got = await session.send_request(RawRequest(method=method, params=params), _AnyResult)
    return dict(got.model_extra or {})


Handler = Callable[[Mapping[str, Any] | None], Awaitable[dict[str, Any]]]


class RawRequest(types.Request[dict[str, Any] | None, str]):
    """A request of any method with any params."""

    params: dict[str, Any] | None = None


class Dispatcher(JSONRPCDispatcher[Any]):
    """The SDK's JSON-RPC dispatcher, answering ``handlers``' methods itself, and saying
    when its connection has ended (:attr:`ended`: the peer hung up)."""

    def __init__(self, read: Any, write: Any, handlers: dict[str, Handler]) -> None:
        super().__init__(read, write)
        self._handlers = handlers
        self.ended = anyio.Event()

    async def run(self, on_request: OnRequest, on_notify: Any, *args: Any, **kwargs: Any) -> None:
        async def route(
            dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None
        ) -> dict[str, Any]:
            handler = self._handlers.get(method)
            if handler is not None:
                return await handler(params)
            result: dict[str, Any] = await on_request(dctx, method, params)
            return result

        try:
            await super().run(route, on_notify, *args, **kwargs)
        finally:
            self.ended.set()


async def initialize(
    session: ClientSession,
    experimental: dict[str, dict[str, Any]],
    client_info: types.Implementation,
) -> types.InitializeResult:
    """The handshake-era initialize, carrying the client's ``experimental`` capabilities."""
    result = await session.send_request(
        types.InitializeRequest(
            params=types.InitializeRequestParams(
                protocol_version=LATEST_HANDSHAKE_VERSION,
                capabilities=types.ClientCapabilities(experimental=experimental),
                client_info=client_info,
            )
        ),
        types.InitializeResult,
    )
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())
    return result
