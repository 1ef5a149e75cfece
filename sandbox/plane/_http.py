"""The HTTP application of ``sandbox serve --http``: the MCP SDK's streamable HTTP parts,
put together with what they lack.

* A cancelled request gets no answer. The SDK's 2025-era transport answers one with
  ``-32800``, which the spec forbids (and the TypeScript client reports as a response for
  an unknown message id); :class:`_Transport` only ends the request's stream.
* A malformed message gets the JSON-RPC error it deserves in a line
  (:func:`~sandbox.plane._jsonrpc.diagnose`), where the SDK answers every one with
  ``-32602`` and pydantic's whole report; and a line in the log.
* Host names compare without case (``LOCALHOST:PORT`` is the host served): the SDK's check
  of the Host and Origin headers is exact, so they are lowered before it.
* Authentication: any :class:`~mcp.server.auth.provider.TokenVerifier` behind the SDK's
  own bearer middleware (``401`` with ``WWW-Authenticate``), and for OAuth the SDK's
  protected resource metadata (RFC 9728).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final
from uuid import uuid4

import anyio
import anyio.abc
import msgspec
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import (
    AuthorizationContext,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import JSONRPCRequest, RequestId, jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from protocol import MAX_FRAME_BYTES

from ._jsonrpc import diagnose

__all__ = ["MAX_BODY", "PATH", "http_app", "listening_socket"]

#: Where the MCP endpoint is.
PATH: Final = "/mcp"
#: The largest request body read: a program the sandbox can take (a frame of 16 MiB) fits,
#: with room for JSON's escapes; a larger one is refused (413) before it is read.
MAX_BODY: Final = 2 * MAX_FRAME_BYTES
#: Headers whose values are host names, compared without case.
_CASELESS: Final = (b"host", b"origin")
#: How long a request's event stream holds its headers, waiting for an answer to send with
#: them (:class:`_Coalesced`): a call that takes longer streams, its response started.
HOLD: Final = 1.0


class _Transport(StreamableHTTPServerTransport):
    """The SDK's transport of one session, but a cancelled request is never answered."""

    async def _terminate_unanswered_request(self, request_id: RequestId) -> None:
        # The SDK writes a -32800 error here, so that the request's stream ends with a
        # response. The spec says a cancelled request gets none; ending its stream is
        # enough (the client stopped waiting when it cancelled).
        self.close_sse_stream(str(request_id))


class _Sessions(StreamableHTTPSessionManager):
    """The SDK's session manager, with :class:`_Transport`, its requests' host names
    lowered, and malformed messages answered in a line."""

    def __init__(self, server: Server[Any], log: Callable[[str], Any], **options: Any) -> None:
        super().__init__(server, **options)
        self._log = log
        self._timers: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The SDK's, with a task group for :class:`_Coalesced`'s timers."""
        async with super().run(), anyio.create_task_group() as timers:
            self._timers = timers
            try:
                yield
            finally:
                self._timers = None
                timers.cancel_scope.cancel()

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        # As the SDK's, with our transport.
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        transport = _Transport(
            mcp_session_id=uuid4().hex,
            is_json_response_enabled=self.json_response,
            event_store=self.event_store,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        session_id = transport.mcp_session_id
        assert session_id is not None
        if requestor is not None:
            self._session_owners[session_id] = requestor
        self._server_instances[session_id] = transport
        return transport

    async def _handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["headers"] = [
            (k, v.lower() if k in _CASELESS else v) for k, v in scope.get("headers", [])
        ]
        if scope.get("method") == "POST":
            body, receive = await _read_body(receive)
            try:
                message = jsonrpc_message_adapter.validate_json(body, by_name=False)
            except ValidationError:
                bad = diagnose(body)
                client = scope.get("client")
                who = f"{client[0]}:{client[1]}" if client else "a client"
                self._log(f"refused a malformed message from {who}: {bad.line()}")
                refusal = Response(
                    bad.error().model_dump_json(by_alias=True, exclude_unset=True),
                    status_code=400,
                    media_type="application/json",
                )
                await refusal(scope, receive, send)
                return
            if isinstance(message, JSONRPCRequest) and self._timers is not None:
                coalesced = _Coalesced(send, message.id, self._timers)
                try:
                    await super()._handle_request(scope, receive, coalesced)
                    await coalesced.flush()  # (if the request failed, nothing held goes out)
                finally:
                    coalesced.close()
                return
        await super()._handle_request(scope, receive, send)


class _Coalesced:
    """The ``send`` of a request's answer: an event stream whose first event is the answer
    itself goes out as one body with its length, not as a stream.

    A request's SSE stream ends right after its answer; when nothing comes before it (no
    request of the server's, no notification: a plain call), the stream is three writes on
    the connection (the headers, the event, the end of the chunks), and on loopback each
    write wakes the client. Holding the headers until the first event, and an event that is
    the answer until the end that follows it at once, makes them one response with a
    length: two writes, one wake-up fewer. Anything else (an event that is not the answer,
    a ping) lets what is held go at once, and the stream streams.

    Nothing is held longer than :data:`HOLD`: a call still running then has its response
    started, so that its client sees it accepted (the SDK's first event of a quiet stream
    is a ping, 15 seconds on).
    """

    def __init__(self, send: Send, request_id: RequestId, timers: anyio.abc.TaskGroup) -> None:
        self._send = send
        rid = msgspec.json.encode(request_id)
        data = b'event: message\r\ndata: {"jsonrpc":"2.0","id":' + rid
        self._answers = (data + b',"result":', data + b',"error":')
        self._start: Message | None = None
        self._event: bytes | None = None
        self._streaming = False
        # The timer's sends and the response's go one at a time, in order.
        self._lock = anyio.Lock(fast_acquire=True)
        self._timers = timers
        self._timer = anyio.CancelScope()

    async def __call__(self, message: Message) -> None:
        async with self._lock:
            if self._streaming:
                await self._send(message)
            elif message["type"] == "http.response.start":
                await self._on_start(message)
            elif message["type"] == "http.response.body" and self._start is not None:
                await self._on_body(self._start, message)
            else:
                await self._stream(message)

    async def _on_start(self, start: Message) -> None:
        """Hold an event stream's headers until its first event, for :data:`HOLD` at
        most; send any other's."""
        if _is_event_stream(start):
            self._start = start
            self._timers.start_soon(self._release)
        else:
            self._streaming = True
            await self._send(start)

    async def _on_body(self, start: Message, message: Message) -> None:
        """A chunk of the event stream whose headers (``start``) are held: hold it if it
        is the answer and comes first, send it with the answer held before it if it is the
        stream's end, and otherwise stream."""
        body: bytes = message.get("body", b"")
        more: bool = message.get("more_body", False)
        if self._event is None and more and body.startswith(self._answers):
            self._event = body
        elif self._event is not None and not more and not body:
            await self._send_whole(start, self._event)
        else:
            await self._stream(message)

    async def _send_whole(self, start: Message, event: bytes) -> None:
        """Send the held headers and answer as one response with its length."""
        self._start = self._event = None
        self._streaming = True
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(event)).encode()))
        await self._send({**start, "headers": headers})
        await self._send({"type": "http.response.body", "body": event})

    async def _stream(self, message: Message) -> None:
        """Send what is held, then ``message``, and stream from now on."""
        await self._flush()
        await self._send(message)

    async def _release(self) -> None:
        """After :data:`HOLD`, send what is still held."""
        with self._timer:
            await anyio.sleep(HOLD)
            try:
                await self.flush()
            except Exception:
                # The client has gone (the response's own next send says so), or the
                # response ended meanwhile: whatever it is, a timer must not take the
                # server's task group, and every other session, down with it.
                pass

    def close(self) -> None:
        """Stop the timer: the response is over."""
        self._timer.cancel()

    async def flush(self) -> None:
        """Send what is held, and stream from now on."""
        async with self._lock:
            await self._flush()

    async def _flush(self) -> None:
        self._streaming = True
        start, event = self._start, self._event
        self._start = self._event = None
        if start is not None:
            await self._send(start)
        if event is not None:
            await self._send({"type": "http.response.body", "body": event, "more_body": True})


