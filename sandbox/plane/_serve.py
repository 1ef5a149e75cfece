"""An executor served over MCP (``sandbox serve``): over stdio, or streamable HTTP.

Each session gets tools of its own, built when it first needs them from its budget: what it
asked for under the capability key at initialize, capped at the ceilings that whoever runs
the server set. The tools are closed when the session ends. Facts and replay are read here,
in the server, by the custom methods; a program's host calls go back to the session to be
decided when the client says it decides them (``invoke``).
"""

from __future__ import annotations

import ipaddress
import math
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import anyio
import mcp_types as types
import msgspec
import pydantic
from mcp.server import Server
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import INVALID_PARAMS

from protocol import Kind

from .._budget import Budget
from .._model import Call, CallContext, Descriptor, Result, Tool
from ._auth import BearerToken, OAuth
from ._capability import (
    CAPABILITY_KEY,
    CAPABILITY_VERSION,
    FACTS_METHOD,
    INVOKE_METHOD,
    REPLAY_METHOD,
    Asked,
    Capability,
    FactsReading,
    FactsReply,
    ReplayReply,
    WireCall,
    cap_budget,
    flags_of,
)
from ._executor import FACTS_TIMEOUT, InProcess
from ._http import PATH, http_app, listening_socket
from ._stdio import StdioTransport
from .errors import PlaneError, UnknownTool

if TYPE_CHECKING:
    import uvicorn

__all__ = ["SESSION_IDLE", "ExecutorServer", "Tools"]

#: How long a session served over HTTP may have no request in flight before it is closed
#: (a request in flight, a program's run among them, keeps it open however long it takes).
SESSION_IDLE: Final = 300.0

#: Where a connection's :class:`_Activity` is kept in its state.
_ACTIVITY: Final = f"{CAPABILITY_KEY}#activity"

#: Builds a session's tools for its budget (called for every session, and once at the
#: ceilings when the server is made, to check what it builds).
Tools = Callable[[Budget], Iterable[Tool]]


class _CallsParams(types.RequestParams):
    calls: list[dict[str, Any]]


class _ReplayParams(types.RequestParams):
    tool: str
    arguments: dict[str, Any] = pydantic.Field(default_factory=dict)


class _InvokeParams(types.RequestParams):
    call: str
    tool: str
    arguments: dict[str, Any]


class _InvokeRequest(types.Request[_InvokeParams, str]):
    method: str = INVOKE_METHOD
    params: _InvokeParams


class _InvokeResult(types.Result):
    text: str = ""
    data: Any = None
    is_error: bool = False
    kind: str | None = None


@final
class _Activity:
    """A connection's requests: how many are in flight, and when the last one ended."""

    def __init__(self) -> None:
        self.busy = 0
        self.last = time.monotonic()

    def idle_for(self, now: float) -> float:
        """Seconds without a request in flight (0 while one is)."""
        return 0.0 if self.busy else now - self.last


@final
class _Session:
    """One client's session: its budget, its tools, and the calls it has in flight."""

    def __init__(
        self, executor: InProcess, asked: Asked, session_id: str | None, activity: _Activity
    ) -> None:
        self.executor = executor
        self.asked = asked
        self.session_id = session_id
        self.activity = activity
        self.calls: set[anyio.CancelScope] = set()
        self.ended = False

    async def end(self) -> None:
        """Cancel the calls in flight (ending their runs) and close the tools, once."""
        if self.ended:
            return
        self.ended = True
        for scope in list(self.calls):
            scope.cancel()
        with anyio.CancelScope(shield=True):
            await self.executor.aclose()


