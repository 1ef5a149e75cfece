"""``Server.pump``: the child's calls answered as they come, without a task, until one
needs a task of its own; then ``serve`` goes on from there. Over real OS pipes, the test
playing the child."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from protocol import (
    MAX_FRAME_BYTES,
    CallLimits,
    FdChannel,
    Kind,
    Pumped,
    RemoteProtocolError,
    Request,
    Server,
    frame_message,
)
from protocol._server import PUMP_READS

from .test_server import WAIT, RawChild, echo

pytestmark = pytest.mark.anyio


@contextmanager
def pair(handler: object = echo, **limits: object) -> Iterator[tuple[Server, RawChild]]:
    """A Server (not serving) on one end of two pipes, a RawChild on the other."""
    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), handler, CallLimits(**limits))  # type: ignore[arg-type]
    child = RawChild(FdChannel(down[0], up[1]))
    try:
        yield server, child
    finally:
        server.close()
        child.channel.close()


async def test_calls_answered_inline_are_answered_by_pump_alone() -> None:
    """Two calls sent: one pump answers both, and there is nothing more to do."""
    with pair() as (server, child):
        await child.send("1", args="a")
        await child.send("2", args="b")
        assert server.pump() is Pumped.WATCH
        answers = await child.recv_n(2)
        assert {i: r.value for i, r in answers.items()} == {"1": "a", "2": "b"}
        assert server.pump() is Pumped.WATCH  # nothing sent since: nothing done
        assert server.statistics().calls == 2


async def test_a_call_that_needs_a_task_hands_over_to_serve() -> None:
    """An awaitable answer: pump stops there (what came after is left unread) and serve,
    started then, runs the handler and answers the calls after it."""

    async def later(request: Request) -> str:
        await anyio.lowlevel.checkpoint()
        return "later " + request.args

    def handler(request: Request) -> str | Awaitable[str]:
        return later(request) if request.tool == "slow" else request.args

    with pair(handler) as (server, child):
        await child.send("1", args="a")
        await child.send("2", tool="slow", args="b")
        await child.send("3", args="c")
        assert server.pump() is Pumped.SERVE
        first = await child.recv()
        assert first is not None
        assert (first.id, first.value) == ("1", "a")
        assert server.pump() is Pumped.SERVE  # (serve's from now: nothing more read)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve)
                answers = await child.recv_n(2)
                tg.cancel_scope.cancel()
        assert {i: r.value for i, r in answers.items()} == {"2": "later b", "3": "c"}


async def test_pump_after_serve_started_is_refused() -> None:
    with pair() as (server, _):
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve)
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(RuntimeError):
                    server.pump()
                tg.cancel_scope.cancel()


async def test_a_handed_over_call_never_served_is_closed() -> None:
    """Serve never started after SERVE (the run ended first): ``close`` closes the
    handler's coroutine (the suite turns "never awaited" warnings into errors)."""

    async def slow(request: Request) -> str:
        await anyio.sleep(30)
        return ""

    with pair(slow) as (server, child):
        await child.send("1")
        assert server.pump() is Pumped.SERVE
        server.close()
        assert await child.recv() is None  # the child reads EOF


async def test_an_answer_the_pipe_will_not_take_hands_over_to_serves_writer() -> None:
    """An answer larger than the pipe holds: pump writes what fits and hands the rest to
    serve, whose writer finishes it once the child reads."""
    big = "x" * (MAX_FRAME_BYTES // 2)

    def handler(request: Request) -> str:
        return big

    with pair(handler) as (server, child):
        await child.send("1")
        assert server.pump() is Pumped.SERVE
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve)
                answer = await child.recv()
                tg.cancel_scope.cancel()
        assert answer is not None
        assert answer.value == big


async def test_a_child_that_keeps_writing_gets_a_bounded_pump(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls that come one read each (a child writing them one by one): a pump makes
    ``PUMP_READS`` reads at most, answering what they held, and the next goes on."""
    with pair() as (server, child):
        frames = [
            bytes(frame_message(Request(v=1, id=f"{i:02d}", tool="t", args=f"{i:02d}")))
            for i in range(40)
        ]
        size = len(frames[0])
        assert all(len(frame) == size for frame in frames)
        for frame in frames:
            await child.send_raw(frame)

        def one_call_a_read(channel: FdChannel, core: Any) -> bool:
            try:
                data = os.read(channel._read_fd, size)  # (a read of one call's frame)
            except BlockingIOError:
                return False
            core.receive_data(data)
            return True

        monkeypatch.setattr(FdChannel, "feed_nowait", one_call_a_read)
        answered = []
        while server.statistics().calls < 40:
            assert server.pump() is Pumped.WATCH
            answered.append(server.statistics().calls)
        assert answered == list(range(PUMP_READS, 41, PUMP_READS))
        answers = await child.recv_n(40)
        assert {i: r.value for i, r in answers.items()} == {
            f"{i:02d}": f"{i:02d}" for i in range(40)
        }


async def test_the_childs_end_of_the_channel_ends_the_pump() -> None:
    with pair() as (server, child):
        child.channel.close()
        assert server.pump() is Pumped.ENDED


async def test_an_answer_to_a_child_gone_is_a_broken_channel() -> None:
    """The child sent a call, then closed both its ends: its answer cannot be written."""
    with pair() as (server, child):
        await child.send("1", args="a")
        child.channel.close()
        with pytest.raises(anyio.BrokenResourceError):
            server.pump()


async def test_a_channel_closed_here_ends_the_pump() -> None:
    with pair() as (server, _):
        server.close()
        assert server.pump() is Pumped.ENDED


async def test_garbage_from_the_child_is_a_protocol_error() -> None:
    with pair() as (server, child):
        await child.send_raw(b"\x00\x00\x00\x05hello")
        with pytest.raises(RemoteProtocolError):
            server.pump()


async def test_limits_hold_when_pumped() -> None:
    """The budget is the server's, pumped or served: past ``max_calls``, ``limit``."""
    with pair(max_calls=1) as (server, child):
        await child.send("1", args="a")
        await child.send("2", args="b")
        assert server.pump() is Pumped.WATCH
        answers = await child.recv_n(2)
        assert answers["1"].value == "a"
        assert (answers["2"].ok, answers["2"].kind) == (False, Kind.LIMIT)
