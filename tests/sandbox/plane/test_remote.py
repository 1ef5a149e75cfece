"""Remote over real MCP connections: the refusal table, reconnects, and the policy round trip."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from protocol import Kind
from sandbox import Budget, plane

from ...helpers import until
from .fake_server import fake_dialer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

HERE = Path(__file__).parent
SERVED = str(HERE / "served.py")
KEY = plane.CAPABILITY_KEY
#: The tools of served.py, and the program tool.
NAMES = ["pid", "mark", "lookup", "nodelay", "run_program"]


def serve_command(*extra: str, tools: str = SERVED) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sandbox",
        "serve",
        "--tools",
        tools,
        "--level",
        "process",
        *extra,
    ]


def flags(name: str, **kw: bool) -> dict[str, Any]:
    return {"name": name, **kw}


def listed(name: str, **kw: bool) -> dict[str, Any]:
    return {"name": name, "readOnly": kw.get("readOnly", False), "meta": {KEY: flags(name, **kw)}}


CAP: dict[str, Any] = {
    "version": 1,
    "descriptor": {"kind": "host", "ref": "fake", "root": "/"},
    "tools": [flags("a", facts=True), flags("b", readOnly=True)],
}
GOOD: dict[str, Any] = {
    "capability": CAP,
    "tools": [listed("a", facts=True), listed("b", readOnly=True)],
}


def variant(**change: Any) -> dict[str, Any]:
    return {**GOOD, **change}


REFUSALS = [
    pytest.param({"tools": GOOD["tools"]}, plane.errors.NoCapability, id="plain-mcp-server"),
    pytest.param(
        variant(capability={**CAP, "version": 2}), plane.errors.UnknownVersion, id="version-2"
    ),
    pytest.param(
        variant(capability={**CAP, "version": "1"}), plane.errors.UnknownVersion, id="version-str"
    ),
    pytest.param(
        variant(capability={**CAP, "ceilings": {"max_calls": -1}}),
        plane.errors.BadCapability,
        id="impossible-ceilings",
    ),
    pytest.param(
        variant(capability={**CAP, "tools": "a,b"}), plane.errors.BadCapability, id="undecodable"
    ),
    pytest.param(
        variant(capability={**CAP, "descriptor": 7}),
        plane.errors.BadCapability,
        id="bad-descriptor",
    ),
    pytest.param(
        variant(tools=[*GOOD["tools"], listed("c")]),
        plane.errors.ToolMismatch,
        id="listed-not-named",
    ),
    pytest.param(
        variant(capability={**CAP, "tools": [*CAP["tools"], flags("c")]}),
        plane.errors.ToolMismatch,
        id="named-not-listed",
    ),
    pytest.param(
        variant(capability={**CAP, "tools": [*CAP["tools"], flags("a", facts=True)]}),
        plane.errors.ToolNamedTwice,
        id="named-twice",
    ),
    pytest.param(
        variant(tools=[listed("a", facts=False), listed("b", readOnly=True)]),
        plane.errors.FactsMismatch,
        id="facts-flag-disagrees",
    ),
    pytest.param(
        variant(tools=[{"name": "a"}, listed("b", readOnly=True)]),
        plane.errors.FactsMismatch,
        id="listing-without-flags",
    ),
    pytest.param(
        variant(tools=[listed("a", facts=True), {**listed("b", readOnly=True), "readOnly": False}]),
        plane.errors.FactsMismatch,
        id="read-only-disagrees",
    ),
]


@pytest.mark.parametrize(("config", "error"), REFUSALS)
async def test_a_server_that_is_not_an_executor_is_refused(
    config: dict[str, Any], error: type[plane.errors.NotAnExecutor]
) -> None:
    warned: list[str] = []
    with pytest.raises(error):
        async with plane.Remote.connect(fake_dialer(config), warn=warned.append):
            pytest.fail("connected to a server that should have been refused")
    assert warned
    assert "refused" in warned[0]


async def test_the_corrected_server_connects() -> None:
    async with plane.Remote.connect(fake_dialer(GOOD)) as remote:
        tools = await remote.tools()
        assert [(t.name, t.factual, t.read_only) for t in tools] == [
            ("a", True, False),
            ("b", False, True),
        ]
        assert remote.descriptor == plane.Descriptor(kind="host", ref="fake", root="/")
        assert remote.server == ("fake", "0")


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(None, id="no-facts-method"),
        pytest.param({"readings": "none"}, id="undecodable"),
        pytest.param({"readings": []}, id="too-few"),
        pytest.param({"readings": [{"facts": {"reads": 5}}]}, id="bad-facts"),
    ],
)
async def test_a_reading_the_server_botches_blocks_the_call(reply: dict[str, Any] | None) -> None:
    config = GOOD if reply is None else {**GOOD, "facts": reply}
    async with plane.Remote.connect(fake_dialer(config)) as remote:
        with pytest.raises(plane.errors.FactsUnavailable):
            await remote.facts(plane.Call(tool="a"))
        s = await plane.Set.bind(remote)
        with pytest.raises(plane.errors.FactsUnavailable):
            await s.call(plane.Call(tool="a"))
        assert remote.connected


async def test_the_executor_order_is_the_capabilitys_not_the_listings() -> None:
    config = variant(tools=list(reversed(GOOD["tools"])))
    async with plane.Remote.connect(fake_dialer(config)) as remote:
        assert [t.name for t in await remote.tools()] == ["a", "b"]


async def test_a_server_that_cannot_be_started_is_unreachable() -> None:
    with pytest.raises(plane.errors.Unreachable):
        async with plane.Remote.connect(plane.stdio(["/nonexistent/sandbox-serve"])):
            pass
    with pytest.raises(plane.errors.Unreachable):
        async with plane.Remote.connect(plane.stdio([sys.executable, "-c", "pass"])):
            pass


# -- a real executor --


async def test_claims_and_calls_are_the_executors() -> None:
    async with plane.Remote.connect(plane.stdio(serve_command())) as remote:
        names = [t.name for t in await remote.tools()]
        assert names == NAMES
        lookup = plane.Call(tool="lookup", arguments={"key": "k"})
        assert await remote.facts(lookup) == plane.Facts(reads=("/db/k",))
        assert await remote.replay(lookup) is plane.Replay.YES
        assert await remote.facts(plane.Call(tool="pid")) == plane.Facts()
        r = await remote.call(lookup)
        assert (r.text, r.data, r.is_error) == ("K", "K", False)
        bad = await remote.call(plane.Call(tool="lookup", arguments={"key": 5}))
        assert bad.is_error
        assert bad.kind is Kind.INVALID
        with pytest.raises(plane.errors.UnknownTool):
            await remote.call(plane.Call(tool="nope"))
        with pytest.raises(plane.errors.FactsUnavailable):
            await remote.facts(plane.Call(tool="lookup", arguments={"wrong": 1}))
        got = await remote.batch_facts([lookup, plane.Call(tool="pid"), plane.Call(tool="x")])
        assert got[0] == plane.Facts(reads=("/db/k",))
        assert got[1] == plane.Facts()
        assert isinstance(got[2], plane.errors.UnknownTool)


@pytest.mark.slow
async def test_a_slow_reading_blocks_its_call_and_leaves_the_connection_up(
    tmp_path: Path,
) -> None:
    slow = plane.Call(tool="mark", arguments={"path": str(tmp_path / "t"), "seconds": 5})
    async with plane.Remote.connect(plane.stdio(serve_command()), facts_timeout=1) as remote:
        with anyio.fail_after(4), pytest.raises(plane.errors.FactsUnavailable, match="longer"):
            await remote.facts(slow)
        assert remote.connected
        assert (await remote.call(plane.Call(tool="lookup", arguments={"key": "a"}))).data == "A"
        # Through a session, the call is blocked and never runs.
        s = await plane.Set.bind(remote)
        with anyio.fail_after(4), pytest.raises(plane.errors.FactsUnavailable):
            await s.call(slow)
    assert not await anyio.Path(tmp_path / "t").exists()


@pytest.mark.slow
async def test_a_programs_host_calls_come_back_to_the_sessions_policy() -> None:
    seen: list[str] = []

    def policy(c: plane.Call, info: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        seen.append(c.tool)
        return plane.deny("no marks") if c.tool == "mark" else plane.ALLOW

    program = """
