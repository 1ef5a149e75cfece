"""The parent's Server and Starter over real OS pipes, with the test playing the child."""

from __future__ import annotations

import os
import select
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from protocol import (
    VERSION,
    CallError,
    CallLimits,
    ChannelClosed,
    FdChannel,
    FrameDecoder,
    Kind,
    RemoteProtocolError,
    Request,
    Response,
    Result,
    Server,
    Signal,
    Start,
    StartBudget,
    Starter,
    VersionMismatch,
    encode_frame,
    frame_message,
)
from protocol._messages import RESPONSE_DECODER, decode

pytestmark = pytest.mark.anyio

Handler = Callable[[Request], "str | Awaitable[str]"]

#: The longest any one wait of these tests may take (a send, a receive, a whole exchange
#: with a server); far more than any of them needs, so that only a hang reaches it.
WAIT = 10.0


class RawChild:
    """The child's side of a call channel, written by hand: frames out, Responses in."""

    def __init__(self, channel: FdChannel) -> None:
        self.channel = channel
        self.decoder = FrameDecoder()

    async def send(
        self, call_id: str, tool: str = "t", args: str = "", deadline_ms: int = 0
    ) -> None:
        req = Request(v=VERSION, id=call_id, tool=tool, args=args, deadline_ms=deadline_ms)
        with anyio.fail_after(WAIT):
            await self.channel.send_all(frame_message(req))

    async def send_raw(self, data: bytes) -> None:
        with anyio.fail_after(WAIT):
            await self.channel.send_all(data)

    async def recv(self) -> Response | None:
        """The next Response, or None when the parent closed the channel."""
        with anyio.fail_after(WAIT):
            while True:
                frame = self.decoder.next_frame()
                if frame is Signal.CLOSED:
                    return None
                if isinstance(frame, bytes):
                    return decode(RESPONSE_DECODER, frame)
                self.decoder.receive_data(await self.channel.receive())

    async def recv_n(self, n: int) -> dict[str, Response]:
        out: dict[str, Response] = {}
        for _ in range(n):
            r = await self.recv()
            assert r is not None
            out[r.id] = r
        return out


@asynccontextmanager
async def serving(handler: Handler, **limits: Any) -> AsyncIterator[tuple[Server, RawChild]]:
    """A Server on one end of a pipe pair and a RawChild on the other, in one task group;
    the whole exchange within :data:`WAIT`."""
    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), handler, CallLimits(**limits))
    child = RawChild(FdChannel(down[0], up[1]))
    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve)
                yield server, child
                tg.cancel_scope.cancel()
    finally:
        child.channel.close()


def read(fd: int, n: int) -> bytes:
    """``os.read`` of a pipe, failing after :data:`WAIT` if nothing can be read."""
    readable, _, _ = select.select([fd], [], [], WAIT)
    if not readable:
        raise TimeoutError(f"nothing to read on descriptor {fd} in {WAIT} s")
    return os.read(fd, n)


def echo(request: Request) -> str:
    return request.args


async def test_counts_calls_and_refuses_past_max_calls() -> None:
    """The parent counts accepted calls itself; the call past MaxCalls gets `limit`."""
    async with serving(echo, max_calls=3) as (server, child):
        for i in range(4):
            await child.send(str(i), args="x")
        got = await child.recv_n(4)
    assert [got[str(i)].ok for i in range(3)] == [True, True, True]
    assert got["3"].ok is False
    assert got["3"].kind is Kind.LIMIT
    assert server.statistics().calls == 3
    assert server.statistics().refused == 1


async def test_withholds_a_result_past_max_bytes() -> None:
    """Result bytes are counted when delivered; a value past MaxBytes is withheld as `limit`."""
    async with serving(echo, max_bytes=25) as (server, child):
        for i in range(3):
            await child.send(str(i), args="0123456789")
            await child.recv_n(1) if i < 2 else None
        last = await child.recv()
        await child.send("small", args="abcde")
        small = await child.recv()
    assert last is not None
    assert last.kind is Kind.LIMIT
    assert last.value == ""
    assert small is not None
    assert small.ok
    assert small.value == "abcde"
    assert server.statistics().bytes == 25


async def test_counts_bytes_in_utf8() -> None:
    """MaxBytes counts UTF-8 bytes, not characters."""
    async with serving(echo, max_bytes=5) as (server, child):
        await child.send("1", args="éé")  # 4 bytes
        await child.send("2", args="é")  # 2 more: over
        got = await child.recv_n(2)
    assert got["1"].ok
    assert got["2"].kind is Kind.LIMIT
    assert server.statistics().bytes == 4


