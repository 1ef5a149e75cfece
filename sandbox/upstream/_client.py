"""Connections to upstream MCP servers, and their tools as the sandbox's tools."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
import shlex
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, TextIO, final

import anyio
import anyio.abc
import mcp_types as types
import msgspec
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from protocol import CallError, Kind

from .._engine import Tool as HostTool
from .._errors import SandboxError
from .._model import Annotations, Call, CallContext, Facts, Result, ToolInfo
from ..plane import Decision, Policy
from ._schema import Checker, call_shape, stub

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

#: How long starting an upstream and listing its tools may take.
CONNECT_TIMEOUT: Final = 30.0
#: Between the server's name and the tool's in a host binding: ``host.fs__read_file``.
SEPARATOR: Final = "__"
#: How much of an upstream's standard error a failure to start quotes.
_STDERR_TAIL: Final = 2000

Dial = Callable[[TextIO], AbstractAsyncContextManager[Any]]


class UpstreamError(SandboxError):
    """An upstream server could not be started, reached or listed; the message names it."""


@final
class Upstream(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach one upstream MCP server: :func:`stdio` or :func:`http` make one.

    Attributes:
        name: what its tools are prefixed with (``host.<name>__<tool>``); empty: the name
            the server gives itself at initialize, made an identifier.
        command: for stdio, the program and its arguments.
        url: for streamable HTTP, the server's URL.
        env: for stdio, variables added to this process's environment.
        cwd: for stdio, the server's working directory.
        headers: for HTTP, headers sent with every request.
    """

    name: str = ""
    command: tuple[str, ...] = ()
    url: str = ""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an upstream has a command (stdio) or a URL (HTTP), one of them")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {self.url!r}")
        if self.name and _server_name(self.name) != self.name:
            raise ValueError(
                f"upstream name {self.name!r} must be an identifier without a leading or "
                f"trailing '_' and without '{SEPARATOR}' (try {_server_name(self.name)!r})"
            )

    @property
    def where(self) -> str:
        """The command line or the URL, for messages."""
        return self.url or shlex.join(self.command)

    def dial(self, errlog: TextIO) -> AbstractAsyncContextManager[Any]:
        if self.url:
            return _http_streams(self.url, self.headers)
        params = StdioServerParameters(
            command=self.command[0],
            args=list(self.command[1:]),
            env={**os.environ, **self.env},
            cwd=self.cwd,
        )
        return stdio_client(params, errlog=errlog)


