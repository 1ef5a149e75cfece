"""Upstreams against an in-repo MCP server that misbehaves on demand (fake_upstream.py)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

import sandbox
from protocol import CallError, Kind
from sandbox import plane
from sandbox.upstream import UpstreamError, Upstreams, http, parse_mcp, read_only, stdio

from .servers import FAKE, eventually, free_port, http_server

pytestmark = pytest.mark.anyio


def fake(mode: str = "", log: Path | None = None, name: str = "fake") -> Any:
    env = {"FAKE_UPSTREAM": mode}
    if log is not None:
        env["FAKE_UPSTREAM_LOG"] = str(log)
    return stdio(FAKE, name=name, env=env, cwd=str(Path(__file__).resolve().parents[2]))


async def test_a_program_calls_upstream_tools_as_host_tools() -> None:
    """Each upstream tool is host.<server>__<tool>; its value is its structured content."""
    async with Upstreams([fake()]) as up:
        assert [t.name for t in up.tools()] == ["fake__echo", "fake__pid", "fake__fail"]
        r = await sandbox.run(
            "[await host.fake__echo('ab', times=2), await host.fake__echo(text='c')]",
            tools=up.host_tools(),
            level="in_process",
        )
    assert r.ok, r.error
    assert r.value == [{"result": "abab"}, {"result": "c"}]
    assert r.calls == 2


async def test_servers_are_ended_when_the_upstreams_close() -> None:
    """Leaving the context ends every stdio server it started, the restarted ones too."""
    async with Upstreams([fake(name="a"), fake(name="b")]) as up:
        pids = [(await up.call(f"{n}__pid", {}))[0]["result"] for n in ("a", "b")]
        assert all(psutil.pid_exists(p) for p in pids)
    await eventually(lambda: not any(_running(p) for p in pids))


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_arguments_against_the_input_schema_are_invalid_in_the_program() -> None:
    """Arguments that do not match the input schema fail ``invalid`` before they are sent."""
    async with Upstreams([fake()]) as up:
        r = await sandbox.run(
            "try:\n    await host.fake__echo(text=5)\nexcept Exception as e:\n"
            "    out = [e.kind, e.message]\nout",
            tools=up.host_tools(),
            level="in_process",
        )
    assert r.ok, r.error
    assert r.value[0] == "invalid"
    assert "input schema" in r.value[1]
    assert "'text'" in r.value[1]


async def test_an_error_result_raises_call_error_with_the_servers_text() -> None:
    """A result with isError raises CallError of kind ``raised``, with the server's text."""
    async with Upstreams([fake()]) as up:
        with pytest.raises(CallError) as caught:
            await up.call("fake__fail", {"reason": "nope"})
    assert caught.value.kind is Kind.RAISED
    assert caught.value.message.startswith("fake__fail: ")


#: Calls ``fake__echo``, then ``fake__pid``, whose refusal (if any) it keeps: ``[a, b]``.
ECHO_THEN_PID = (
    "a = await host.fake__echo(text='x')\n"
    "try:\n    await host.fake__pid()\n"
    "except Exception as e:\n    b = [e.kind, e.message]\n"
    "[a, b]"
)


async def test_the_policy_sees_each_call_and_denies() -> None:
    """The policy is asked with the call and the tool's definition; a refusal is ``denied``."""
    seen: list[tuple[str, dict[str, Any], bool]] = []

    def policy(call: plane.Call, tool: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        seen.append((call.tool, call.arguments, tool.annotations.read_only))
        if call.tool == "fake__pid":
            return plane.deny("no pids here")
        return plane.ALLOW

    async with Upstreams([fake()], policy=policy) as up:
        r = await sandbox.run(
            ECHO_THEN_PID,
            tools=up.host_tools(),
            level="in_process",
        )
    assert r.ok, r.error
    assert r.value == [{"result": "x"}, ["denied", "fake__pid: refused by policy: no pids here"]]
    assert seen == [("fake__echo", {"text": "x"}, False), ("fake__pid", {}, False)]


async def test_a_policy_can_ask_someone_and_wait_for_the_answer() -> None:
    """ "Ask" is a policy that awaits someone's answer (a person, another service): the
    program's call waits for it, and goes ahead or is refused as the answer says."""
    asked: list[str] = []
    send, receive = anyio.create_memory_object_stream[tuple[str, anyio.Event, list[bool]]]()

    async def ask(call: plane.Call, tool: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        answered, answer = anyio.Event(), [False]
        await send.send((call.tool, answered, answer))
        await answered.wait()
        return plane.ALLOW if answer[0] else plane.deny("the person said no")

    async def person() -> None:
        async for tool, answered, answer in receive:
            asked.append(tool)
            answer[0] = tool == "fake__echo"
            answered.set()

    with send, receive:
        async with Upstreams([fake()], policy=ask) as up, anyio.create_task_group() as tg:
            tg.start_soon(person)
            r = await sandbox.run(
                ECHO_THEN_PID,
                tools=up.host_tools(),
                level="in_process",
            )
            tg.cancel_scope.cancel()
    assert r.ok, r.error
    refused = "fake__pid: refused by policy: the person said no"
    assert r.value == [{"result": "x"}, ["denied", refused]]
    assert asked == ["fake__echo", "fake__pid"]


async def test_upstream_calls_count_against_max_calls() -> None:
    """Upstream calls are host calls: the run's max_calls ends the run at its limit."""
    async with Upstreams([fake()]) as up:
        r = await sandbox.run(
            "for i in range(5):\n    await host.fake__pid()\n",
            tools=up.host_tools(),
            budget=sandbox.Budget(max_calls=3),
        )
    assert not r.ok
    assert r.kind is Kind.LIMIT


async def test_upstream_calls_count_against_max_bytes_and_the_inflight_cap(
    tmp_path: Path,
) -> None:
    """Result bytes count against max_bytes; calls past the in-flight cap wait their turn
    (the child queues them), and each ends at its own deadline once sent."""
    async with Upstreams([fake("hang", tmp_path / "log")]) as up:
        big = await sandbox.run(
            "await host.fake__echo(text='x' * 1000)",
            tools=up.host_tools(),
            budget=sandbox.Budget(max_bytes=100),
        )
        capped = await sandbox.run(
            "import asyncio\n"
            "got = await asyncio.gather(*(host.fake__hang() for _ in range(4)),"
            " return_exceptions=True)\n"
            "sorted(e.kind for e in got)",
            tools=up.host_tools(),
            budget=sandbox.Budget(max_inflight=2, max_call_deadline=1.0),
        )
    assert not big.ok
    assert big.kind is Kind.LIMIT
    assert capped.ok, capped.error
    assert capped.value == ["transient"] * 4
    assert capped.calls == 4
    assert (tmp_path / "log").read_text().count("hanging") == 4


async def test_a_crash_mid_call_fails_it_and_the_next_call_reconnects(tmp_path: Path) -> None:
    """A server that dies during a call fails that call ``transient`` (it is not sent
    again); the next call starts the server again."""
    log = tmp_path / "log"
    async with Upstreams([fake("crash", log)]) as up:
        first = (await up.call("fake__pid", {}))[0]["result"]
        with pytest.raises(CallError) as caught:
            await up.call("fake__crash", {})
        assert caught.value.kind is Kind.TRANSIENT
        assert "lost during the call" in caught.value.message
        assert "not sent again" in caught.value.message
        second = (await up.call("fake__pid", {}))[0]["result"]
        assert up.connections("fake") == 2
    assert first != second
    assert log.read_text().count("crashing") == 1


async def test_a_call_that_never_answers_ends_at_its_deadline_and_is_cancelled_upstream(
    tmp_path: Path,
) -> None:
    """The per-call deadline ends a call the server never answers (``transient``), and the
    server is told to cancel it."""
    log = tmp_path / "log"
    async with Upstreams([fake("hang", log)]) as up:
        r = await sandbox.run(
            "try:\n    await host.fake__hang()\nexcept Exception as e:\n    out = e.kind\nout",
            tools=up.host_tools(),
            budget=sandbox.Budget(max_call_deadline=1.0),
        )
        assert r.ok, r.error
        assert r.value == "transient"
        await eventually(lambda: "cancelled" in log.read_text())
        # The connection survives the cancelled call.
        assert (await up.call("fake__echo", {"text": "still"}))[0] == {"result": "still"}
        assert up.connections("fake") == 1


async def test_cancelling_the_run_cancels_the_upstream_call(tmp_path: Path) -> None:
    """Cancelling the run cancels its upstream calls in flight."""
    log = tmp_path / "log"
    async with Upstreams([fake("hang", log)]) as up:
        with anyio.move_on_after(2):
            await sandbox.run("await host.fake__hang()", tools=up.host_tools())
        await eventually(lambda: "cancelled" in log.read_text())


async def test_a_changed_tool_list_is_listed_again() -> None:
    """notifications/tools/list_changed lists the tools again; the new one is callable."""
    async with Upstreams([fake("changing")]) as up:
        assert "fake__added" not in [t.name for t in up.tools()]
        await up.call("fake__grow", {})
        await eventually(lambda: "fake__added" in [t.name for t in up.tools()])
        r = await sandbox.run(
            "await host.fake__added(x=4)", tools=up.host_tools(), level="in_process"
        )
    assert r.ok, r.error
    assert r.value == {"result": 8}


async def test_an_upstream_that_cannot_start_is_named() -> None:
    """A server that cannot start is an UpstreamError naming it, with its standard error."""
    missing = stdio([sys.executable, "-c", "import sys; sys.exit('no such server here')"])
    with pytest.raises(UpstreamError) as caught:
        async with Upstreams([missing]):
            pass
    assert "could not be started" in str(caught.value)
    assert "no such server here" in str(caught.value)
    assert sys.executable in str(caught.value)


async def test_two_tools_bound_to_one_name_are_refused() -> None:
    """Tools whose names differ only in characters a binding cannot hold are refused,
    naming both, rather than one hiding the other."""
    with pytest.raises(UpstreamError) as caught:
        async with Upstreams([fake("clash")]):
            pass
    assert "'get-sum' and 'get_sum' are both bound as fake__get_sum" in str(caught.value)


async def test_an_upstream_that_does_not_answer_is_named() -> None:
    """A server that never answers initialize fails within the connect timeout, named."""
    silent = stdio([sys.executable, "-c", "import time; time.sleep(60)"], name="silent")
    with pytest.raises(UpstreamError) as caught:
        async with Upstreams([silent], connect_timeout=1.0):
            pass
    assert "upstream 'silent'" in str(caught.value)
    assert "did not answer within 1 s" in str(caught.value)


async def test_upstream_over_streamable_http() -> None:
    """An upstream served over streamable HTTP works as one over stdio does."""
    port = free_port()
    with http_server([*FAKE, "http", str(port)], port) as url:
        async with Upstreams([http(url, name="web")]) as up:
            r = await sandbox.run(
                "await host.web__echo(text='over http')",
                tools=up.host_tools(),
                level="in_process",
            )
    assert r.ok, r.error
    assert r.value == {"result": "over http"}


async def test_an_http_upstream_that_restarts_is_dialed_again() -> None:
    """An HTTP upstream that went away fails the call (``transient``) and is dialed again
    on a later call once it is back."""
    port = free_port()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(http_server([*FAKE, "http", str(port)], port))
        async with Upstreams([http(url, name="web")]) as up:
            first = (await up.call("web__pid", {}))[0]["result"]
            stack.close()  # the server ends
            with pytest.raises(CallError) as caught:
                await up.call("web__pid", {})
            assert caught.value.kind is Kind.TRANSIENT
            with http_server([*FAKE, "http", str(port)], port):
                second = (await up.call("web__pid", {}))[0]["result"]
            assert up.connections("web") >= 2
    assert first != second


async def test_upstream_tools_in_an_executor_are_decided_by_the_session() -> None:
    """As execution-plane tools, a program's upstream calls go through the session's
    policy (here: only read-only tools)."""
    async with Upstreams([fake()]) as up:
        executor = plane.InProcess([*up.tools(), plane.ProgramTool(level="process")])

        def policy(call: plane.Call, tool: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
            return plane.ALLOW if call.tool == "run_program" else read_only(call, tool, facts)

        session = await plane.Set.bind(executor, policy=policy)
        code = (
            "try:\n    await host.fake__echo(text='x')\n"
            "except Exception as e:\n    out = e.kind\nout"
        )
        r = await session.call(plane.Call(tool="run_program", arguments={"code": code}))
        await executor.aclose()
    assert not r.is_error, r.text
    assert r.data["value"] == "denied"


def test_mcp_option_text() -> None:
    """``--mcp`` and ``--mcp-http`` take an optional NAME= prefix."""
    assert parse_mcp("fs=npx -y server /tmp").command == ("npx", "-y", "server", "/tmp")
    assert parse_mcp("fs=npx -y server /tmp").name == "fs"
    assert parse_mcp("'my server' --flag").command == ("my server", "--flag")
    assert parse_mcp("http://h:1/mcp?a=b", over_http=True).url == "http://h:1/mcp?a=b"
    assert parse_mcp("web=http://h:1/mcp", over_http=True).name == "web"
    with pytest.raises(ValueError, match="identifier"):
        stdio("x", name="a__b")
    with pytest.raises(ValueError, match="http"):
        parse_mcp("ftp://x", over_http=True)
    with pytest.raises(ValueError, match="command"):
        parse_mcp("   ")