async def test_inflight_cap_answers_limit_at_once_and_never_queues() -> None:
    """A call over the in-flight cap is answered `limit` while the others are still running."""
    release = anyio.Event()

    async def slow(request: Request) -> str:
        await release.wait()
        return request.id

    async with serving(slow, max_inflight=2) as (server, child):
        await child.send("a")
        await child.send("b")
        await child.send("c")
        refused = await child.recv()
        assert refused is not None
        assert (refused.id, refused.kind) == ("c", Kind.LIMIT)
        assert server.statistics().inflight == 2
        release.set()
        got = await child.recv_n(2)
    assert {k: v.value for k, v in got.items()} == {"a": "a", "b": "b"}
    stats = server.statistics()
    assert (stats.calls, stats.refused, stats.peak_inflight) == (2, 1, 2)


async def test_slow_call_blocks_no_other_and_answers_go_out_of_order() -> None:
    """A slow async call does not hold up later calls; responses are matched by id."""
    release = anyio.Event()

    def handler(request: Request) -> str | Awaitable[str]:
        if request.tool == "slow":

            async def wait() -> str:
                await release.wait()
                return "slow-done"

            return wait()
        return "fast"

    async with serving(handler) as (_, child):
        await child.send("1", tool="slow")
        await child.send("2", tool="fast")
        first = await child.recv()
        release.set()
        second = await child.recv()
    assert first is not None
    assert second is not None
    assert (first.id, first.value) == ("2", "fast")
    assert (second.id, second.value) == ("1", "slow-done")


async def test_deadline_answers_transient_without_waiting_for_the_handler() -> None:
    """At the deadline the parent answers `transient` at once, even if the handler ignores it."""
    handler_done = anyio.Event()
    answered_while_running: list[bool] = []

    async def stubborn(request: Request) -> str:
        with anyio.CancelScope(shield=True):
            await handler_done.wait()
        return "late"

    async with serving(stubborn, max_call_deadline=0.2) as (server, child):
        await child.send("1")
        with anyio.fail_after(10):
            r = await child.recv()
        answered_while_running.append(not handler_done.is_set())
        handler_done.set()
        await child.send("2", tool="after")
        handler_done = anyio.Event()
        handler_done.set()
        r2 = await child.recv()
    assert r is not None
    assert (r.id, r.kind) == ("1", Kind.TRANSIENT)
    assert answered_while_running == [True]
    assert r2 is not None
    assert r2.id == "2"  # the late value of call 1 was dropped, never sent
    assert server.statistics().expired == 1


async def test_deadline_cancels_the_handler() -> None:
    """A handler still running at its deadline is cancelled."""
    cancelled = anyio.Event()

    async def sleeper(request: Request) -> str:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return "never"

    async with serving(sleeper, max_call_deadline=0.2) as (_, child):
        await child.send("1")
        with anyio.fail_after(10):
            r = await child.recv()
            await cancelled.wait()
    assert r is not None
    assert r.kind is Kind.TRANSIENT


async def test_child_deadline_can_shorten_but_never_lengthen() -> None:
    """deadline_ms below the cap is honoured; above the cap (or absent) the cap applies."""

    async def sleeper(request: Request) -> str:
        await anyio.sleep(30)
        return "never"

    async with serving(sleeper, max_call_deadline=0.5) as (_, child):
        with anyio.fail_after(10):
            await child.send("short", deadline_ms=100)
            await child.send("long", deadline_ms=600_000)
            await child.send("none")
            got = await child.recv_n(3)
    assert {k: v.kind for k, v in got.items()} == dict.fromkeys(
        ("short", "long", "none"), Kind.TRANSIENT
    )

    async with serving(sleeper) as (_, child):  # no cap: the child's wish alone
        with anyio.fail_after(10):
            await child.send("wish", deadline_ms=100)
            r = await child.recv()
    assert r is not None
    assert r.kind is Kind.TRANSIENT


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_handler_exceptions_are_classified(mode: str) -> None:
    """CallError keeps its kind; an unclassified exception becomes `unknown`; bad values too."""

    def raising(request: Request) -> Any:
        if request.tool == "denied":
            raise CallError(Kind.DENIED, "policy says no")
        if request.tool == "boom":
            raise ZeroDivisionError("boom")
        return 42  # not a str

    def handler(request: Request) -> Any:
        if mode == "sync":
            return raising(request)

        async def run() -> Any:
            await anyio.lowlevel.checkpoint()
            return raising(request)

        return run()

    async with serving(handler) as (_, child):
        for tool in ("denied", "boom", "int"):
            await child.send(tool, tool=tool)
        got = await child.recv_n(3)
    assert (got["denied"].kind, got["denied"].error) == (Kind.DENIED, "policy says no")
    assert got["boom"].kind is Kind.UNKNOWN
    assert "ZeroDivisionError" in got["boom"].error
    assert got["int"].kind is Kind.UNKNOWN


