"""The sandbox as a tool: the host's level and budget, and every host call through the policy."""

from __future__ import annotations

import json

import pytest

import sandbox
from protocol import MAX_FRAME_BYTES, Kind
from sandbox import Budget, plane
from tests.host import needs_confinement

pytestmark = pytest.mark.anyio


async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


def remove(path: str) -> str:
    """Remove a file."""
    raise AssertionError("the policy must have refused this before it ran")


def executor(level: str = "process", budget: Budget | None = None) -> plane.InProcess:
    return plane.InProcess(
        [
            sandbox.Tool(
                lookup,
                annotations=plane.Annotations(read_only=True),
                facts=lambda key: plane.Facts(reads=(f"/db/{key}",)),
            ),
            sandbox.Tool(remove, facts=lambda path: plane.Facts(writes=(path,))),
            plane.ProgramTool(level=level, budget=budget or Budget(wall_clock=20, max_calls=10)),
        ]
    )


PROGRAM = """
import asyncio
got = await asyncio.gather(*(host.lookup(key=k) for k in "abc"))
try:
    await host.remove(path="/etc/passwd")
    removed = "yes"
except Exception as exc:
    removed = f"{exc.kind}: {exc}"
[got, removed]
"""


def no_writes(c: plane.Call, info: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
    if c.tool == "run_program":
        return plane.ALLOW
    return plane.deny("writes are not allowed") if facts.writes else plane.ALLOW


async def test_a_program_cannot_reach_a_tool_the_policy_refuses() -> None:
    seen: list[tuple[str, plane.Facts]] = []

    def policy(c: plane.Call, info: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        seen.append((c.tool, facts))
        return no_writes(c, info, facts)

    ex = executor()
    s = await plane.Set.bind(ex, policy=policy)
    r = await s.call(plane.Call(tool="run_program", arguments={"code": PROGRAM}))
    assert not r.is_error, r.text
    value = r.data["value"]
    assert value[0] == ["A", "B", "C"]
    assert value[1].startswith("denied:")
    assert "writes are not allowed" in value[1]
    assert r.data["calls"] == 4, "refused calls count against the run's budget too"
    tools = sorted(t for t, _ in seen)
    assert tools == ["lookup", "lookup", "lookup", "remove", "run_program"]
    assert ("remove", plane.Facts(writes=("/etc/passwd",))) in seen
    await ex.aclose()


async def test_the_budget_and_level_are_the_hosts_never_the_callers() -> None:
    ex = executor(budget=Budget(wall_clock=20, max_calls=2))
    s = await plane.Set.bind(ex)
    program = "import asyncio\nawait asyncio.gather(*(host.lookup(key=k) for k in 'abc'))"
    r = await s.call(plane.Call(tool="run_program", arguments={"code": program}))
    assert r.is_error
    assert r.kind is Kind.LIMIT
    for bad in (
        {"code": "1", "budget": {"max_calls": 1000}},
        {"code": "1", "level": "in_process"},
        {"program": "1"},
        {"code": 5},
    ):
        # Through a session, a call whose claim cannot be read is blocked; straight to
        # the executor, it is an invalid call. Either way nothing runs.
        with pytest.raises(plane.errors.FactsUnavailable):
            await s.call(plane.Call(tool="run_program", arguments=bad))
        r = await ex.call(plane.Call(tool="run_program", arguments=bad))
        assert r.is_error
        assert r.kind is Kind.INVALID
    await ex.aclose()


async def test_without_a_session_the_executor_runs_a_programs_calls_itself() -> None:
    ex = executor()
    r = await ex.call(plane.Call(tool="run_program", arguments={"code": "await host.lookup('z')"}))
    assert (r.is_error, r.data["value"]) == (False, "Z")
    info = {t.name: t for t in await ex.tools()}["run_program"]
    assert "host.lookup(key)" in info.description
    assert "host.remove(path)" in info.description
    assert info.factual
    await ex.aclose()


async def test_a_program_call_says_what_it_would_touch_at_its_level() -> None:
    process = executor("process")
    facts = await process.facts(plane.Call(tool="run_program", arguments={"code": "1"}))
    assert facts.level == "process"
    assert (facts.reads, facts.writes, facts.network) == (("/",), ("/",), ("*",))
    assert facts.tools == ("lookup", "remove")
    assert await process.replay(plane.Call(tool="run_program", arguments={"code": "1"})) is (
        plane.Replay.UNKNOWN
    )
    confined = executor("confined")
    facts = await confined.facts(plane.Call(tool="run_program", arguments={"code": "1"}))
    assert (facts.level, facts.reads, facts.writes, facts.network) == ("confined", (), (), ())
    with pytest.raises(plane.errors.FactsUnavailable):
        await confined.facts(plane.Call(tool="run_program", arguments={"nope": 1}))


@needs_confinement()
async def test_a_confined_program_calls_host_tools_through_the_policy() -> None:
    ex = executor("confined")
    s = await plane.Set.bind(ex, policy=no_writes)
    r = await s.call(plane.Call(tool="run_program", arguments={"code": PROGRAM}))
    assert not r.is_error, r.text
    assert json.loads(r.text)["value"][0] == ["A", "B", "C"]
    assert r.data["value"][1].startswith("denied:")
    await ex.aclose()


async def test_a_program_too_large_for_a_frame_is_an_error_that_names_the_limit() -> None:
    """Not an exception group from inside the run: the tool's result says what is wrong."""
    ex = executor()
    big = "#" + "a" * MAX_FRAME_BYTES
    r = await ex.call(plane.Call(tool="run_program", arguments={"code": big}))
    await ex.aclose()
    assert (r.is_error, r.kind) == (True, Kind.INVALID)
    assert "16 MiB" in r.text