def _is_event_stream(start: Message) -> bool:
    return any(
        k.lower() == b"content-type" and v.lower().startswith(b"text/event-stream")
        for k, v in start.get("headers", [])
    )


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The request's body, and a ``receive`` that gives it again (then the rest)."""
    chunks: list[bytes] = []
    pending: list[Message] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            pending.append(message)
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    pending.insert(0, {"type": "http.request", "body": body, "more_body": False})

    async def again() -> Message:
        return pending.pop(0) if pending else await receive()

    return body, again


def http_app(
    server: Server[Any],
    *,
    security: TransportSecuritySettings,
    log: Callable[[str], Any],
    verifier: TokenVerifier | None = None,
    oauth: AuthSettings | None = None,
) -> tuple[Starlette, StreamableHTTPSessionManager]:
    """The ASGI application serving ``server`` at :data:`PATH`, and its session manager.

    Args:
        security: the Host and Origin headers accepted (lower-case names).
        log: told, in a line, of each malformed message refused.
        verifier: if given, every request needs a bearer token it accepts (``401``
            otherwise).
        oauth: for OAuth, this server's URL and its authorization server's, published as
            protected resource metadata (RFC 9728) and named in ``WWW-Authenticate``, and
            the scopes every token needs (``403`` otherwise).
    """
    sessions = _Sessions(
        server,
        log,
        security_settings=security,
        max_request_body_size=MAX_BODY,
        # The SDK's idle timeout counts a client's open event stream as a request in
        # flight, so a client that holds one is never idle; ExecutorServer keeps its own.
        session_idle_timeout=None,
    )
    endpoint: Any = StreamableHTTPASGIApp(sessions)
    middleware: list[Middleware] = []
    routes: list[Route] = []
    if verifier is not None:
        metadata = None
        scopes = (oauth.required_scopes if oauth is not None else None) or []
        if oauth is not None and oauth.resource_server_url is not None:
            metadata = build_resource_metadata_url(oauth.resource_server_url)
            routes.extend(
                create_protected_resource_routes(
                    oauth.resource_server_url, [oauth.issuer_url], scopes or None
                )
            )
        endpoint = RequireAuthMiddleware(endpoint, scopes, metadata)
        middleware = [
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
            Middleware(AuthContextMiddleware),
        ]
    routes.insert(0, Route(PATH, endpoint=endpoint))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lambda _: sessions.run())
    return app, sessions


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port``, whose accepted connections send at once.

    The protocol number matters: asyncio sets TCP_NODELAY on a connection it accepts only
    when the listening socket says IPPROTO_TCP, and ``socket.socket(family)`` says 0.
    Without TCP_NODELAY, the second small write of a response (an SSE event after its
    headers) waits for the ACK of the first, which a kept-alive client delays by 40 ms.
    Set on the listening socket as well, which Linux copies to the connections it accepts
    whatever the event loop does.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock
