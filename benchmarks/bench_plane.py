"""Plane benchmark: the per-call cost of the execution plane's ``Remote`` executor over MCP
(stdio, and streamable HTTP on loopback) against ``InProcess`` and against the bare MCP SDK,
all in the same run.

Usage::

    .venv/bin/python -m benchmarks.bench_plane [--quick | --smoke] [--rounds N]
        [--backend asyncio|trio] [--json PATH]

Theory of operation
-------------------
One process, one event loop (anyio, ``--backend``), five *variants* of "something that
runs the tools of :mod:`benchmarks._plane_tools`", all opened once at the start and held
for the whole run:

* ``inprocess`` (baseline): :class:`sandbox.plane.InProcess` over the same tools, no wire.
* ``sdk_stdio`` (baseline): the official MCP SDK's ``ClientSession`` over
  ``stdio_client``, talking to ``python -m sandbox serve --tools benchmarks/_plane_tools.py
  --no-program --level process``: what MCP itself costs (JSON-RPC, pydantic, the SDK's
  dispatcher, the server) with nothing of ours on the client side.
* ``remote_stdio``: :class:`sandbox.plane.Remote` over :func:`sandbox.plane.stdio`, to a
  server of its own started the same way.
* ``sdk_http`` (baseline): ``ClientSession`` over the SDK's ``streamable_http_client``,
  to one ``sandbox serve --http 127.0.0.1:0`` subprocess.
* ``remote_http``: :class:`sandbox.plane.Remote` over :func:`sandbox.plane.http`, to the
  same HTTP server (a session of its own).
* ``lines_stdio`` and ``keepalive_http``: the same minimal JSON-RPC client of this module
  (:class:`LineClient`, :class:`HttpClient`: a request, its answer by id, nothing else),
  over a server of its own on stdio, and over kept-alive connections to the HTTP server
  (HTTP/1.1 by hand, a connection reused for request after request, as the TypeScript
  SDK's client does; the Python SDK's closes each answer's stream early, so its every call
  is a new connection). Their ratio is what HTTP itself costs over stdio for a call
  (``http_over_stdio`` in the JSON): the target is at most 3.

The two tools are ``echo(x)`` (returns ``x``) and ``touch`` (the same function with a facts
claim). Every variant runs the same operations:

* ``seq``: one ``echo`` call with ``{"x": 1}`` at a time; each call timed on its own with
  ``perf_counter_ns`` (µs per call: p50/p90/p99 over every sample of every round).
* ``concurrent``: :data:`WIDTH` tasks each making ``echo`` calls back to back on the one
  connection, so 32 are in flight; calls/s = calls / time until the last one returned.
* ``facts_1``: one facts reading of a ``touch`` call in one request
  (``Remote.batch_facts([call])``; the SDK sends the same custom request; ``InProcess``
  has no batch, so ``facts(call)``).
* ``facts_16_batch``: 16 readings in one request (``batch_facts([call] * 16)``;
  ``InProcess``: 16 ``facts(call)`` one after the other).
* ``facts_16_single``: 16 readings, one request each (``Remote.facts(call)`` x16).

Every result is checked (an error result, or another value, fails the run).

Ratios are cost ratios, ``variant / baseline`` (above 1: slower): time ratios for
latencies, ``baseline calls/s / variant calls/s`` for throughput. Each variant is compared
with ``inprocess`` and with the SDK over the same transport (``sdk_stdio`` for stdio,
``sdk_http`` for HTTP), so the report splits what MCP costs from what ``Remote`` adds on top;
``keepalive_http`` is also compared with ``lines_stdio`` (``http_over_stdio``).

Noise: absolute numbers drift by tens of percent on the small shared VMs this runs on, so
every operation of every variant runs once per round, the variants back to back and the
one that goes first moving by one each round; the ratios are given per round (median
[min-max]) beside the ratios of the pooled percentiles.

Processes: the stdio servers are the SDK's children (ended when their connections close,
and on their stdin's EOF if this process dies); the HTTP server is ours, stopped in a
``finally``, killed by a SIGTERM handler, and on Linux sent SIGTERM by the kernel if this
process dies any other way (``PR_SET_PDEATHSIG``). Nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final, Literal, Protocol

import anyio
import anyio.abc
import mcp_types
import msgspec
import pydantic
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from sandbox import plane

# The method name of the executor's facts request, so the SDK baseline sends the very
# request Remote.batch_facts sends (a private module: a benchmark may reach in).
from sandbox.plane._capability import FACTS_METHOD

from . import _plane_tools
from ._machine import ROOT, changed_sources, environment, git_head

RESULTS_DIR: Final = ROOT / "benchmarks" / "results"
TOOLS_FILE: Final = Path(_plane_tools.__file__).resolve()

#: Calls in flight in ``concurrent``, as the issue asks (a model's parallel tool calls are
#: a handful; 32 is well past that).
WIDTH: Final = 32
#: Readings per request in ``facts_16_*``: a large model turn's worth of parallel calls.
BATCH: Final = 16
#: Seconds the HTTP server may take to say it listens (it imports the MCP SDK and uvicorn:
#: about a second here; thirty allows for a loaded machine).
SERVER_START_TIMEOUT: Final = 30.0

ECHO_CALL: Final = plane.Call(tool=_plane_tools.ECHO, arguments={"x": 1})
TOUCH_CALL: Final = plane.Call(tool=_plane_tools.TOUCH, arguments={"x": 1})
TOUCH_FACTS: Final = plane.Facts(writes=("/tmp/x",))

Transport = Literal["none", "stdio", "http"]


@dataclass(frozen=True)
class Variant:
    """One way of running the tools."""

    key: str
    label: str
    transport: Transport
    client: Literal["inprocess", "sdk", "remote", "raw"]


VARIANTS: Final = (
    Variant("inprocess", "InProcess (baseline)", "none", "inprocess"),
    Variant("sdk_stdio", "MCP SDK ClientSession, stdio (baseline)", "stdio", "sdk"),
    Variant("remote_stdio", "Remote, stdio", "stdio", "remote"),
    Variant("sdk_http", "MCP SDK ClientSession, HTTP (baseline)", "http", "sdk"),
    Variant("remote_http", "Remote, HTTP", "http", "remote"),
    Variant("lines_stdio", "minimal client, stdio (baseline)", "stdio", "raw"),
    Variant("keepalive_http", "minimal client, HTTP kept alive", "http", "raw"),
)
BASELINES: Final = ("inprocess", "sdk_stdio", "sdk_http", "lines_stdio")
SAME_TRANSPORT_SDK: Final = {"stdio": "sdk_stdio", "http": "sdk_http"}
#: The target of ``http_over_stdio``: a call over HTTP (kept alive) costs at most this many
#: times the same call over stdio.
HTTP_OVER_STDIO_TARGET: Final = 3.0

OpKind = Literal["latency", "throughput"]


@dataclass(frozen=True)
class Op:
    """One operation every variant runs each round."""

    key: str
    title: str
    kind: OpKind
    unit: str


OPS: Final = (
    Op("seq", 'sequential echo {"x": 1}', "latency", "us per call"),
    Op("concurrent", f"{WIDTH} echo calls in flight", "throughput", "calls/s"),
    Op("facts_1", "facts: 1 reading in one request", "latency", "us per request"),
    Op("facts_16_batch", f"facts: {BATCH} readings in one request", "latency", "us per request"),
    Op(
        "facts_16_single",
        f"facts: {BATCH} readings, one request each",
        "latency",
        f"us per {BATCH} readings",
    ),
)


@dataclass(frozen=True)
class Sizes:
    """How much of each operation a run does, per variant and round.

    Sized for HTTP, the slowest variant (about 4 ms a call, 100 ms for 16 single facts
    requests on the 2-vCPU VM of the committed results): smoke ~7 s, quick ~20 s,
    full ~90 s.
    """

    rounds: int
    seq: int  # sequential calls
    concurrent: int  # calls, spread over WIDTH tasks
    facts: int  # requests (groups of BATCH requests for facts_16_single), each facts op
    warmup: int  # sequential calls before the first round, not counted; the other ops
    # warm up with WIDTH * 2 calls and warmup // 10 (at least 2) facts samples


SIZES: Final = {
    "smoke": Sizes(rounds=1, seq=20, concurrent=2 * WIDTH, facts=5, warmup=5),
    "quick": Sizes(rounds=3, seq=100, concurrent=6 * WIDTH, facts=6, warmup=30),
    "full": Sizes(rounds=5, seq=400, concurrent=20 * WIDTH, facts=20, warmup=100),
}


# -- the drivers: one interface over InProcess, the bare SDK and Remote ------------------


class Driver(Protocol):
    """What the timed loops call; each method checks its answer."""

    async def call(self) -> None: ...

    async def facts_one(self) -> None: ...

    async def facts_batch(self, k: int) -> None: ...

    async def facts_singles(self, k: int) -> None: ...


class CheckFailed(RuntimeError):
    """A variant gave a wrong answer: the numbers would be of something else."""


def _check_result(r: plane.Result) -> None:
    if r.is_error or r.data != 1:
        raise CheckFailed(f"echo returned {r!r}")


def _check_facts(f: plane.Facts | Exception) -> None:
    if f != TOUCH_FACTS:
        raise CheckFailed(f"touch's facts read as {f!r}")


class ExecutorDriver:
    """:class:`~sandbox.plane.InProcess` or :class:`~sandbox.plane.Remote`."""

    def __init__(self, ex: plane.InProcess | plane.Remote) -> None:
        self.ex = ex

    async def call(self) -> None:
        _check_result(await self.ex.call(ECHO_CALL))

    async def facts_one(self) -> None:
        if isinstance(self.ex, plane.Remote):
            (got,) = await self.ex.batch_facts([TOUCH_CALL])
            _check_facts(got)
        else:
            _check_facts(await self.ex.facts(TOUCH_CALL))

    async def facts_batch(self, k: int) -> None:
        if isinstance(self.ex, plane.Remote):
            got = await self.ex.batch_facts([TOUCH_CALL] * k)
            if len(got) != k:
                raise CheckFailed(f"{k} readings asked, {len(got)} given")
            for f in got:
                _check_facts(f)
        else:  # InProcess has no batch: the readings one after the other
            await self.facts_singles(k)

    async def facts_singles(self, k: int) -> None:
        for _ in range(k):
            _check_facts(await self.ex.facts(TOUCH_CALL))


class _FactsParams(mcp_types.RequestParams):
    calls: list[dict[str, Any]]


class _FactsRequest(mcp_types.Request[_FactsParams, str]):
    method: str = FACTS_METHOD
    params: _FactsParams


class _AnyResult(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")


class SdkDriver:
    """The bare SDK: ``ClientSession.call_tool``, and the facts request sent as is."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self._one = _FactsRequest(params=_FactsParams(calls=[self._wire_call()]))
        self._batches: dict[int, _FactsRequest] = {}

    @staticmethod
    def _wire_call() -> dict[str, Any]:
        return {"tool": TOUCH_CALL.tool, "arguments": TOUCH_CALL.arguments}

    async def call(self) -> None:
        r = await self.session.call_tool(ECHO_CALL.tool, ECHO_CALL.arguments)
        if not isinstance(r, mcp_types.CallToolResult) or r.is_error:
            raise CheckFailed(f"echo returned {r!r}")
        if r.structured_content != {"value": 1}:
            raise CheckFailed(f"echo returned {r.structured_content!r}")

    async def _facts(self, request: _FactsRequest, k: int) -> None:
        got = await self.session.send_request(request, _AnyResult)
        readings = (got.model_extra or {}).get("readings")
        if not isinstance(readings, list) or len(readings) != k:
            raise CheckFailed(f"{k} readings asked, got {readings!r}")
        for r in readings:
            if r.get("facts") != {"writes": ["/tmp/x"]}:
                raise CheckFailed(f"touch's facts read as {r!r}")

    async def facts_one(self) -> None:
        await self._facts(self._one, 1)

    async def facts_batch(self, k: int) -> None:
        request = self._batches.get(k)
        if request is None:
            request = _FactsRequest(params=_FactsParams(calls=[self._wire_call()] * k))
            self._batches[k] = request
        await self._facts(request, k)

    async def facts_singles(self, k: int) -> None:
        for _ in range(k):
            await self._facts(self._one, 1)


# -- the minimal client: JSON-RPC and nothing else, on stdio or kept-alive HTTP ----------

#: Decodes the minimal client's answers.
_DECODE: Final = msgspec.json.Decoder().decode
#: The initialize request of the minimal client (the handshake era, as Remote speaks it).
_INITIALIZE: Final = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "bench_plane", "version": "1"},
}


class RawClient(Protocol):
    """What :class:`RawDriver` needs: one request, its answer (the JSON-RPC message)."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


class LineClient:
    """JSON-RPC on a process's standard input and output, one message a line: requests
    written under a lock, answers matched by id by one reader task."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self._stdin = proc.stdin
        self._lines = BufferedByteReceiveStream(proc.stdout)
        self._lock = anyio.Lock()
        self._waiting: dict[int, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._next = 0

    async def read(self) -> None:
        """Hand each answer to its request (run in a task; ends at EOF)."""
        with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead):
            while True:
                message = _DECODE(await self._lines.receive_until(b"\n", 1 << 26))
                waiting = self._waiting.pop(message.get("id"), None)
                if waiting is not None:
                    waiting[1].append(message)
                    waiting[0].set()

    async def send(self, message: dict[str, Any]) -> None:
        data = msgspec.json.encode(message) + b"\n"
        async with self._lock:
            await self._stdin.send(data)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        rid = self._next
        done, box = anyio.Event(), list[dict[str, Any]]()
        self._waiting[rid] = (done, box)
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        await done.wait()
        return box[0]


@contextlib.asynccontextmanager
async def line_client() -> AsyncIterator[LineClient]:
    """A :class:`LineClient` of a ``sandbox serve`` of its own, initialized."""
    cmd = serve_command()
    proc = await anyio.open_process(cmd, env=child_env(), cwd=ROOT, stderr=None)
    async with proc, anyio.create_task_group() as tg:
        client = LineClient(proc)
        tg.start_soon(client.read)
        try:
            await client.request("initialize", _INITIALIZE)
            await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield client
        finally:
            assert proc.stdin is not None
            await proc.stdin.aclose()  # the server ends at EOF
            with anyio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
            tg.cancel_scope.cancel()


class _HttpConnection:
    """One kept-alive HTTP/1.1 connection: a POST, its whole answer read, again."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)

    async def post(self, head: bytes, body: bytes) -> tuple[dict[str, str], bytes]:
        await self.stream.send(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        lines = (await self.reader.receive_until(b"\r\n\r\n", 1 << 16)).split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode()] = value.strip().decode()
        if headers.get("transfer-encoding") == "chunked":
            chunks = []
            while size := int(await self.reader.receive_until(b"\r\n", 64), 16):
                chunks.append(await self.reader.receive_exactly(size))
                await self.reader.receive_exactly(2)
            await self.reader.receive_until(b"\r\n", 1 << 16)  # the last chunk's end
            data = b"".join(chunks)
        else:
            data = await self.reader.receive_exactly(int(headers.get("content-length", 0)))
        if status >= 300:
            raise CheckFailed(f"HTTP {status}: {data[:200]!r}")
        return headers, data


class HttpClient:
    """JSON-RPC over streamable HTTP on kept-alive connections, HTTP/1.1 by hand: each
    request takes an idle connection (or opens one), reads its answer to the end, and
    gives the connection back."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        self._host, self._port, self._path = parts.hostname, parts.port, parts.path
        self._idle: list[_HttpConnection] = []
        self._open: list[_HttpConnection] = []
        self._headers = {
            "Host": f"{self._host}:{self._port}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self._next = 0

    async def _connect(self) -> _HttpConnection:
        stream = await anyio.connect_tcp(self._host, self._port)
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _HttpConnection(stream)
        self._open.append(conn)
        return conn

    async def _post(self, message: dict[str, Any]) -> tuple[dict[str, str], bytes]:
        head = f"POST {self._path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in self._headers.items()
        )
        body = msgspec.json.encode(message)
        conn = self._idle.pop() if self._idle else await self._connect()
        try:
            answer = await conn.post(head.encode(), body)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            # The server closes a connection idle for 5 s (uvicorn's keep-alive timeout)
            # before it reads anything more from it: the request was never read, so it is
            # sent again on a new connection, as any HTTP client does.
            await conn.stream.aclose()
            conn = await self._connect()
            answer = await conn.post(head.encode(), body)
        self._idle.append(conn)
        return answer

    async def initialize(self) -> None:
        self._next += 1
        init = {"jsonrpc": "2.0", "id": self._next, "method": "initialize", "params": _INITIALIZE}
        headers, _ = await self._post(init)
        self._headers["mcp-session-id"] = headers["mcp-session-id"]
        self._headers["mcp-protocol-version"] = str(_INITIALIZE["protocolVersion"])
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        rid = self._next
        _, data = await self._post(
            {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        )
        for line in data.splitlines():
            if line.startswith(b"data:"):
                answer: dict[str, Any] = _DECODE(line[5:])
                if answer.get("id") == rid:
                    return answer
        raise CheckFailed(f"no answer to request {rid} in {data[:200]!r}")

    async def aclose(self) -> None:
        for conn in self._open:
            await conn.stream.aclose()


@contextlib.asynccontextmanager
async def http_client(url: str) -> AsyncIterator[HttpClient]:
    """An :class:`HttpClient` of ``url``, its session open."""
    client = HttpClient(url)
    try:
        await client.initialize()
        yield client
    finally:
        await client.aclose()


class RawDriver:
    """The minimal client: tools/call and the facts request, each checked."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self._call = {"name": ECHO_CALL.tool, "arguments": ECHO_CALL.arguments}
        self._one = [{"tool": TOUCH_CALL.tool, "arguments": TOUCH_CALL.arguments}]

    async def call(self) -> None:
        answer = await self.client.request("tools/call", self._call)
        result = answer.get("result") or {}
        if result.get("isError") or result.get("structuredContent") != {"value": 1}:
            raise CheckFailed(f"echo returned {answer!r}")

    async def _facts(self, k: int) -> None:
        answer = await self.client.request(FACTS_METHOD, {"calls": self._one * k})
        readings = (answer.get("result") or {}).get("readings")
        if not isinstance(readings, list) or len(readings) != k:
            raise CheckFailed(f"{k} readings asked, got {answer!r}")
        for r in readings:
            if r.get("facts") != {"writes": ["/tmp/x"]}:
                raise CheckFailed(f"touch's facts read as {r!r}")

    async def facts_one(self) -> None:
        await self._facts(1)

    async def facts_batch(self, k: int) -> None:
        await self._facts(k)

    async def facts_singles(self, k: int) -> None:
        for _ in range(k):
            await self._facts(1)


# -- the servers and the connections -------------------------------------------------------


def serve_command(*extra: str) -> list[str]:
    """``python -m sandbox serve`` of the benchmark's tools, no program tool."""
    return [
        sys.executable,
        "-m",
        "sandbox",
        "serve",
        "--tools",
        str(TOOLS_FILE),
        "--no-program",
        "--level",
        "process",
        *extra,
    ]


def child_env() -> dict[str, str]:
    """This environment, with the source tree first on the children's path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


#: The HTTP server of the run, killed by the SIGTERM handler if one comes.
_SERVERS: list[subprocess.Popen[bytes]] = []
_SERVER_LOG: Final = "serve-http.log"
_READY: Final = "sandbox: serving "


def _die_with_parent() -> None:
    """In the HTTP server's child, before exec: SIGTERM when this process dies, however it
    dies (SIGKILL included). Linux only; elsewhere the ``finally`` and the handler do."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def start_http_server(log_dir: Path) -> subprocess.Popen[bytes]:
    """Start ``sandbox serve --http 127.0.0.1:0``. Its standard error goes to a file in
    ``log_dir``: a pipe that nobody reads after the first line could fill and stall it.

    Called before the event loop starts, so that no other thread runs while it forks.
    """
    with (log_dir / _SERVER_LOG).open("wb") as log:
        proc = subprocess.Popen(
            serve_command("--http", "127.0.0.1:0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=ROOT,
            env=child_env(),
            preexec_fn=_die_with_parent,  # no other thread runs yet: see above
        )
    _SERVERS.append(proc)
    return proc


def wait_http_server(proc: subprocess.Popen[bytes], log_dir: Path) -> str:
    """The URL the server serves at, once it says it listens.

    Raises:
        RuntimeError: it exited, or said nothing within :data:`SERVER_START_TIMEOUT`.
    """
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        text = (log_dir / _SERVER_LOG).read_text(errors="replace")
        for line in text.splitlines():
            if line.startswith(_READY):
                return line[len(_READY) :].strip()
        if proc.poll() is not None:
            raise RuntimeError(f"sandbox serve --http exited {proc.returncode}: {text.strip()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"sandbox serve --http said nothing in {SERVER_START_TIMEOUT} s")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc`` (kill it after 5 s) and reap it; idempotent."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


@contextlib.asynccontextmanager
async def sdk_session(transport: Transport, url: str) -> AsyncIterator[ClientSession]:
    """The bare SDK's session, initialized, its tools listed (as Remote lists them)."""
    if transport == "stdio":
        cmd = serve_command()
        params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=child_env(), cwd=ROOT)
        ctx: contextlib.AbstractAsyncContextManager[Any] = stdio_client(params)
    else:
        ctx = streamable_http_client(url)
    async with ctx as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        await session.list_tools()
        yield session


@contextlib.asynccontextmanager
async def open_driver(variant: Variant, url: str) -> AsyncIterator[Driver]:
    """The variant's driver, connected (and its tools checked by the Remote)."""
    if variant.client == "inprocess":
        ex = plane.InProcess(_plane_tools.TOOLS)
        try:
            yield ExecutorDriver(ex)
        finally:
            await ex.aclose()
    elif variant.client == "sdk":
        async with sdk_session(variant.transport, url) as session:
            yield SdkDriver(session)
    elif variant.client == "raw":
        if variant.transport == "stdio":
            async with line_client() as lines:
                yield RawDriver(lines)
        else:
            async with http_client(url) as client:
                yield RawDriver(client)
    else:
        dialer = (
            plane.stdio(serve_command(), env=child_env(), cwd=str(ROOT))
            if variant.transport == "stdio"
            else plane.http(url)
        )
        async with plane.Remote.connect(dialer) as remote:
            yield ExecutorDriver(remote)


# -- the timed loops -------------------------------------------------------------------


async def time_each(op: Callable[[], Awaitable[None]], n: int) -> list[float]:
    """``n`` runs of ``op`` one after the other, each timed: µs."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await op()
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return out


async def time_concurrent(op: Callable[[], Awaitable[None]], total: int, width: int) -> float:
    """``total`` runs of ``op`` by ``width`` tasks at once: runs per second."""
    per, extra = divmod(total, width)

    async def worker(n: int) -> None:
        for _ in range(n):
            await op()

    t0 = time.perf_counter_ns()
    async with anyio.create_task_group() as tg:
        for i in range(width):
            tg.start_soon(worker, per + (i < extra))
    return total / ((time.perf_counter_ns() - t0) / 1e9)


def op_runner(op: Op, d: Driver) -> Callable[[], Awaitable[None]]:
    """The awaitable one sample of ``op`` runs."""
    if op.key in ("seq", "concurrent"):
        return d.call
    if op.key == "facts_1":
        return d.facts_one
    if op.key == "facts_16_batch":
        return lambda: d.facts_batch(BATCH)
    return lambda: d.facts_singles(BATCH)


def op_count(op: Op, sizes: Sizes, *, warmup: bool) -> int:
    """How many samples (calls, for ``concurrent``) one block of ``op`` takes."""
    if op.key == "seq":
        return sizes.warmup if warmup else sizes.seq
    if op.key == "concurrent":
        return 2 * WIDTH if warmup else sizes.concurrent
    return max(2, sizes.warmup // 10) if warmup else sizes.facts


async def measure(op: Op, d: Driver, sizes: Sizes, *, warmup: bool = False) -> list[float]:
    """One block of ``op``: the µs samples (latency), or one calls/s (throughput)."""
    run = op_runner(op, d)
    n = op_count(op, sizes, warmup=warmup)
    if op.kind == "throughput":
        return [await time_concurrent(run, n, WIDTH)]
    return await time_each(run, n)


# Samples: op -> variant -> one list of samples per round.
Samples = dict[str, dict[str, list[list[float]]]]


async def run_rounds(drivers: dict[str, Driver], sizes: Sizes) -> Samples:
    """Warm every variant up, then every op of every variant once per round, interleaved."""
    keys = list(drivers)
    for key in keys:
        for op in OPS:
            await measure(op, drivers[key], sizes, warmup=True)
    samples: Samples = {op.key: {k: [] for k in keys} for op in OPS}
    for r in range(sizes.rounds):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for op in OPS:
            line = []
            for key in order:
                got = await measure(op, drivers[key], sizes)
                samples[op.key][key].append(got)
                value = got[0] if op.kind == "throughput" else statistics.median(got)
                line.append(f"{key} {value:.0f}")
            what = "calls/s" if op.kind == "throughput" else "us p50"
            print(
                f"  round {r + 1}/{sizes.rounds} {op.key:16} {what}: " + ", ".join(line),
                flush=True,
            )
    return samples


async def connect_all(
    variants: Sequence[Variant], url: str, stack: contextlib.AsyncExitStack
) -> tuple[dict[str, Driver], dict[str, float]]:
    """Open every variant's driver on ``stack``; also how long each took to connect (ms)."""
    drivers: dict[str, Driver] = {}
    connect_ms: dict[str, float] = {}
    for v in variants:
        t0 = time.perf_counter_ns()
        drivers[v.key] = await stack.enter_async_context(open_driver(v, url))
        connect_ms[v.key] = (time.perf_counter_ns() - t0) / 1e6
        print(f"  connected {v.key} in {connect_ms[v.key]:.0f} ms", flush=True)
    return drivers, connect_ms


async def run_all(
    variants: Sequence[Variant], url: str, sizes: Sizes, deadline: float
) -> tuple[Samples, dict[str, float]]:
    """Connect, measure, disconnect; the whole of it within ``deadline`` seconds.

    Raises:
        TimeoutError: the run overran ``deadline``.
        CheckFailed: a variant answered wrongly.
    """
    with anyio.fail_after(deadline):
        async with contextlib.AsyncExitStack() as stack:
            drivers, connect_ms = await connect_all(variants, url, stack)
            samples = await run_rounds(drivers, sizes)
    return samples, connect_ms


# -- numbers ---------------------------------------------------------------------------


def percentiles(xs: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99 (linear interpolation) and mean."""
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else list(xs) * 99
    return {"p50": q[49], "p90": q[89], "p99": q[98], "mean": statistics.fmean(xs)}


def summary(xs: Sequence[float]) -> dict[str, float]:
    """Median, min and max."""
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def analyse(samples: Samples, keys: Sequence[str]) -> dict[str, Any]:
    """Per op and variant: the numbers, and cost ratios to every baseline present."""
    out: dict[str, Any] = {}
    for op in OPS:
        per: dict[str, Any] = {}
        for key in keys:
            rounds = samples[op.key][key]
            if op.kind == "throughput":
                values = [r[0] for r in rounds]
                per[key] = {
                    "calls_per_s_per_round": values,
                    "calls_per_s": summary(values),
                    "us_per_call": summary([1e6 / v for v in values]),
                }
            else:
                pooled = [x for r in rounds for x in r]
                per[key] = {
                    "n": len(pooled),
                    **percentiles(pooled),
                    "p50_per_round": [statistics.median(r) for r in rounds],
                    "samples_us": rounds,
                }
                if op.key == "facts_16_single":
                    per[key]["us_per_single_request"] = per[key]["p50"] / BATCH
        for key in keys:
            per[key]["ratios"] = {
                base: _ratios(op, per[key], per[base])
                for base in BASELINES
                if base in per and base != key
            }
        out[op.key] = {"title": op.title, "kind": op.kind, "unit": op.unit, "variants": per}
    # What batching buys: 16 single requests' time over one batch of 16, per round.
    batching: dict[str, Any] = {}
    for key in keys:
        singles = out["facts_16_single"]["variants"][key]["p50_per_round"]
        batch = out["facts_16_batch"]["variants"][key]["p50_per_round"]
        one = out["facts_1"]["variants"][key]["p50_per_round"]
        batching[key] = {
            "singles_over_batch_per_round": [s / b for s, b in zip(singles, batch, strict=True)],
            "singles_over_batch": summary([s / b for s, b in zip(singles, batch, strict=True)]),
            "batch16_over_batch1": summary([b / o for b, o in zip(batch, one, strict=True)]),
        }
    out["batching"] = {
        "title": f"{BATCH} single facts requests over one batch of {BATCH} (p50, per round)",
        "variants": batching,
    }
    if "keepalive_http" in keys and "lines_stdio" in keys:
        r = out["seq"]["variants"]["keepalive_http"]["ratios"]["lines_stdio"]
        out["http_over_stdio"] = {
            "title": "a sequential call over HTTP (kept alive) over the same call over stdio, "
            "the same minimal client (cost ratio of p50s, per round)",
            "target": HTTP_OVER_STDIO_TARGET,
            "p50_per_round": r["p50_per_round"],
            "summary": r["p50_per_round_summary"],
            "pooled_p50": r["p50"],
            "within_target": r["p50_per_round_summary"]["median"] <= HTTP_OVER_STDIO_TARGET,
        }
    return out


def _ratios(op: Op, mine: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Cost ratios of ``mine`` to ``base``: above 1 is slower."""
    if op.kind == "throughput":
        mine_r, base_r = mine["calls_per_s_per_round"], base["calls_per_s_per_round"]
        per_round = [b / m for m, b in zip(mine_r, base_r, strict=True)]
        return {
            "per_round": per_round,
            "per_round_summary": summary(per_round),
            "median": base["calls_per_s"]["median"] / mine["calls_per_s"]["median"],
        }
    per_round = [m / b for m, b in zip(mine["p50_per_round"], base["p50_per_round"], strict=True)]
    return {
        "p50": mine["p50"] / base["p50"],
        "p90": mine["p90"] / base["p90"],
        "p99": mine["p99"] / base["p99"],
        "p50_per_round": per_round,
        "p50_per_round_summary": summary(per_round),
    }


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _range(s: dict[str, float]) -> str:
    return f"{_fmt(s['median'])} [{_fmt(s['min'])}-{_fmt(s['max'])}]"


def same_sdk(variant: Variant) -> str | None:
    """The SDK baseline over the variant's transport (None for a baseline itself)."""
    if variant.client != "remote":
        return None
    return SAME_TRANSPORT_SDK[variant.transport]


def print_tables(results: dict[str, Any], variants: Sequence[Variant]) -> None:
    """The readable tables: numbers, and cost ratios (median [min-max] over rounds)."""
    for op in OPS:
        res = results[op.key]["variants"]
        print()
        print(f"{op.title} ({op.unit}); ratios are cost ratios, above 1 is slower")
        if op.kind == "throughput":
            print(f"  {'variant':40} {'calls/s [min-max]':24} {'x InProcess':22} x SDK same wire")
        else:
            print(
                f"  {'variant':40} {'p50':>8} {'p90':>8} {'p99':>8}  "
                f"{'x InProcess p50 [rounds]':26} x SDK same wire p50 [rounds]"
            )
        for v in variants:
            e = res[v.key]
            cols = []
            for base in ("inprocess", same_sdk(v)):
                r = e["ratios"].get(base) if base else None
                if r is None:
                    cols.append("")
                elif op.kind == "throughput":
                    cols.append(_range(r["per_round_summary"]))
                else:
                    cols.append(_range(r["p50_per_round_summary"]))
            if op.kind == "throughput":
                print(f"  {v.label:40} {_range(e['calls_per_s']):24} {cols[0]:22} {cols[1]}")
            else:
                print(
                    f"  {v.label:40} {_fmt(e['p50']):>8} {_fmt(e['p90']):>8} "
                    f"{_fmt(e['p99']):>8}  {cols[0]:26} {cols[1]}"
                )
    print()
    print(results["batching"]["title"])
    for v in variants:
        b = results["batching"]["variants"][v.key]
        print(
            f"  {v.label:40} singles/batch {_range(b['singles_over_batch'])}   "
            f"batch16/batch1 {_range(b['batch16_over_batch1'])}"
        )
    hos = results.get("http_over_stdio")
    if hos is not None:
        verdict = "within" if hos["within_target"] else "OVER"
        print()
        print(hos["title"])
        print(
            f"  HTTP / stdio: {_range(hos['summary'])} (pooled p50 {_fmt(hos['pooled_p50'])}); "
            f"target {_fmt(hos['target'])}: {verdict}"
        )


# -- the command line ------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_plane",
        description="Per-call cost of the execution plane's Remote executor over MCP (stdio "
        "and streamable HTTP on loopback) against InProcess and the bare MCP SDK, same run.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer calls (under 30 s)")
    size.add_argument(
        "--smoke", action="store_true", help="~20 calls of each, one round (for the tests)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="the client's loop"
    )
    parser.add_argument("--no-http", action="store_true", help="leave the two HTTP variants out")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="where to write the results (default benchmarks/results/plane-<date>[-quick].json; "
        "--smoke writes none unless given)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds before the run is abandoned"
    )
    opts = parser.parse_args(argv)
    if opts.rounds is not None and opts.rounds < 1:
        parser.error("--rounds must be at least 1")
    return opts


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Kill the HTTP server, then die of the signal as if unhandled (the stdio servers end
    on their stdin's EOF). Raising here instead would land inside the event loop."""
    for proc in _SERVERS:
        if proc.poll() is None:
            proc.kill()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark, print the tables, write the JSON."""
    args = sys.argv[1:] if argv is None else argv
    opts = parse_args(args)
    mode = "smoke" if opts.smoke else "quick" if opts.quick else "full"
    sizes = SIZES[mode]
    if opts.rounds is not None:
        sizes = Sizes(**{**vars(sizes), "rounds": opts.rounds})
    variants = [v for v in VARIANTS if not (opts.no_http and v.transport == "http")]
    signal.signal(signal.SIGTERM, _on_sigterm)

    meta = environment(args, extra_packages=("mcp", "mcp-types", "pydantic", "httpx2", "uvicorn"))
    meta["git"] = git_head(ROOT)  # the tree may be dirty: every measured file's digest
    meta["backend"] = opts.backend
    print(
        f"plane benchmark ({mode}): {sizes.rounds} rounds x {len(OPS)} ops x "
        f"{len(variants)} variants ({', '.join(v.key for v in variants)}), interleaved; "
        f"client on {opts.backend}"
    )
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench_plane-") as tmp:
        proc = None
        try:
            url = ""
            if not opts.no_http:
                proc = start_http_server(Path(tmp))
                url = wait_http_server(proc, Path(tmp))
                print(f"  http server pid {proc.pid} at {url}")
            samples, connect_ms = anyio.run(
                run_all, variants, url, sizes, opts.timeout, backend=opts.backend
            )
        except KeyboardInterrupt:
            print("interrupted: stopping the servers", file=sys.stderr)
            raise SystemExit(130) from None
        finally:
            if proc is not None:
                stop(proc)
    wall = time.monotonic() - t0
    keys = [v.key for v in variants]
    results = analyse(samples, keys)
    print_tables(results, variants)
    print(f"\nconnect (ms, once): {', '.join(f'{k} {connect_ms[k]:.0f}' for k in keys)}")
    print(f"wall {wall:.1f} s")

    meta["loadavg_at_end"] = list(os.getloadavg())
    meta["wall_seconds"] = round(wall, 2)
    changed = changed_sources(meta["git"].get("measured_sources", {}), ROOT)
    meta["sources_changed_during_run"] = changed
    if changed:
        print(f"WARNING: sources changed while measuring: {', '.join(changed)}")
    document = {
        "benchmark": "bench_plane",
        "environment": meta,
        "parameters": {
            "mode": mode,
            "sizes": vars(sizes),
            "width": WIDTH,
            "batch": BATCH,
            "server_command": serve_command(),
            "tools": str(TOOLS_FILE.relative_to(ROOT)),
            "echo": msgspec.to_builtins(ECHO_CALL),
            "facts_call": msgspec.to_builtins(TOUCH_CALL),
            "variants": {v.key: v.label for v in variants},
            "baselines": [b for b in BASELINES if b in keys],
            "ratio_definition": "cost ratio variant/baseline (above 1 is slower): time ratio "
            "for latencies (p50 per round, and pooled p50/p90/p99), baseline calls/s over "
            "variant calls/s for throughput",
            "percentiles": "linear interpolation over every sample of every round",
        },
        "connect_ms": connect_ms,
        "results": results,
    }
    path: Path | None = opts.json
    if path is None and mode != "smoke":
        suffix = "-quick" if mode == "quick" else ""
        path = RESULTS_DIR / f"plane-{dt.date.today().isoformat()}{suffix}.json"
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n")
        print(f"results written to {path}")


if __name__ == "__main__":
    main()