@contextlib.asynccontextmanager
async def _http_streams(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    if not headers:
        async with streamable_http_client(url) as streams:
            yield streams
        return
    import httpx2

    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


def stdio(
    command: Sequence[str] | str,
    *,
    name: str = "",
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Upstream:
    """An upstream started as ``command`` (a list, or a shell-quoted string), speaking MCP
    on its standard input and output. It inherits this process's environment plus ``env``.

    Raises:
        ValueError: no command, or a bad name.
    """
    argv = tuple(shlex.split(command) if isinstance(command, str) else command)
    if not argv:
        raise ValueError("an stdio upstream needs a command")
    return Upstream(name=name, command=argv, env=dict(env or {}), cwd=cwd)


def http(url: str, *, name: str = "", headers: Mapping[str, str] | None = None) -> Upstream:
    """An upstream served over streamable HTTP at ``url``.

    Raises:
        ValueError: not an http(s) URL, or a bad name.
    """
    return Upstream(name=name, url=url, headers=dict(headers or {}))


_NAMED: Final = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=(.*)$", re.DOTALL)


def parse_mcp(text: str, *, over_http: bool = False) -> Upstream:
    """An upstream from the command line's ``--mcp 'COMMAND ARGS'`` or ``--mcp-http URL``,
    either optionally prefixed by ``NAME=`` (``--mcp 'fs=npx -y server-filesystem /tmp'``).

    Raises:
        ValueError: nothing to start, quoting that does not close, or a bad name.
    """
    name = ""
    match = _NAMED.match(text.strip())
    if match:
        name, text = match.group(1), match.group(2)
    if over_http:
        return http(text.strip(), name=name)
    return stdio(text, name=name)


def _server_name(raw: str) -> str:
    """An identifier for a server: runs of other characters become one ``_``, no ``__``,
    no leading or trailing ``_``, lower case, not starting with a digit."""
    words = re.findall(r"[A-Za-z0-9]+", raw.lower())
    name = "_".join(words) or "upstream"
    return f"s{name}" if name[0].isdigit() else name


def _tool_name(raw: str) -> str:
    """An identifier for a tool: other characters become ``_``."""
    name = re.sub(r"\W", "_", raw, flags=re.ASCII) or "_"
    return f"_{name}" if name[0].isdigit() else name


def read_only(call: Call, tool: ToolInfo, facts: Facts) -> Decision:
    """A policy: only tools that say they change nothing (``readOnlyHint``) may be called."""
    if tool.annotations.read_only:
        return Decision(True)
    return Decision(False, f"{call.tool} may change things (it is not read-only), refused here")


def _annotations(a: types.ToolAnnotations | None) -> Annotations:
    if a is None:
        return Annotations()
    return Annotations(
        title=a.title,
        read_only=bool(a.read_only_hint),
        destructive=a.destructive_hint if a.destructive_hint is not None else True,
        idempotent=bool(a.idempotent_hint),
        open_world=a.open_world_hint if a.open_world_hint is not None else True,
    )


@final
class UpstreamTool:
    """One upstream tool: an execution-plane tool (for ``sandbox serve`` and the agent),
    and through :meth:`host_tool` a run's host tool.

    Attributes:
        server: the server's name, as its tools are prefixed.
        tool: the tool's name on the server.
        name: its binding, ``<server>__<tool>`` (the tool's name made an identifier).
        output_schema: its output schema, if it has one.
    """

    __slots__ = ("_checker", "_info", "_owner", "name", "output_schema", "server", "tool")

    def __init__(self, owner: _Server, t: types.Tool) -> None:
        self._owner = owner
        self.server = owner.name
        self.tool = t.name
        self.name = f"{owner.name}{SEPARATOR}{_tool_name(t.name)}"
        schema = dict(t.input_schema or {"type": "object"})
        self.output_schema = dict(t.output_schema) if t.output_schema is not None else None
        self._checker = Checker(self.name, schema)
        self._info = ToolInfo(
            name=self.name,
            description=t.description or "",
            input_schema=schema,
            annotations=_annotations(t.annotations),
        )

    @property
    def info(self) -> ToolInfo:
        return self._info

    def __repr__(self) -> str:
        return f"UpstreamTool({self.name}: {self.tool!r} of {self.server!r})"

    @property
    def signature(self) -> str:
        """The call shape the runner binds."""
        return call_shape(self.name, self._info.input_schema)

    def check(self, arguments: dict[str, Any]) -> None:
        """Raises:
        CallError: ``invalid``: the arguments do not match the input schema.
        """
        self._checker.check(arguments)

    def stub(self) -> str:
        """The tool as a typed Python stub, for a model's prompt."""
        a = self._info.annotations
        hints = [
            text
            for flag, text in (
                (a.read_only, "read-only"),
                (not a.read_only and a.destructive, "may be destructive"),
                (a.idempotent, "idempotent"),
            )
            if flag
        ]
        notes = [
            f"Upstream: tool {self.tool!r} of {self.server!r}"
            + (f" ({', '.join(hints)})." if hints else ".")
        ]
        return stub(
            self.name, self._info.description, self._info.input_schema, self.output_schema, notes
        )

    async def call(self, arguments: dict[str, Any], context: CallContext) -> Result:
        """The plane's form of a call: the value, or a failure with a kind, as a Result."""
        try:
            value, text = await self._owner.owner.call(self, arguments)
        except CallError as exc:
            return Result(text=exc.message, is_error=True, kind=exc.kind)
        return Result(text=text, data=value)

    def host_tool(self) -> HostTool:
        """The tool as a run's host tool, ``host.<server>__<tool>(...)``: checked, decided by
        the policy, sent, its value returned (see :mod:`sandbox.upstream`)."""

        async def handler(arguments: dict[str, Any]) -> Any:
            value, _ = await self._owner.owner.call(self, arguments)
            return value

        return HostTool.relayed(
            self.name, handler, signature=self.signature, description=self._info.description
        )


def _value(result: types.CallToolResult) -> tuple[Any, str]:
    """A result's value for the program (its structured content, else its text, else its
    content blocks as JSON objects) and its text (for a model)."""
    blocks = list(result.content)
    texts = [b.text for b in blocks if isinstance(b, types.TextContent)]
    text = "\n".join(texts)
    if result.structured_content is not None:
        return result.structured_content, text
    if len(texts) == len(blocks):
        return text, text
    return [b.model_dump(by_alias=True, mode="json", exclude_none=True) for b in blocks], text


class _Dispatcher(JSONRPCDispatcher[Any]):
    """The SDK's dispatcher, saying when its connection has ended (the server hung up)."""

    def __init__(self, read: Any, write: Any) -> None:
        super().__init__(read, write)
        self.ended = anyio.Event()

    async def run(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().run(*args, **kwargs)
        finally:
            self.ended.set()


@final
class _Connection:
    """One connection to one server: up from its start until it is lost or closed."""

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.lost = anyio.Event()
        self.changed = anyio.Event()
        self.error: BaseException | None = None
        self.server_info: tuple[str, str] = ("", "")

    @property
    def alive(self) -> bool:
        return self.session is not None and not self.lost.is_set()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.changed.set()


@final
class _Server:
    """One upstream: its spec, its current connection (made again once it is lost), and
    its tools as last listed."""

    def __init__(self, owner: Upstreams, spec: Upstream, errlog: TextIO) -> None:
        self.owner = owner
        self.spec = spec
        self.name = spec.name
        self.conn: _Connection | None = None
        self.tools: dict[str, UpstreamTool] = {}
        self.by_tool: dict[str, UpstreamTool] = {}
        self.errlog = errlog
        self.lock = anyio.Lock()
        self.connections = 0
        self.stale = False

    @property
    def label(self) -> str:
        return f"upstream {self.name or self.spec.where!r}" + (
            f" ({self.spec.where})" if self.name else ""
        )

    async def connect(self) -> _Connection:
        """A live connection: the current one, else a new one.

        Raises:
            UpstreamError: it could not be started or did not answer.
        """
        conn = self.conn
        if conn is not None and conn.alive:
            return conn
        async with self.lock:
            conn = self.conn
            if conn is not None and conn.alive:
                return conn
            self.conn = conn = await self._open()
            return conn

    async def _open(self) -> _Connection:
        conn = _Connection()
        self.connections += 1
        timeout = self.owner.connect_timeout
        with anyio.move_on_after(timeout) as scope:
            await self.owner.tg.start(self._hold, conn)
        if scope.cancelled_caught or isinstance(conn.error, TimeoutError):
            conn.lost.set()
            raise UpstreamError(f"{self.label} did not answer within {timeout:g} s{self._stderr()}")
        if conn.error is not None:
            verb = "reached" if self.spec.url else "started"
            raise UpstreamError(
                f"{self.label} could not be {verb}: {_describe(conn.error)}{self._stderr()}"
            )
        return conn

    def _stderr(self) -> str:
        """The tail of what the server wrote on its standard error, for a failure's message."""
        try:
            self.errlog.flush()
            self.errlog.seek(0, os.SEEK_END)
            size = self.errlog.tell()
            self.errlog.seek(max(0, size - _STDERR_TAIL))
            tail = self.errlog.read().strip()
        except (OSError, ValueError):
            return ""
        return f"; its standard error ends:\n{tail}" if tail else ""

    async def _hold(self, conn: _Connection, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Make one connection, initialize it, list its tools, and hold it until it is lost
        or the upstreams close, listing the tools again whenever the server says they
        changed."""
        started = False
        try:
            async with self.spec.dial(self.errlog) as streams:
                dispatcher = _Dispatcher(streams[0], streams[1])
                async with ClientSession(
                    dispatcher=dispatcher,
                    message_handler=conn.on_message,
                    client_info=types.Implementation(name="sandbox", version="1"),
                ) as session:
                    with anyio.fail_after(self.owner.connect_timeout):
                        init = await session.initialize()
                        info = init.server_info
                        conn.server_info = (info.name, info.version or "")
                        if not self.name:
                            self.name = self.owner.unique_name(_server_name(info.name))
                        await self._list(session)
                    conn.session = session
                    started = True
                    task_status.started()
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_wait_then_set, dispatcher.ended, conn.lost)
                        tg.start_soon(self._follow, conn, session)
                        await conn.lost.wait()
                        tg.cancel_scope.cancel()
        except Exception as exc:
            if not started:
                conn.error = exc
        finally:
            conn.lost.set()
            if not started:
                task_status.started()

    async def _follow(self, conn: _Connection, session: ClientSession) -> None:
        """List the tools again each time the server says they changed."""
        while True:
            await conn.changed.wait()
            conn.changed = anyio.Event()
            self.stale = True
            try:
                with anyio.fail_after(self.owner.connect_timeout):
                    await self._list(session)
            except Exception as exc:
                self.owner.say(f"{self.label}: listing its changed tools failed: {_describe(exc)}")
            else:
                self.owner.say(f"{self.label}: its tools changed: {', '.join(self.tools)}")

    async def _list(self, session: ClientSession) -> None:
        listed: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        tools: dict[str, UpstreamTool] = {}
        for t in listed:
            u = UpstreamTool(self, t)
            if u.name in tools:
                raise UpstreamError(
                    f"{self.label}: tools {tools[u.name].tool!r} and {t.name!r} are both "
                    f"bound as {u.name}"
                )
            tools[u.name] = u
        self.tools = tools
        self.by_tool = {u.tool: u for u in tools.values()}
        self.stale = False

    def _progress_of(self, tool: UpstreamTool) -> ProgressFnT | None:
        """The progress callback of a call of ``tool`` (None: progress is not asked for)."""
        tell = self.owner.on_progress
        return None if tell is None else _progress_to(tell, tool.name)

    async def send(self, tool: UpstreamTool, arguments: dict[str, Any]) -> types.CallToolResult:
        """Send one call on a live connection, once.

        Raises:
            CallError: ``transient`` when the server cannot be reached or the connection is
                lost during the call (it is not sent again: it may have run), ``invalid`` for
                a tool the server no longer lists or arguments it refuses, ``raised`` for
                any other error response.
        """
        try:
            conn = await self.connect()
        except UpstreamError as exc:
            raise CallError(Kind.TRANSIENT, f"{tool.name}: unavailable: {exc}") from None
        if conn.changed.is_set() or self.stale:
            with anyio.fail_after(self.owner.connect_timeout):
                assert conn.session is not None
                await self._list(conn.session)
        if tool.tool not in self.by_tool:
            raise CallError(Kind.INVALID, f"{tool.name}: {self.label} no longer offers it")
        assert conn.session is not None
        try:
            got = await conn.session.call_tool(
                tool.tool, arguments, progress_callback=self._progress_of(tool)
            )
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED or not conn.alive:
                conn.lost.set()
                raise CallError(
                    Kind.TRANSIENT,
                    f"{tool.name}: unavailable: the connection to {self.label} was lost during "
                    f"the call (not sent again; it may have run)",
                ) from None
            kind = Kind.INVALID if exc.error.code in (types.INVALID_PARAMS, -32601) else Kind.RAISED
            raise CallError(
                kind, f"{tool.name}: {self.label} refused it: {exc.error.message}"
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            conn.lost.set()
            raise CallError(
                Kind.TRANSIENT,
                f"{tool.name}: unavailable: the connection to {self.label} was lost during the "
                f"call ({type(exc).__name__}; not sent again)",
            ) from None
        except (RuntimeError, ValueError) as exc:  # a result the SDK refuses (output schema)
            raise CallError(
                Kind.RAISED, f"{tool.name}: a bad result from {self.label}: {exc}"
            ) from None
        except Exception as exc:
            if not (isinstance(exc, OSError) or type(exc).__module__.startswith("httpx")):
                raise
            conn.lost.set()
            raise CallError(
                Kind.TRANSIENT,
                f"{tool.name}: unavailable: the connection to {self.label} failed during the "
                f"call ({type(exc).__name__}: {exc}; not sent again)",
            ) from None
        if not isinstance(got, types.CallToolResult):
            raise CallError(Kind.RAISED, f"{tool.name}: {self.label} gave no tool result")
        return got


def _progress_to(
    tell: Callable[[str, float, float | None, str | None], Any], name: str
) -> ProgressFnT:
    """The SDK's progress callback for one call of the tool ``name``: passes it on."""

    async def passed_on(progress: float, total: float | None, message: str | None) -> None:
        told = tell(name, progress, total, message)
        if inspect.isawaitable(told):
            await told

    return passed_on


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.error.message
    return f"{type(exc).__name__}: {exc}"


async def _wait_then_set(ended: anyio.Event, lost: anyio.Event) -> None:
    await ended.wait()
    lost.set()


@final
class Upstreams:
    """Upstream MCP servers, connected, with their tools as the sandbox's tools; an async
    context manager that connects to every server on entry (all at once) and closes them on
    exit.

    Every call (see :meth:`call`) is checked against the tool's input schema, decided by
    ``policy``, and sent once; a server whose connection was lost is started (or dialed)
    again on its next call, and a call in flight when it was lost fails (``transient``)
    rather than being sent again. When a server says its tools changed, they are listed
    again.

    Args:
        upstreams: the servers (:func:`stdio`, :func:`http`).
        policy: decides each call from the call, the tool's definition (its annotations:
            read-only, destructive...) and the zero facts; :func:`read_only` is one; None
            allows every call.
        connect_timeout: seconds starting a server and listing its tools may take.
        warn: told, in a line, when a server's tools change.
        on_progress: told of each progress notification a server sends for a call in
            flight, as ``on_progress(tool, progress, total, message)`` (``tool``: the name
            a program calls it by; ``total`` and ``message`` None when the server gives
            none); may be an ``async def``. Every call asks for progress when this is set.

    Raises (on entry):
        UpstreamError: a server could not start, did not answer in time, or two servers
            have one name (the message names it).
    """

    def __init__(
        self,
        upstreams: Iterable[Upstream],
        *,
        policy: Policy | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        warn: Callable[[str], Any] | None = None,
        on_progress: Callable[[str, float, float | None, str | None], Any] | None = None,
    ) -> None:
        if not (connect_timeout > 0 and math.isfinite(connect_timeout)):
            raise ValueError(f"connect_timeout must be a positive number, got {connect_timeout!r}")
        self.specs = tuple(upstreams)
        self.policy = policy
        self.connect_timeout = connect_timeout
        self._warn = warn
        self.on_progress = on_progress
        self._servers: list[_Server] = []
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        named = [s.name for s in self.specs if s.name]
        for n in named:
            if named.count(n) > 1:
                raise UpstreamError(f"two upstreams are named {n!r}")

    @property
    def tg(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise UpstreamError("the upstreams are not open (use them in 'async with')")
        return self._tg

    def say(self, line: str) -> None:
        if self._warn is not None:
            self._warn(line)

    def unique_name(self, base: str) -> str:
        taken = {s.name for s in self._servers if s.name} | {s.name for s in self.specs if s.name}
        name, n = base, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        return name

    async def __aenter__(self) -> Upstreams:
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            for spec in self.specs:
                log = stack.enter_context(
                    tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
                )
                self._servers.append(_Server(self, spec, log))
            failures: list[UpstreamError] = []

            async def first(server: _Server) -> None:
                try:
                    await server.connect()
                except UpstreamError as exc:
                    failures.append(exc)

            # Servers whose names come from their initialize are named in order of answer;
            # connect those without a name one at a time, so that names are reproducible.
            async with anyio.create_task_group() as tg:
                for server in self._servers:
                    if server.name:
                        tg.start_soon(first, server)
            for server in self._servers:
                if not server.name:
                    await first(server)
            if failures:
                raise (
                    failures[0]
                    if len(failures) == 1
                    else UpstreamError("; ".join(str(f) for f in failures))
                )
        except BaseException:
            # The task group was entered in this task: it is left in it, never under a
            # scope of its own (anyio requires scopes to nest).
            await stack.aclose()
            self._tg = None
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        self._tg = None
        if stack is not None:
            await stack.aclose()

    # -- what they offer --

    @property
    def servers(self) -> dict[str, tuple[str, str]]:
        """Each server's name, with the name and version it gave at initialize."""
        return {
            s.name: (s.conn.server_info if s.conn is not None else ("", "")) for s in self._servers
        }

    def connections(self, server: str) -> int:
        """How many times ``server`` was connected (1, plus once per reconnection)."""
        return self._server(server).connections

    def _server(self, name: str) -> _Server:
        for s in self._servers:
            if s.name == name:
                return s
        raise KeyError(f"no upstream named {name!r} (upstreams: {', '.join(self.servers)})")

    def tools(self) -> list[UpstreamTool]:
        """Every server's tools, as last listed, in order (server by server)."""
        return [t for s in self._servers for t in s.tools.values()]

    def tool(self, name: str) -> UpstreamTool:
        """The tool bound as ``name``.

        Raises:
            KeyError: no such tool.
        """
        for s in self._servers:
            if name in s.tools:
                return s.tools[name]
        raise KeyError(f"no upstream tool named {name!r}")

    def host_tools(self) -> list[HostTool]:
        """Every tool as a run's host tool (``sandbox.run(..., tools=...)``)."""
        return [t.host_tool() for t in self.tools()]

    def describe(self, *, where: bool = True) -> str:
        """Every tool as a typed Python stub, server by server: what an agent puts in its
        prompt so that a model writes programs that call them.

        ``where``: name how each server is reached (its command line or URL) in its
        heading; False for text that leaves this host (``sandbox serve``'s clients).
        """
        parts = [
            "# Host tools from upstream MCP servers. In a program, call each as\n"
            "# `await host.<name>(...)` (several at once with asyncio.gather). A failed call\n"
            "# raises CallError with a kind (invalid, denied, limit, transient, raised).\n"
            "# Without an output schema, a tool returns its text (str), or its content\n"
            "# blocks (a list of dicts) when it returns more than text.\n"
            "from typing import Any, Literal, NotRequired, TypedDict"
        ]
        for s in self._servers:
            info = s.conn.server_info if s.conn is not None else ("", "")
            reached = f" ({s.spec.where})" if where else ""
            parts.append(f"# ── {s.name}: {info[0]} {info[1]}{reached}".rstrip())
            parts.extend(t.stub() for t in s.tools.values())
        return "\n\n\n".join(parts) + "\n"

    # -- calls --

    async def call(self, tool: UpstreamTool | str, arguments: dict[str, Any]) -> tuple[Any, str]:
        """Make one call: check the arguments, ask the policy, send it once.

        Returns:
            the value (the structured content; else the text; else the content blocks as
            JSON objects) and the result's text.

        Raises:
            CallError: ``invalid`` (arguments that do not match the input schema, a tool
                the server does not offer), ``denied`` (the policy), ``transient`` (the
                server unavailable, or lost during the call), ``raised`` (the tool's
                error result, with the server's text).
        """
        t = tool if isinstance(tool, UpstreamTool) else self._lookup(tool)
        t.check(arguments)
        if self.policy is not None:
            verdict = self.policy(Call(tool=t.name, arguments=arguments), t.info, Facts())
            if not isinstance(verdict, Decision):
                verdict = await _awaited(verdict)
            if not verdict.allow:
                raise CallError(
                    Kind.DENIED,
                    f"{t.name}: refused by policy: {verdict.reason or 'no reason given'}",
                )
        result = await t._owner.send(t, arguments)
        value, text = _value(result)
        if result.is_error:
            raise CallError(Kind.RAISED, f"{t.name}: {text or 'the tool failed (no text)'}")
        return value, text

    def _lookup(self, name: str) -> UpstreamTool:
        try:
            return self.tool(name)
        except KeyError as exc:
            raise CallError(Kind.INVALID, str(exc.args[0])) from None


async def _awaited(verdict: Awaitable[Decision]) -> Decision:
    got = await verdict
    if not isinstance(got, Decision):
        raise TypeError(f"the policy returned {got!r}, not a Decision")
    return got