async def test_result_too_large_for_a_frame_is_a_limit() -> None:
    """A value that cannot fit in one frame is answered `limit`, and the server goes on."""

    def huge(request: Request) -> str:
        return "x" * (16 << 20) if request.tool == "huge" else "ok"

    async with serving(huge) as (server, child):
        await child.send("1", tool="huge")
        await child.send("2")
        got = await child.recv_n(2)
    assert got["1"].kind is Kind.LIMIT
    assert got["2"].value == "ok"
    assert server.statistics().bytes == 2


async def test_duplicate_inflight_id_is_a_protocol_error() -> None:
    """A second call with the id of one still in flight breaks the channel."""

    async def slow(request: Request) -> str:
        await anyio.sleep(30)
        return ""

    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), slow)
    child = RawChild(FdChannel(down[0], up[1]))
    try:
        await child.send("same")
        await child.send("same")
        with anyio.fail_after(10), pytest.raises(RemoteProtocolError, match="already in flight"):
            await server.serve()
        assert await child.recv() is None  # the parent closed the channel
    finally:
        child.channel.close()


#: A Request whose ``deadline_ms`` is 10**400: past Go's int64, and past a float's range.
_HUGE_DEADLINE = b'{"v":1,"id":"2","tool":"t","args":"","deadline_ms":1' + b"0" * 400 + b"}"


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"\x00\x00\x00\x05hello", RemoteProtocolError),
        (b"\xff\xff\xff\xff", RemoteProtocolError),
        (b"\x00\x00\x00\x00", RemoteProtocolError),
        (encode_frame(b'{"v":2,"id":"1","tool":"t","args":""}'), VersionMismatch),
        (encode_frame(b'{"v":1,"id":"","tool":"t","args":""}'), RemoteProtocolError),
        (encode_frame(b'{"x":' + b"[" * 1000 + b"]" * 1000 + b"}"), RemoteProtocolError),
        (encode_frame(b'{"v":[' + b"[" * 10_000 + b"]" * 10_000 + b"]}"), RemoteProtocolError),
        (encode_frame(b'{"v":2,"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}"), VersionMismatch),
        (
            encode_frame(
                b'{"v":1,"id":"1","tool":"t","args":"","deadline_ms":1' + b"0" * 400 + b"}"
            ),
            RemoteProtocolError,
        ),
    ],
    ids=[
        "not-json",
        "huge-prefix",
        "empty-frame",
        "version",
        "empty-id",
        "deep-nesting",
        "deep-version-value",
        "deep-after-other-version",
        "deadline-past-int64",
    ],
)
async def test_garbage_from_the_child_ends_serve_with_a_typed_error(
    payload: bytes, error: type[Exception]
) -> None:
    """The server raises a RemoteProtocolError (never anything else) and closes the channel."""
    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), echo)
    child = RawChild(FdChannel(down[0], up[1]))
    try:
        await child.send_raw(payload)
        with anyio.fail_after(10), pytest.raises(error):
            await server.serve()
        assert await child.recv() is None
    finally:
        child.channel.close()


async def test_a_deadline_past_int64_leaves_no_handler_unawaited() -> None:
    """A call with an int64-overflowing ``deadline_ms`` after a call being handled: serve
    raises RemoteProtocolError (not OverflowError), and every handler coroutine it was
    given is awaited or closed (the suite turns "never awaited" warnings into errors)."""
    made = 0

    async def slow(request: Request) -> str:
        await anyio.sleep(30)
        return ""

    def handler(request: Request) -> Awaitable[str]:
        nonlocal made
        made += 1
        return slow(request)

    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), handler, CallLimits(max_call_deadline=5.0))
    child = RawChild(FdChannel(down[0], up[1]))
    try:
        await child.send("1", deadline_ms=2**63 - 1)  # the largest int64: legal, clamped
        await child.send_raw(encode_frame(_HUGE_DEADLINE))
        with anyio.fail_after(10), pytest.raises(RemoteProtocolError):
            await server.serve()
        assert made == 1
        with anyio.fail_after(10):
            assert await child.recv() is None
    finally:
        child.channel.close()


