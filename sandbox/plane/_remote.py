"""The executor at the other end of an MCP connection (``sandbox serve``), checked first."""

from __future__ import annotations

import contextlib
import math
import os
import ssl
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Literal, final

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import msgspec
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from protocol import Kind

from .._budget import Budget
from .._model import (
    Annotations,
    Call,
    CallContext,
    Descriptor,
    Facts,
    Invoke,
    Replay,
    Result,
    ToolInfo,
)
from ._capability import (
    CAPABILITY_KEY,
    FACTS_METHOD,
    INVOKE_METHOD,
    REPLAY_METHOD,
    Asked,
    Capability,
    FactsReading,
    FactsReply,
    InvokeParams,
    ListedTool,
    ReplayReply,
    check_server,
)
from ._executor import FACTS_TIMEOUT
from ._mcp import Dispatcher, initialize, raw_request
from .errors import (
    CallLost,
    Changed,
    ExecutorClosed,
    FactsUnavailable,
    NotAnExecutor,
    PlaneError,
    UnknownTool,
    Unreachable,
)

__all__ = ["KEEPALIVE", "Dialer", "Remote", "http", "stdio"]

#: How often a client over HTTP pings the executor, well within the server's idle limit
#: (five minutes), so a session idle while its user thinks stays open.
KEEPALIVE: Final = 60.0
#: How long dialing and checking a server may take.
CONNECT_TIMEOUT: Final = 30.0

#: Makes a new transport to the executor, for each connection a Remote makes: the first,
#: and each one after the last was lost.
Dialer = Callable[[], AbstractAsyncContextManager[Any]]


