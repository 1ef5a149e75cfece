"""The four roles end to end: the parent here, the child a real process, over OS pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable

import anyio
import pytest

from protocol import (
    VERSION,
    CallError,
    CallLimits,
    ChannelClosed,
    Client,
    Kind,
    Request,
    Result,
    Runner,
    Server,
    Start,
    StartBudget,
    Starter,
    TruncatedFrame,
    frame_message,
)

from ..helpers import ROOT, PeerProcess, spawn_peer

pytestmark = pytest.mark.anyio


def _start(program: str = "") -> Start:
    return Start(v=VERSION, program=program, bindings=(), budget=StartBudget(), result_id="run-1")


async def _run(peer: PeerProcess, server: Server, program: str = "") -> Result:
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(30):
            result = await Starter(peer.start).start(_start(program))
    return result


def echo(request: Request) -> str:
    return request.args


async def test_blocking_calls_round_trip() -> None:
    """A child's blocking calls reach the handler and their values come back in order."""
    with spawn_peer("echo", "20") as peer:
        server = Server(peer.call, echo)
        result = await _run(peer, server)
    assert result.ok
    assert result.value == ",".join(json.dumps({"i": k}) for k in range(20))
    assert server.statistics().calls == 20
    assert result.calls == 20


async def test_gathered_calls_are_concurrent_and_matched_by_id() -> None:
    """64 calls under asyncio.gather are 64 calls in flight; each gets its own answer."""
    gate = anyio.Event()
    seen = 0

    async def slow_echo(request: Request) -> str:
        nonlocal seen
        seen += 1
        if seen == 64:
            gate.set()
        await gate.wait()
        # Answer in reverse order of arrival: the child must match by id, not by order.
        await anyio.sleep(0.001 * (64 - int(json.loads(request.args)["i"])))
        return request.args

    with spawn_peer("gather", "64") as peer:
        server = Server(peer.call, slow_echo)
        result = await _run(peer, server)
    assert result.ok
    assert result.value == ",".join(json.dumps({"i": k}) for k in range(64))
    stats = server.statistics()
    assert stats.peak_inflight == 64
    assert stats.calls == 64


async def test_failures_and_limits_reach_the_program_typed() -> None:
    """Denied, limit, deadline and unknown failures reach the program as CallError kinds."""

    def handler(request: Request) -> str | Awaitable[str]:
        if request.tool == "deny":
            raise CallError(Kind.DENIED, "no")
        if request.tool == "slow":

            async def slow() -> str:
                await anyio.sleep(30)
                return "late"

            return slow()
        if request.tool == "boom":
            raise RuntimeError("boom")
        return "ok"

    calls = [["deny", "", 0], ["slow", "", 200], ["boom", "", 0], ["fine", "", 0], ["x", "", 0]]
    with spawn_peer("calls-from-start") as peer:
        server = Server(peer.call, handler, CallLimits(max_calls=4))
        result = await _run(peer, server, json.dumps(calls))
    assert result.ok
    outcomes = json.loads(result.value)
    assert outcomes[0] == [False, "denied"]
    assert outcomes[1] == [False, "transient"]
    assert outcomes[2] == [False, "unknown"]
    # Four calls fit the quota; which of the last two was refused depends on arrival.
    assert sorted(map(tuple, outcomes[3:])) == [(False, "limit"), (True, "ok")]


async def test_a_child_that_lies_about_its_counts_changes_nothing() -> None:
    """The parent's counts are the authority; the Result's counts are only reported."""
    with spawn_peer("lie") as peer:
        server = Server(peer.call, echo, CallLimits(max_calls=5))
        result = await _run(peer, server)
    assert (result.calls, result.bytes) == (1000, 10**9)
    assert (server.statistics().calls, server.statistics().bytes) == (1, 1)


async def test_cancelling_the_server_fails_the_childs_call_in_flight() -> None:
    """Parent cancel -> pipe closed -> the child's call in flight fails `canceled`."""
    entered = anyio.Event()

    async def block(request: Request) -> str:
        entered.set()
        await anyio.sleep(60)
        return "never"

    with spawn_peer("wait-eof") as peer:
        server = Server(peer.call, block)
        async with anyio.create_task_group() as tg:
            serve_scope = anyio.CancelScope()

            async def serve() -> None:
                with serve_scope:
                    await server.serve()

            tg.start_soon(serve)

            async def cancel_when_entered() -> None:
                await entered.wait()
                serve_scope.cancel()

            tg.start_soon(cancel_when_entered)
            with anyio.fail_after(30):
                result = await Starter(peer.start).start(_start())
    assert result.value == "canceled"


async def test_silent_child_does_not_hang_the_starter() -> None:
    """A child alive and silent: Starter.start times out and the child is then killed."""
    with spawn_peer("silent") as peer:
        with anyio.fail_after(30), pytest.raises(TimeoutError):
            await Starter(peer.start).start(_start(), timeout=0.3)
        assert peer.process.poll() is None  # alive: the cleanup kills it


def test_runner_await_start_times_out_on_a_silent_parent() -> None:
    """Runner.await_start returns within its timeout and closes the channel."""
    down, up = os.pipe(), os.pipe()
    runner = Runner(down[0], up[1])
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            runner.await_start(timeout=0.2)
        assert time.monotonic() - t0 < 10
        assert os.read(up[0], 1) == b""  # our end was closed
        with pytest.raises(ChannelClosed):
            runner.await_start(timeout=0.2)
    finally:
        os.close(down[1])
        os.close(up[0])


def test_runner_reports_a_parent_that_closes_before_start() -> None:
    """EOF before Start is ChannelClosed; a truncated Start is TruncatedFrame."""
    down, up = os.pipe(), os.pipe()
    os.close(down[1])
    runner = Runner(down[0], up[1])
    with pytest.raises(ChannelClosed):
        runner.await_start(timeout=5)
    runner.close()
    os.close(up[0])

    down, up = os.pipe(), os.pipe()
    os.write(down[1], frame_message(_start())[:-3])
    os.close(down[1])
    runner = Runner(down[0], up[1])
    with pytest.raises(TruncatedFrame):
        runner.await_start(timeout=5)
    runner.close()
    os.close(up[0])


def test_client_fails_every_pending_call_at_eof() -> None:
    """When the parent closes the call channel, calls in flight and later calls fail."""
    down, up = os.pipe(), os.pipe()
    client = Client(down[0], up[1])
    os.close(down[1])  # the parent goes away without answering
    try:
        with pytest.raises(CallError) as info:
            client.call("t", "")
        assert info.value.kind is Kind.CANCELED
        with pytest.raises(CallError):
            client.call("t", "")
    finally:
        client.close()
        os.close(up[0])


def test_protocol_import_in_a_child_loads_no_async_framework() -> None:
    """The child-side import of protocol loads only the standard library and msgspec."""
    code = (
        "import sys, json\n"
        "base = set(sys.modules)\n"
        "import msgspec\n"
        "with_msgspec = set(sys.modules)\n"
        "import protocol\n"
        "from protocol import Client, Runner\n"
        "extra = set(sys.modules) - with_msgspec\n"
        "print(json.dumps(sorted(extra)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{code}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    extra = json.loads(out.stdout)
    third_party = sorted(
        m
        for m in extra
        if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "protocol"
    )
    assert third_party == []
    assert not {"anyio", "trio", "asyncio", "sniffio"} & {m.split(".")[0] for m in extra}