import asyncio
keys = await asyncio.gather(*(host.lookup(key=k) for k in "xyz"))
try:
    await host.mark(path="/tmp/never")
    marked = "marked"
except Exception as exc:
    marked = exc.kind
[keys, marked]
"""
    async with plane.Remote.connect(plane.stdio(serve_command())) as remote:
        s = await plane.Set.bind(remote, policy=policy)
        call = plane.Call(tool="run_program", arguments={"code": program}, id="c1")
        with s.pin_batch([call]):
            r = await s.call(call)
    assert not r.is_error, r.text
    assert r.data["value"] == [["X", "Y", "Z"], "denied"]
    assert sorted(seen) == ["lookup", "lookup", "lookup", "mark", "run_program"]
    assert not await anyio.Path("/tmp/never").exists()


@pytest.mark.slow
async def test_the_session_budget_is_capped_at_the_ceilings() -> None:
    program = "import asyncio\nawait asyncio.gather(*(host.lookup(key=str(i)) for i in range(4)))"
    call = plane.Call(tool="run_program", arguments={"code": program})
    command = serve_command("--max-calls", "3")
    # Asking for more than the ceiling gets the ceiling: 4 calls are over it.
    async with plane.Remote.connect(plane.stdio(command), budget=Budget(max_calls=100)) as remote:
        assert remote.capability.ceilings.max_calls == 3
        r = await remote.call(call)
        assert (r.is_error, r.kind) == (True, Kind.LIMIT)
    # Asking for less gets less.
    async with plane.Remote.connect(plane.stdio(command), budget=Budget(max_calls=2)) as remote:
        r = await remote.call(
            plane.Call(
                tool="run_program",
                arguments={
                    "code": "await host.lookup(key='a')\n"
                    "await host.lookup(key='b')\n"
                    "await host.lookup(key='c')"
                },
            )
        )
        assert (r.is_error, r.kind) == (True, Kind.LIMIT)
        r = await remote.call(
            plane.Call(tool="run_program", arguments={"code": "await host.lookup(key='a')"})
        )
        assert (r.is_error, r.data["value"]) == (False, "A")


@pytest.mark.slow
async def test_the_official_client_sees_the_capability_and_calls_the_tools() -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=serve_command()[1:], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        cap = (init.capabilities.experimental or {})[KEY]
        assert cap["version"] == 1
        assert [t["name"] for t in cap["tools"]] == NAMES
        listing = await session.list_tools()
        assert {t.name for t in listing.tools} == set(NAMES)
        r = await session.call_tool("lookup", {"key": "q"})
        assert r.structured_content == {"value": "Q"}
        # A plain client decides nothing: a program's host calls run in the executor.
        r = await session.call_tool("run_program", {"code": "await host.lookup(key='z')"})
        assert not r.is_error
        assert (r.structured_content or {})["value"] == "Z"


async def test_serve_tells_its_version_and_none_of_the_hosts_paths(tmp_path: Path) -> None:
    from importlib.metadata import version

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=serve_command()[1:], env=dict(os.environ), cwd=tmp_path
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
    assert init.server_info.version == version("sandbox-runtime")
    cap = (init.capabilities.experimental or {})[KEY]
    assert cap["descriptor"].get("root", "") == ""
    told = json.dumps(init.model_dump(mode="json"))
    for path in (str(tmp_path), str(HERE.parent.parent.parent), sys.prefix):
        assert path not in told


# -- losing the connection --


class Dials:
    """A dialer that starts ``sandbox serve`` anew each time, and can be changed."""

    def __init__(self, *extra: str) -> None:
        self.extra = extra
        self.env: dict[str, str] = dict(os.environ)
        self.broken = False
        self.count = 0

    def __call__(self) -> AbstractAsyncContextManager[Any]:
        self.count += 1
        if self.broken:
            return plane.stdio([sys.executable, "-c", "raise SystemExit(3)"])()
        return plane.stdio(serve_command(*self.extra), env=self.env)()


async def server_pid(remote: plane.Remote) -> int:
    r = await remote.call(plane.Call(tool="pid"))
    assert not r.is_error, r.text
    return int(r.text)


async def lose(remote: plane.Remote, pid: int) -> None:
    """Kill the server, and wait until the client has seen its connection end (a request
    sent before that would be a call in flight when the connection went)."""
    os.kill(pid, signal.SIGKILL)
    await until(lambda: not remote.connected)


@asynccontextmanager
async def dialed(dials: Dials, warned: list[str]) -> AsyncIterator[plane.Remote]:
    async with plane.Remote.dial(dials, warn=warned.append) as remote:
        yield remote


@pytest.mark.slow
async def test_a_lost_connection_is_dialed_again_before_the_next_request() -> None:
    dials, warned = Dials(), list[str]()
    async with dialed(dials, warned) as remote:
        first = await server_pid(remote)
        await lose(remote, first)
        second = await server_pid(remote)
        assert second != first
        assert dials.count == 2
        assert any("made again" in w for w in warned)
        assert await server_pid(remote) == second, "the new connection is kept"


@pytest.mark.slow
async def test_a_call_in_flight_when_the_connection_goes_is_never_sent_again(
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    dials, warned = Dials(), list[str]()
    async with dialed(dials, warned) as remote:
        first = await server_pid(remote)
        call = plane.Call(tool="mark", arguments={"path": str(marks), "seconds": 30})
        async with anyio.create_task_group() as tg:

            async def kill_when_marked() -> None:
                await until(marks.exists, 20)
                os.kill(first, signal.SIGKILL)

            tg.start_soon(kill_when_marked)
            with anyio.fail_after(20), pytest.raises(plane.errors.CallLost):
                await remote.call(call)
        await until(lambda: not remote.connected)
        # The next request dials again; the lost call was not replayed there.
        assert await server_pid(remote) != first
        assert marks.read_text().splitlines() == [str(first)]


@pytest.mark.slow
async def test_a_reading_cut_off_is_read_again_once_on_a_new_connection(tmp_path: Path) -> None:
    path = tmp_path / "target"
    readings = path.with_suffix(".readings")
    dials, warned = Dials(), list[str]()
    async with dialed(dials, warned) as remote:
        first = await server_pid(remote)
        call = plane.Call(tool="mark", arguments={"path": str(path), "seconds": 2})
        async with anyio.create_task_group() as tg:

            async def kill_when_reading() -> None:
                await until(readings.exists, 20)
                os.kill(first, signal.SIGKILL)

            tg.start_soon(kill_when_reading)
            with anyio.fail_after(30):
                facts = await remote.facts(call)
        assert facts == plane.Facts(writes=(str(path),))
        pids = readings.read_text().splitlines()
        assert len(pids) == 2
        assert pids[0] == str(first)
        assert pids[1] != str(first)
        assert dials.count == 2


@pytest.mark.slow
async def test_a_failed_dial_is_unreachable_and_the_next_request_dials_again() -> None:
    dials, warned = Dials(), list[str]()
    async with dialed(dials, warned) as remote:
        first = await server_pid(remote)
        await lose(remote, first)
        dials.broken = True
        with pytest.raises(plane.errors.Unreachable):
            await remote.call(plane.Call(tool="pid"))
        with pytest.raises(plane.errors.Unreachable):
            await remote.facts(plane.Call(tool="lookup", arguments={"key": "k"}))
        dials.broken = False
        assert await server_pid(remote) != first
        assert dials.count == 4


@pytest.mark.slow
async def test_a_server_restarted_as_another_executor_is_refused_for_good() -> None:
    dials, warned = Dials(), list[str]()
    async with dialed(dials, warned) as remote:
        first = await server_pid(remote)
        dials.env["SERVED_TOOLS"] = "other"
        await lose(remote, first)
        with pytest.raises(plane.errors.Changed):
            await remote.call(plane.Call(tool="pid"))
        assert dials.count == 2
        del dials.env["SERVED_TOOLS"]  # even if it came back as it was:
        for _ in range(3):
            with pytest.raises(plane.errors.Changed):
                await remote.facts(plane.Call(tool="lookup", arguments={"key": "k"}))
            with pytest.raises(plane.errors.Changed):
                await remote.call(plane.Call(tool="pid"))
        assert dials.count == 2, "a changed executor is not dialed again"
        assert any("changed" in w for w in warned)


@pytest.mark.slow
async def test_another_workspace_is_another_executor() -> None:
    dials, warned = Dials("--root", "/srv/one"), list[str]()
    async with dialed(dials, warned) as remote:
        assert remote.descriptor.root == "/srv/one"
        first = await server_pid(remote)
        dials.extra = ("--root", "/srv/two")
        await lose(remote, first)
        with pytest.raises(plane.errors.Changed, match="workspace"):
            await remote.call(plane.Call(tool="pid"))


@pytest.mark.slow
async def test_a_connection_made_by_connect_is_its_only_one() -> None:
    async with plane.Remote.connect(plane.stdio(serve_command())) as remote:
        first = await server_pid(remote)
        await lose(remote, first)
        with pytest.raises(plane.errors.Unreachable):
            await remote.call(plane.Call(tool="pid"))
        with pytest.raises(plane.errors.Unreachable):
            await remote.facts(plane.Call(tool="lookup", arguments={"key": "k"}))
        # A reading that cannot be made has a safe answer for replay: unknown.
        assert await remote.replay(plane.Call(tool="lookup", arguments={"key": "k"})) is (
            plane.Replay.UNKNOWN
        )
    with pytest.raises(plane.errors.ExecutorClosed):
        await remote.call(plane.Call(tool="pid"))