@final
class ExecutorServer:
    """Serves the tools ``make`` builds as an MCP server that is an executor.

    Args:
        make: builds a session's tools for its budget.
        ceilings: the most any session may ask for (each budget item).
        descriptor: the workspace the tools act in, as sessions record it.
        name, version: the server's implementation name, given at initialize.
        level: the level programs run at, for the capability (informative).
        facts_timeout: seconds one facts or replay reading may take.
        log: told, in a line, what the server refused and why (a malformed message, a
            client that hung up); by default, standard error.

    Raises:
        DuplicateTool, TypeError: what ``make`` builds at the ceilings is refused (it is
            built once, checked and closed, before any session comes).
    """

    def __init__(
        self,
        make: Tools,
        *,
        ceilings: Budget,
        descriptor: Descriptor | None = None,
        name: str = "sandbox-executor",
        version: str = "1",
        level: str | None = None,
        facts_timeout: float = FACTS_TIMEOUT,
        log: Callable[[str], Any] | None = None,
    ) -> None:
        self._make = make
        self._log = log or _stderr_line
        self.ceilings = ceilings
        self._facts_timeout = facts_timeout
        probe = InProcess(make(ceilings), descriptor=descriptor, facts_timeout=facts_timeout)
        self.descriptor = probe.descriptor
        self._probe = probe
        self.name, self.version, self.level = name, version, level
        self._live: set[_Session] = set()
        self._sessions: StreamableHTTPSessionManager | None = None
        self._capability: dict[str, Any] | None = None
        self._server = self._build()

    async def _checked(self) -> dict[str, Any]:
        if self._capability is None:
            tools = await self._probe.tools()
            cap = Capability(
                version=CAPABILITY_VERSION,
                descriptor=self.descriptor,
                tools=tuple(flags_of(t) for t in tools),
                ceilings=self.ceilings,
                level=self.level,
            )
            await self._probe.aclose()
            self._capability = msgspec.to_builtins(cap)
        return self._capability

    @property
    def capability(self) -> dict[str, Any]:
        """The capability's value (after :meth:`prepare`)."""
        if self._capability is None:
            raise RuntimeError("call prepare() first")
        return self._capability

    async def prepare(self) -> None:
        """Read the tools' flags (once) for the capability, and close the probe tools."""
        await self._checked()

    @property
    def sessions(self) -> list[_Session]:
        """The sessions that have tools and have not ended."""
        return [s for s in self._live if not s.ended]

    # -- the MCP server --

    def _build(self) -> Server[Any]:
        outer = self

        class _Server(Server[Any]):
            def create_initialization_options(self, *args: Any, **kwargs: Any) -> Any:
                opts = super().create_initialization_options(*args, **kwargs)
                opts.capabilities.experimental = {CAPABILITY_KEY: outer.capability}
                return opts

        server = _Server(
            self.name,
            version=self.version,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        server.add_request_handler(FACTS_METHOD, _CallsParams, self._facts)
        server.add_request_handler(REPLAY_METHOD, _ReplayParams, self._replay)
        server.middleware.append(self._middleware)
        return server

    async def _middleware(
        self, ctx: ServerRequestContext[Any], call_next: CallNext
    ) -> HandlerResult:
        # A session with a request in flight is not idle, however long the request takes.
        activity = _activity_of(_connection_of(ctx))
        activity.busy += 1
        try:
            return await call_next(ctx)
        except pydantic.ValidationError as exc:
            # The SDK answers "Invalid request parameters" and nothing more: say which.
            message = _invalid_params(ctx.method, exc)
            error = MCPError(code=INVALID_PARAMS, message=message)
            self._log(f"refused {ctx.method} (id {ctx.request_id!r}): {INVALID_PARAMS}: {message}")
            raise error from None
        finally:
            activity.busy -= 1
            activity.last = time.monotonic()

    def _state(self, ctx: ServerRequestContext[Any]) -> _Session:
        """The session's state, made at its first request after initialize."""
        connection = _connection_of(ctx)
        state = connection.state.get(CAPABILITY_KEY)
        if isinstance(state, _Session):
            if state.ended:
                raise PlaneError("the session has ended")
            return state
        caps = connection.client_capabilities
        raw = (caps.experimental or {}).get(CAPABILITY_KEY) if caps is not None else None
        try:
            asked = msgspec.convert(raw, Asked) if raw is not None else Asked()
        except msgspec.ValidationError as exc:
            raise ValueError(
                f"{CAPABILITY_KEY}: the client's request does not decode: {exc}"
            ) from None
        budget = cap_budget(asked.budget, self.ceilings)
        executor = InProcess(
            self._make(budget), descriptor=self.descriptor, facts_timeout=self._facts_timeout
        )
        state = _Session(executor, asked, connection.session_id, _activity_of(connection))
        connection.state[CAPABILITY_KEY] = state
        self._live.add(state)

        async def ended() -> None:
            self._live.discard(state)
            await state.end()

        # However the session ends (the client hangs up or deletes it, it expires, the
        # server stops), its calls are cancelled and its tools closed.
        connection.exit_stack.push_async_callback(ended)
        return state

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        state = self._state(ctx)
        listed = []
        for info in await state.executor.tools():
            a = info.annotations
            listed.append(
                types.Tool(
                    name=info.name,
                    description=info.description,
                    input_schema=info.input_schema,
                    annotations=types.ToolAnnotations(
                        title=a.title,
                        read_only_hint=a.read_only,
                        destructive_hint=a.destructive,
                        idempotent_hint=a.idempotent,
                        open_world_hint=a.open_world,
                    ),
                    _meta={CAPABILITY_KEY: msgspec.to_builtins(flags_of(info))},
                )
            )
        return types.ListToolsResult(tools=listed)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        state = self._state(ctx)
        call = Call(tool=params.name, arguments=dict(params.arguments or {}))
        token = _call_token(ctx.params)
        invoke = None
        if state.asked.invoke and token is not None:
            invoke = _invoker(ctx, token)
        scope = anyio.CancelScope()
        state.calls.add(scope)
        try:
            with scope:
                result = await state.executor.call(call, CallContext(invoke=invoke))
        except UnknownTool as exc:
            result = Result(text=str(exc), is_error=True, kind=Kind.INVALID)
        finally:
            state.calls.discard(scope)
        if scope.cancelled_caught:
            result = Result(text="the session ended", is_error=True, kind=Kind.CANCELED)
        return _mcp_result(result)

    async def _facts(self, ctx: ServerRequestContext[Any], params: _CallsParams) -> dict[str, Any]:
        state = self._state(ctx)
        calls = msgspec.convert(params.calls, list[WireCall])
        readings: list[FactsReading] = [FactsReading()] * len(calls)

        async def read(i: int, c: WireCall) -> None:
            try:
                facts = await state.executor.facts(Call(tool=c.tool, arguments=c.arguments))
                readings[i] = FactsReading(facts=facts)
            except UnknownTool as exc:
                readings[i] = FactsReading(error=str(exc), unknown_tool=True)
            except PlaneError as exc:
                readings[i] = FactsReading(error=str(exc))

        # One request's readings are read side by side: the batch takes as long as its
        # slowest reading, within the one timeout the client gave the request.
        async with anyio.create_task_group() as tg:
            for i, c in enumerate(calls):
                tg.start_soon(read, i, c)
        out: dict[str, Any] = msgspec.to_builtins(FactsReply(readings=tuple(readings)))
        return out

    async def _replay(
        self, ctx: ServerRequestContext[Any], params: _ReplayParams
    ) -> dict[str, Any]:
        state = self._state(ctx)
        replay = await state.executor.replay(Call(tool=params.tool, arguments=params.arguments))
        out: dict[str, Any] = msgspec.to_builtins(ReplayReply(replay=replay))
        return out

    # -- transports --

    async def serve_stdio(self) -> None:
        """Serve one session on standard input and output until the client hangs up (its
        input ends, or a write finds it gone: then the session's calls are cancelled).

        A line that is not a JSON-RPC message the server can read is answered with its
        error (a notification's only logged), and logged.
        """
        await self.prepare()
        async with StdioTransport(self._log) as wire:
            try:
                async with anyio.create_task_group() as tg:

                    async def hang_up() -> None:
                        await wire.hung_up.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(hang_up)
                    options = self._server.create_initialization_options()
                    await self._server.run(wire.read, wire.write, options)
                    tg.cancel_scope.cancel()
            finally:
                await self._end_sessions()

    async def serve_http(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        idle: float = SESSION_IDLE,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
        token: str | None = None,
        oauth: OAuth | None = None,
        require_auth: bool | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        ready: Callable[[str], Any] | None = None,
    ) -> None:
        """Serve over streamable HTTP at ``http://host:port/mcp`` (``https`` with TLS) until
        cancelled (asyncio only: the HTTP server is uvicorn). ``ready`` is told the URL once
        it listens.

        Requests naming a host other than the one served (DNS rebinding) and cross-origin
        requests from a browser page are refused; ``allowed_hosts`` and
        ``allowed_origins`` add to what is accepted (``host:*`` matches any port). Host
        names compare without case.

        Args:
            idle: seconds a session may have no request in flight before it is closed.
            token: a bearer token every request must carry (compared in constant time).
            oauth: or: the server is an OAuth resource server, letting in the access
                tokens of an authorization server (see :class:`OAuth`).
            require_auth: whether to refuse to serve without ``token`` or ``oauth``; by
                default, whenever ``host`` is not a loopback address.
            tls_cert, tls_key: serve HTTPS with this certificate (PEM) and its key.

        Raises:
            ValueError: a bad option, or no authentication where it is required.
            OSError: the address cannot be bound, or the certificate or key read.
        """
        if not (idle > 0 and math.isfinite(idle)):
            raise ValueError(f"idle must be a positive number of seconds, got {idle!r}")
        _check_tls(tls_cert, tls_key)
        _check_auth(host, token, oauth, require_auth)
        bearer = BearerToken(token) if token is not None else None
        await self.prepare()
        sock = listening_socket(host, port)
        try:
            bound = sock.getsockname()[1]
            scheme = "http" if tls_cert is None else "https"
            url = f"{scheme}://{_url_host(host)}:{bound}{PATH}"
            security = _security(host, bound, scheme, allowed_hosts, allowed_origins)
            verifier, settings = _authentication(url, bearer, oauth)
            app, self._sessions = http_app(
                self._server,
                security=security,
                log=self._log,
                verifier=verifier,
                oauth=settings,
            )
            await self._serve_on(sock, _uvicorn(app, tls_cert, tls_key), idle, url, ready)
        finally:
            sock.close()
            await self._end_sessions()

    async def _serve_on(
        self,
        sock: socket.socket,
        uv: uvicorn.Server,
        idle: float,
        url: str,
        ready: Callable[[str], Any] | None,
    ) -> None:
        """Serve on ``sock`` until cancelled, closing sessions idle for ``idle`` seconds;
        ``ready`` is told ``url`` once the server listens."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._expire_idle, idle)
            tg.start_soon(uv.serve, [sock])
            while not uv.started:  # noqa: ASYNC110 (uvicorn says so by a flag only)
                await anyio.sleep(0.01)
            if ready is not None:
                ready(url)
            try:
                await anyio.sleep_forever()
            finally:
                uv.should_exit = True
                tg.cancel_scope.cancel()

    async def _end_sessions(self) -> None:
        """End every live session: the server stops (shielded, as it may stop by being
        cancelled)."""
        with anyio.CancelScope(shield=True):
            for state in list(self._live):
                await state.end()

    async def _expire_idle(self, idle: float) -> None:
        while True:
            await anyio.sleep(min(idle / 4, 5.0))
            now = time.monotonic()
            for state in self.sessions:
                if state.activity.idle_for(now) > idle:
                    await self._close_session(state)

    async def _close_session(self, state: _Session) -> None:
        await state.end()
        if state.session_id is None:
            return
        if self._sessions is None:
            return
        transport = self._sessions._server_instances.get(state.session_id)
        if transport is not None:
            await transport.terminate()


def _stderr_line(line: str) -> None:
    sys.stderr.write(f"sandbox: {line}\n")
    sys.stderr.flush()


def _invalid_params(method: str, exc: pydantic.ValidationError) -> str:
    """The first of a validator's complaints about ``method``'s params, in a line."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    if not errors:
        return f"Invalid params: {method}"
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "params"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"Invalid params: {method}: {where}: {first['msg']}{more}"


def _activity_of(connection: Connection) -> _Activity:
    activity = connection.state.get(_ACTIVITY)
    if not isinstance(activity, _Activity):
        activity = connection.state[_ACTIVITY] = _Activity()
    return activity


def _connection_of(ctx: ServerRequestContext[Any]) -> Connection:
    """The connection a request came on: what lasts as long as the client's session (the
    SDK builds a ServerSession per request, and keeps the connection private)."""
    connection: Connection = ctx.session._connection
    return connection


def _call_token(params: Mapping[str, Any] | None) -> str | None:
    meta = (params or {}).get("_meta") or {}
    mine = meta.get(CAPABILITY_KEY) if isinstance(meta, Mapping) else None
    token = mine.get("call") if isinstance(mine, Mapping) else None
    return token if isinstance(token, str) else None


def _invoker(ctx: ServerRequestContext[Any], token: str) -> Callable[[Call], Any]:
    async def invoke(call: Call) -> Result:
        try:
            got = await ctx.session.send_request(
                _InvokeRequest(  # type: ignore[arg-type]
                    params=_InvokeParams(call=token, tool=call.tool, arguments=call.arguments)
                ),
                _InvokeResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        except Exception as exc:
            return Result(
                text=f"{call.tool}: the session could not decide it: {exc}",
                is_error=True,
                kind=Kind.TRANSIENT,
            )
        kind = Kind(got.kind) if got.kind is not None and got.kind in set(Kind) else None
        return Result(text=got.text, data=got.data, is_error=got.is_error, kind=kind)

    return invoke


def _mcp_result(result: Result) -> types.CallToolResult:
    structured = None
    wrapped = False
    if result.data is not None:
        if isinstance(result.data, dict):
            structured = result.data
        else:
            structured, wrapped = {"value": result.data}, True
    meta: dict[str, Any] = {"wrapped": wrapped}
    if result.kind is not None:
        meta["kind"] = result.kind.value
    return types.CallToolResult(
        content=[types.TextContent(text=result.text)],
        structured_content=structured,
        is_error=result.is_error,
        _meta={CAPABILITY_KEY: meta},
    )


# -- the HTTP server's parts --


def _check_tls(tls_cert: str | None, tls_key: str | None) -> None:
    """HTTPS needs both a certificate and its key; HTTP, neither."""
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("TLS needs a certificate and its key, both")


def _check_auth(host: str, token: str | None, oauth: OAuth | None, require: bool | None) -> None:
    """One way of authenticating at most, and one where it is required (``require``; by
    default, whenever ``host`` is not loopback); OAuth serving every address of the host
    needs to be told the URL its clients reach."""
    if token is not None and oauth is not None:
        raise ValueError("one way of authenticating: a bearer token or OAuth, not both")
    if require is None:
        require = not _loopback(host)
    if require and token is None and oauth is None:
        raise ValueError(
            f"serving {host} (not loopback) needs a bearer token or OAuth: whoever "
            "reaches the port would run code"
        )
    if oauth is not None and oauth.resource is None and _unspecified(host):
        raise ValueError(
            f"serving {host}, OAuth needs the URL clients reach the server at (resource)"
        )


def _authentication(
    url: str, bearer: TokenVerifier | None, oauth: OAuth | None
) -> tuple[TokenVerifier | None, AuthSettings | None]:
    """The verifier of every request's token (None: no authentication), and for OAuth the
    settings of the resource server served at ``url``."""
    if oauth is None:
        return bearer, None
    settings = oauth.settings(url)
    return oauth.token_verifier(url), settings


def _security(
    host: str, port: int, scheme: str, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]
) -> TransportSecuritySettings:
    """The Host and Origin headers accepted (lower-case): the names of ``host`` at ``port``,
    and those allowed besides (DNS rebinding protection)."""
    names = _host_names(host)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*(f"{n}:{port}" for n in names), *(h.lower() for h in allowed_hosts)],
        allowed_origins=[
            *(f"{scheme}://{n}:{port}" for n in names),
            *(o.lower() for o in allowed_origins),
        ],
    )


def _uvicorn(app: Any, tls_cert: str | None, tls_key: str | None) -> uvicorn.Server:
    """The HTTP server of ``app`` (HTTPS with a certificate and its key), certificate and
    key read now rather than at the first request.

    Raises:
        OSError: the certificate or the key cannot be read.
    """
    import uvicorn  # here: serving over stdio need not load it

    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
    )
    config.load()
    return uvicorn.Server(config)


def _host_names(host: str) -> list[str]:
    if host.lower() in ("127.0.0.1", "localhost", "::1"):
        return ["127.0.0.1", "localhost", "[::1]"]
    return [_url_host(host.lower())]


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False