async def test_eof_from_the_child_ends_serve_and_cancels_handlers() -> None:
    """When the child closes its end, serve returns and handlers still running are cancelled."""
    started = anyio.Event()
    cancelled = anyio.Event()

    async def slow(request: Request) -> str:
        started.set()
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return ""

    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), slow)
    child = RawChild(FdChannel(down[0], up[1]))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            await child.send("1")
            await started.wait()
            child.channel.close()
        assert cancelled.is_set()


async def test_cancelling_serve_closes_the_channel() -> None:
    """Cancelling the parent's task closes the pipe: the child reads EOF (invariant 5)."""
    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), echo)
    child = RawChild(FdChannel(down[0], up[1]))
    try:
        with anyio.move_on_after(0.1):
            await server.serve()
        with anyio.fail_after(10):
            assert await child.recv() is None
    finally:
        child.channel.close()


async def test_serve_runs_once() -> None:
    """A server serves one channel once."""
    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), echo)
    os.close(up[1])
    os.close(down[0])
    with anyio.fail_after(WAIT):
        await server.serve()
    with anyio.fail_after(WAIT), pytest.raises(RuntimeError):
        await server.serve()


@pytest.mark.parametrize(
    "bad", [{"max_inflight": 0}, {"max_calls": -1}, {"max_call_deadline": 0.0}]
)
def test_bad_limits_are_refused_when_converted(bad: dict[str, Any]) -> None:
    """Limits out of the protocol's range are refused when taken from outside (converted)."""
    with pytest.raises(msgspec.ValidationError, match=next(iter(bad))):
        msgspec.convert(bad, CallLimits)


def _start_message() -> Start:
    return Start(v=VERSION, program="p", bindings=(), budget=StartBudget(), result_id="r1")


async def test_starter_returns_on_timeout_when_the_child_is_silent() -> None:
    """Starter.start raises TimeoutError and closes the channel when no Result comes."""
    down, up = os.pipe(), os.pipe()
    starter = Starter(FdChannel(up[0], down[1]))
    try:
        with anyio.fail_after(10), pytest.raises(TimeoutError):
            await starter.start(_start_message(), timeout=0.2)
        decoder = FrameDecoder()
        decoder.receive_data(read(down[0], 1 << 16))
        assert isinstance(decoder.next_frame(), bytes)  # the Start was sent
        assert read(down[0], 1) == b""  # then the channel was closed: EOF
    finally:
        os.close(down[0])
        os.close(up[1])


async def test_starter_returns_on_cancel_when_the_child_is_silent() -> None:
    """Cancelling Starter.start closes the channel, even with no timeout."""
    down, up = os.pipe(), os.pipe()
    starter = Starter(FdChannel(up[0], down[1]))
    try:
        with anyio.move_on_after(0.2) as scope:
            await starter.start(_start_message())
        assert scope.cancelled_caught
        read(down[0], 1 << 16)
        assert read(down[0], 1) == b""
    finally:
        os.close(down[0])
        os.close(up[1])


async def test_starter_refuses_a_result_for_another_run() -> None:
    """A Result whose result_id is not the Start's is a protocol error."""
    down, up = os.pipe(), os.pipe()
    starter = Starter(FdChannel(up[0], down[1]))
    try:
        os.write(up[1], frame_message(Result(v=VERSION, result_id="other", ok=True)))
        with anyio.fail_after(10), pytest.raises(RemoteProtocolError, match="other"):
            await starter.start(_start_message())
    finally:
        os.close(down[0])
        os.close(up[1])


async def test_starter_reports_a_child_that_closes_without_result() -> None:
    """EOF on the start channel before a Result is ChannelClosed."""
    down, up = os.pipe(), os.pipe()
    starter = Starter(FdChannel(up[0], down[1]))
    os.close(up[1])
    try:
        with anyio.fail_after(10), pytest.raises(ChannelClosed):
            await starter.start(_start_message())
    finally:
        os.close(down[0])


async def test_starter_fails_on_a_deeply_nested_result() -> None:
    """Nesting no decoder can follow fails Starter.start with RemoteProtocolError at once
    (not RecursionError, and not a wait for a Result that will never come)."""
    down, up = os.pipe(), os.pipe()
    starter = Starter(FdChannel(up[0], down[1]))
    try:
        os.write(up[1], encode_frame(b'{"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}"))
        with anyio.fail_after(10), pytest.raises(RemoteProtocolError):
            await starter.start(_start_message())
    finally:
        os.close(down[0])
        os.close(up[1])