def stdio(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> Dialer:
    """A dialer that starts ``command`` (``sandbox serve``, say) and speaks MCP on its
    standard input and output; each dial starts it anew. ``env`` defaults to this
    process's environment."""
    if not command:
        raise ValueError("stdio needs a command")
    params = StdioServerParameters(
        command=command[0],
        args=list(command[1:]),
        env=dict(os.environ if env is None else env),
        cwd=cwd,
    )
    return lambda: stdio_client(params)


def http(
    url: str,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    verify: ssl.SSLContext | str | bool = True,
) -> Dialer:
    """A dialer of the executor served at ``url`` (``http://127.0.0.1:PORT/mcp``).

    Args:
        token: a bearer token, sent with every request (``sandbox serve --token-file``,
            or an OAuth access token).
        headers: more headers to send with every request.
        verify: for ``https``, how the server's certificate is checked: against the
            system's certificate authorities (True), those of a PEM file (its path), an
            :class:`ssl.SSLContext`, or not at all (False).

    Raises:
        ValueError: not an http(s) URL.
        OSError: the certificates of ``verify`` cannot be read.
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url!r}")
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if isinstance(verify, str):
        verify = ssl.create_default_context(cafile=verify)
    return _HttpDialer(url, sent, verify)


@final
class _HttpDialer:
    """Dials ``url``; a Remote over it pings every :data:`KEEPALIVE` unless told otherwise."""

    keepalive = KEEPALIVE

    def __init__(self, url: str, headers: dict[str, str], verify: ssl.SSLContext | bool) -> None:
        self.url = url
        self._headers = headers
        self._verify = verify

    def __call__(self) -> AbstractAsyncContextManager[Any]:
        if not self._headers and self._verify is True:
            return streamable_http_client(self.url)
        return self._dial()

    @contextlib.asynccontextmanager
    async def _dial(self) -> AsyncIterator[Any]:
        # The SDK's own client's timeouts: a server may hold a response stream open.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with (
            httpx2.AsyncClient(headers=self._headers, timeout=timeout, verify=self._verify) as c,
            streamable_http_client(self.url, http_client=c) as streams,
        ):
            yield streams


@final
class _Connection:
    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.dispatcher: Dispatcher | None = None
        self.capability: Capability | None = None
        self.tools: list[ToolInfo] = []
        self.server: tuple[str, str] = ("", "")
        self.error: BaseException | None = None
        self.lost = anyio.Event()

    @property
    def alive(self) -> bool:
        d = self.dispatcher
        return not self.lost.is_set() and d is not None and not d.ended.is_set()


def _connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is gone (rather than the request being refused)."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_connection_failure(e) for e in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.error.code == types.CONNECTION_CLOSED
    if isinstance(exc, TimeoutError):  # an OSError, but our own deadline's: the link is fine
        return False
    return isinstance(
        exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError
    ) or type(exc).__module__.startswith(("httpx", "httpcore"))


def _session_gone(exc: BaseException) -> bool:
    """Whether an HTTP server refused the request because the session has ended (it expired,
    or the server restarted): the request was not read, and a new session is needed."""
    return (
        isinstance(exc, MCPError)
        and exc.error.code == types.INVALID_REQUEST
        and "session not found" in exc.error.message.lower()
    )


def _refusal(exc: BaseException) -> NotAnExecutor | None:
    if isinstance(exc, NotAnExecutor):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            if (found := _refusal(e)) is not None:
                return found
    return None


def _failure(conn: _Connection, exc: BaseException) -> Literal["request", "unread", "lost"]:
    """Whose failure a request's error ``exc`` is: the request's own, the connection being
    fine ("request"); a session the server had ended, so it did not read the request
    ("unread"); or the connection's, gone with the request perhaps run ("lost")."""
    if _session_gone(exc):
        return "unread"
    if _connection_failure(exc) or not conn.alive:
        return "lost"
    return "request"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


@final
class Remote:
    """An executor served over MCP, reached through ``dialer``; make one with
    :meth:`connect` (one connection) or :meth:`dial` (reconnects), both async context
    managers.

    Before it is trusted, the server is checked: it must advertise the executor
    capability, of a version this client reads, naming every tool it lists and no more,
    each with the flags its listing carries (:class:`~sandbox.plane.errors.NotAnExecutor`'s
    subclasses say what failed).

    Made by :meth:`dial`, it reconnects: a lost connection is dialed again before the next
    request, so nothing that was never sent is lost. A call in flight when the connection
    went fails with :class:`~sandbox.plane.errors.CallLost` and is not sent again, since it may
    have run; a reading (facts, replay), which has no effect, is retried once on the new
    connection. The new connection must reach the same executor (descriptor, tools,
    definitions and claims); if not, this request and every one after fail with
    :class:`~sandbox.plane.errors.Changed`, without dialing again. A failed dial is
    :class:`~sandbox.plane.errors.Unreachable`, and the next request dials again.
    """

    def __init__(
        self,
        dialer: Dialer,
        tg: anyio.abc.TaskGroup,
        *,
        redial: bool,
        budget: Budget | None,
        keepalive: float | None,
        facts_timeout: float,
        name: str,
        version: str,
        warn: Callable[[str], Any] | None,
    ) -> None:
        self._dialer = dialer
        self._tg = tg
        self._redial = redial
        self._asked = Asked(budget=budget, invoke=True)
        self._keepalive = keepalive
        self._facts_timeout = facts_timeout
        self._info = types.Implementation(name=name, version=version)
        self._warn = warn
        self._conn: _Connection | None = None
        self._first: _Connection | None = None
        self._lock = anyio.Lock()
        self._changed: Changed | None = None
        self._closed = False
        self._invokes: dict[str, Invoke] = {}
        self.dials = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        dialer: Dialer,
        *,
        budget: Budget | None = None,
        keepalive: float | Literal["auto"] | None = "auto",
        facts_timeout: float = FACTS_TIMEOUT,
        name: str = "sandbox",
        version: str = "1",
        warn: Callable[[str], Any] | None = None,
        redial: bool = False,
    ) -> AsyncIterator[Remote]:
        """Connect once and check the server. Once this connection is lost, every request
        fails (:class:`~sandbox.plane.errors.Unreachable`); :meth:`dial` reconnects.

        Args:
            dialer: :func:`stdio` or :func:`http`, or any async context manager of an MCP
                transport's streams.
            budget: the run budget this session asks for; the executor caps each item at
                its ceilings (None asks for the ceilings).
            keepalive: seconds between pings; None for none; ``"auto"``: every
                :data:`KEEPALIVE` over HTTP (well within the server's idle limit), none over
                stdio (the server lives as long as the connection).
            facts_timeout: seconds a facts or replay request may take.
            name, version: this client, as the server is told.
            warn: told, in a line, when the connection is lost and made again, or when the
                executor that answered was refused.

        Raises:
            NotAnExecutor: the server failed a check (a subclass says which).
            Unreachable: the server could not be reached, or did not answer in time.
        """
        if keepalive == "auto":
            keepalive = getattr(dialer, "keepalive", None)
        for what, value in (("keepalive", keepalive), ("facts_timeout", facts_timeout)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
        try:
            async with anyio.create_task_group() as tg:
                remote = cls(
                    dialer,
                    tg,
                    redial=redial,
                    budget=budget,
                    keepalive=keepalive,
                    facts_timeout=facts_timeout,
                    name=name,
                    version=version,
                    warn=warn,
                )
                try:
                    remote._first = remote._conn = await remote._open()
                    yield remote
                finally:
                    remote._closed = True
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The connection's own tasks never raise: what is in the group is the body's
            # (or the first connection's) error, raised as itself.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    @classmethod
    def dial(cls, dialer: Dialer, **options: Any) -> AbstractAsyncContextManager[Remote]:
        """:meth:`connect`, and again whenever the connection is lost (see the class)."""
        return cls.connect(dialer, redial=True, **options)

    # -- what the first connection said --

    async def tools(self) -> Sequence[ToolInfo]:
        return tuple(self._identity().tools)

    @property
    def descriptor(self) -> Descriptor:
        cap = self._identity().capability
        assert cap is not None
        return cap.descriptor

    @property
    def capability(self) -> Capability:
        """The executor's capability as the first connection checked it."""
        cap = self._identity().capability
        assert cap is not None
        return cap

    @property
    def server(self) -> tuple[str, str]:
        """The name and version the executor gave at initialize (the latest connection's)."""
        return (self._conn or self._identity()).server

    @property
    def connected(self) -> bool:
        """Whether the current connection is up, as far as this client knows (it learns of
        a loss when the transport ends, a ping fails, or a request does)."""
        return self._conn is not None and self._conn.alive and not self._closed

    def _identity(self) -> _Connection:
        if self._first is None:
            raise ExecutorClosed("not connected")
        return self._first

    async def aclose(self) -> None:
        """Close the connection and stop dialing; the context manager's exit does this."""
        self._closed = True
        if self._conn is not None:
            self._conn.lost.set()

    # -- connections --

    async def _open(self) -> _Connection:
        conn = _Connection()
        self.dials += 1
        with anyio.CancelScope() as scope:
            scope.deadline = anyio.current_time() + CONNECT_TIMEOUT
            await self._tg.start(self._hold, conn)
        if scope.cancelled_caught:
            conn.lost.set()
            raise Unreachable(f"the executor did not answer within {CONNECT_TIMEOUT} s")
        if conn.error is not None:
            refusal = _refusal(conn.error)
            if refusal is not None:
                self._say(f"the executor that answered was refused: {refusal}")
                raise refusal
            raise Unreachable(f"cannot reach the executor: {_describe(conn.error)}")
        return conn

    async def _hold(self, conn: _Connection, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Make one connection, check it, and hold it until it is lost or closed."""
        started = False
        try:
            async with self._dialer() as streams:
                read, write = streams[0], streams[1]
                dispatcher = Dispatcher(read, write, {INVOKE_METHOD: self._on_invoke})
                async with ClientSession(dispatcher=dispatcher) as session:
                    await self._check(conn, session)
                    conn.session, conn.dispatcher = session, dispatcher
                    started = True
                    task_status.started()
                    await self._keep(conn, dispatcher)
        except Exception as exc:
            if not started:
                conn.error = exc
        finally:
            conn.lost.set()
            if not started:
                task_status.started()

    async def _check(self, conn: _Connection, session: ClientSession) -> None:
        """Initialize the session, asking for what this client asks for, and check that
        the server is an executor (its capability against its listing)."""
        asked = {CAPABILITY_KEY: msgspec.to_builtins(self._asked)}
        init = await initialize(session, asked, self._info)
        listing = await _listing(session)
        raw = (init.capabilities.experimental or {}).get(CAPABILITY_KEY)
        conn.capability, conn.tools = check_server(raw, listing)
        conn.server = (init.server_info.name, init.server_info.version or "")

    async def _keep(self, conn: _Connection, dispatcher: Dispatcher) -> None:
        """Hold the checked connection until it is lost (its transport ends, a ping fails,
        a request finds it gone) or closed, pinging it meanwhile if asked to."""
        async with anyio.create_task_group() as tg:
            if self._keepalive:
                tg.start_soon(self._ping, conn, self._keepalive)
            tg.start_soon(_wait_then_set, dispatcher.ended, conn.lost)
            await conn.lost.wait()
            tg.cancel_scope.cancel()

    async def _ping(self, conn: _Connection, every: float) -> None:
        assert conn.session is not None
        while True:
            await anyio.sleep(every)
            try:
                with anyio.fail_after(max(every, 10.0)):
                    await raw_request(conn.session, "ping")
            except Exception:
                conn.lost.set()
                return

    async def _current(self) -> _Connection:
        """The live connection, dialed again first if it was lost (and may be)."""
        if self._closed:
            raise ExecutorClosed("the executor connection is closed")
        conn = self._usable()
        if conn is not None:
            return conn
        if not self._redial:
            raise Unreachable("the connection to the executor was lost")
        async with self._lock:
            # Another request may have dialed again while this one waited.
            conn = self._usable()
            if conn is None:
                conn = self._conn = await self._dial_again()
            return conn

    def _usable(self) -> _Connection | None:
        """The current connection if it is alive, None if not.

        Raises:
            Changed: a connection made again reached another executor, for good.
        """
        if self._changed is not None:
            raise self._changed
        conn = self._conn
        return conn if conn is not None and conn.alive else None

    async def _dial_again(self) -> _Connection:
        """A new connection, which must reach the executor the first one did.

        Raises:
            Changed: it did not (or the executor that answered was refused); so do all
                later requests.
            Unreachable: the dial failed.
        """
        try:
            fresh = await self._open()
        except NotAnExecutor as exc:
            self._changed = Changed(f"the executor that answered was refused: {exc}")
            raise self._changed from exc
        difference = _difference(self._identity(), fresh)
        if difference:
            fresh.lost.set()
            self._changed = Changed(f"the executor changed: {difference}")
            self._say(str(self._changed))
            raise self._changed
        self._say("the connection to the executor was lost and made again")
        return fresh

    def _say(self, line: str) -> None:
        if self._warn:
            self._warn(line)

    async def _request(self, send: Callable[[ClientSession], Any], *, reading: bool) -> Any:
        conn = await self._current()
        assert conn.session is not None
        try:
            return await send(conn.session)
        except Exception as exc:
            failure = _failure(conn, exc)
            if failure == "request":
                raise
            conn.lost.set()
            if failure == "lost" and not reading:
                raise CallLost(
                    f"the connection was lost during the call: {_describe(exc)}"
                ) from exc
        # A reading is read again once on a new connection; so is a call the server
        # refused unread because its session had ended (it never ran).
        return await self._again(send)

    async def _again(self, send: Callable[[ClientSession], Any]) -> Any:
        """A request's second and last try, on a new connection."""
        conn = await self._current()
        assert conn.session is not None
        try:
            return await send(conn.session)
        except Exception as exc:
            if _connection_failure(exc) or _session_gone(exc):
                conn.lost.set()
                raise Unreachable(f"the connection was lost again: {_describe(exc)}") from exc
            raise

    # -- the executor's methods --

    def _known(self, call: Call) -> None:
        if not any(t.name == call.tool for t in self._identity().tools):
            raise UnknownTool(f"no tool named {call.tool!r}")

    async def batch_facts(self, calls: Sequence[Call]) -> list[Facts | Exception]:
        """Each call's claim, read in the executor in one request within the facts timeout.

        Raises:
            FactsUnavailable: the request failed or timed out: every call is blocked.
            Unreachable, Changed, ExecutorClosed: the connection's state, as for any request.
        """
        if not calls:
            return []
        reply = await self._read_facts(calls)
        if len(reply.readings) != len(calls):
            raise FactsUnavailable(
                f"asked for {len(calls)} readings, the executor gave {len(reply.readings)}"
            )
        return [_reading(c, r) for c, r in zip(calls, reply.readings, strict=True)]

    async def _read_facts(self, calls: Sequence[Call]) -> FactsReply:
        """The executor's reply to one facts request for ``calls``.

        Raises:
            FactsUnavailable: the request failed, timed out, or its reply does not decode.
        """
        body = {"calls": [{"tool": c.tool, "arguments": c.arguments} for c in calls]}

        async def send(session: ClientSession) -> dict[str, Any]:
            with anyio.fail_after(self._facts_timeout):
                return await raw_request(session, FACTS_METHOD, body)

        try:
            return msgspec.convert(await self._request(send, reading=True), FactsReply)
        except TimeoutError:
            raise FactsUnavailable(
                f"the facts request took longer than {self._facts_timeout} s"
            ) from None
        except (MCPError, msgspec.ValidationError) as exc:
            raise FactsUnavailable(f"the facts request failed: {exc}") from exc

    async def facts(self, call: Call) -> Facts:
        self._known(call)
        (got,) = await self.batch_facts([call])
        if isinstance(got, Exception):
            raise got
        return got

    async def replay(self, call: Call) -> Replay:
        self._known(call)
        body = {"tool": call.tool, "arguments": call.arguments}

        async def send(session: ClientSession) -> dict[str, Any]:
            with anyio.fail_after(self._facts_timeout):
                return await raw_request(session, REPLAY_METHOD, body)

        try:
            return msgspec.convert(await self._request(send, reading=True), ReplayReply).replay
        except (PlaneError, MCPError, TimeoutError, msgspec.ValidationError):
            return Replay.UNKNOWN

    async def call(self, call: Call, context: CallContext | None = None) -> Result:
        """Run the call in the executor. It is sent once: see the class for a lost
        connection. The program calls it makes of other tools come back here, to
        ``context.invoke`` (the session's policy), while it runs."""
        self._known(call)
        token = uuid.uuid4().hex
        meta: Any = None
        if context is not None and context.invoke is not None:
            # The program calls this call makes come back here, named by the token; without
            # one, no session decides them and the executor makes them itself.
            self._invokes[token] = context.invoke
            meta = {CAPABILITY_KEY: {"call": token}}

        async def send(session: ClientSession) -> types.CallToolResult:
            return await session.call_tool(call.tool, call.arguments, meta=meta)

        try:
            got = await self._request(send, reading=False)
        except MCPError as exc:
            return Result(
                text=f"{call.tool}: {exc.error.message}", is_error=True, kind=Kind.UNKNOWN
            )
        finally:
            self._invokes.pop(token, None)
        return _result(got)

    async def _on_invoke(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """A program in the executor called another tool: decide and run it here."""
        try:
            p = msgspec.convert(dict(params or {}), InvokeParams)
            token = str((params or {}).get("call", ""))
        except msgspec.ValidationError as exc:
            r = Result(text=f"a malformed host call: {exc}", is_error=True, kind=Kind.INVALID)
        else:
            invoke = self._invokes.get(token)
            if invoke is None:
                r = Result(
                    text=f"{p.tool}: no call of this session is in flight to make it",
                    is_error=True,
                    kind=Kind.DENIED,
                )
            else:
                r = await invoke(Call(tool=p.tool, arguments=p.arguments))
        return {
            "text": r.text,
            "data": r.data,
            "isError": r.is_error,
            "kind": r.kind.value if r.kind is not None else None,
        }


async def _wait_then_set(ended: anyio.Event, lost: anyio.Event) -> None:
    await ended.wait()
    lost.set()


async def _listing(session: ClientSession) -> list[ListedTool]:
    """Every tool the server lists, page after page."""
    listing: list[ListedTool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        listing.extend(_listed(t) for t in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return listing


def _reading(call: Call, r: FactsReading) -> Facts | Exception:
    """A call's claim as the executor read it, or the error that blocks the call."""
    if r.unknown_tool:
        return UnknownTool(r.error or f"no tool named {call.tool!r}")
    if r.error is not None or r.facts is None:
        return FactsUnavailable(f"{call.tool}: {r.error or 'no reading'}")
    return r.facts


def _listed(t: types.Tool) -> ListedTool:
    a = t.annotations
    annotations = Annotations()
    if a is not None:
        annotations = Annotations(
            title=a.title,
            read_only=bool(a.read_only_hint),
            destructive=a.destructive_hint if a.destructive_hint is not None else True,
            idempotent=bool(a.idempotent_hint),
            open_world=a.open_world_hint if a.open_world_hint is not None else True,
        )
    return ListedTool(
        name=t.name,
        description=t.description or "",
        input_schema=dict(t.input_schema),
        annotations=annotations,
        meta=dict(t.meta or {}),
    )


def _result(got: types.CallToolResult) -> Result:
    text = "\n".join(c.text for c in got.content if isinstance(c, types.TextContent))
    mine = (got.meta or {}).get(CAPABILITY_KEY) or {}
    data = got.structured_content
    if data is not None and mine.get("wrapped"):
        data = data.get("value")
    raw_kind = mine.get("kind")
    kind = Kind(raw_kind) if isinstance(raw_kind, str) and raw_kind in set(Kind) else None
    return Result(text=text, data=data, is_error=bool(got.is_error), kind=kind)


def _difference(first: _Connection, fresh: _Connection) -> str:
    a, b = first.capability, fresh.capability
    assert a is not None
    assert b is not None
    if a.descriptor != b.descriptor:
        return f"its workspace was {a.descriptor}, is {b.descriptor}"
    if a.tools != b.tools:
        return "its tools' names or flags differ"
    if first.tools != fresh.tools:
        names = [x.name for x, y in zip(first.tools, fresh.tools, strict=True) if x != y]
        return f"the definitions of {', '.join(names)} differ"
    return ""
