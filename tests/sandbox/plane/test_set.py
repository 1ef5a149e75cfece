"""A session's Set: one reading per decision, one request per model response, the policy."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

import sandbox
from sandbox import plane

from .tools import Batching, Counted

pytestmark = pytest.mark.anyio


def call(path: str, tool: str = "touch", id: str = "") -> plane.Call:
    return plane.Call(tool=tool, arguments={"path": path}, id=id)


async def test_every_reading_within_a_pin_is_the_first_one() -> None:
    t = Counted()
    s = await plane.Set.bind(plane.InProcess([t]))
    c = call("a")
    with s.pin(c):
        first = await s.facts(c)
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(s.facts, c)
        assert await s.facts(c) == first
        with s.pin(c):  # a second pin of the same call shares the reading
            assert await s.facts(c) == first
        assert await s.facts(c) == first
    assert t.readings == 1
    assert first.writes == ("a#1",)
    # Outside any pin, each reading is a fresh look at the claim.
    assert (await s.facts(c)).writes == ("a#2",)
    assert (await s.facts(c)).writes == ("a#3",)


async def test_a_failed_reading_is_kept_and_blocks_every_time() -> None:
    t = Counted(fail=True)
    s = await plane.Set.bind(plane.InProcess([t]))
    c = call("a")
    with s.pin(c):
        for _ in range(3):
            with pytest.raises(plane.errors.FactsUnavailable):
                await s.facts(c)
        with pytest.raises(plane.errors.FactsUnavailable):
            await s.call(c)
    assert t.readings == 1
    assert t.calls == [], "a call whose facts cannot be read never runs"


async def test_a_tool_without_claims_reads_as_zero_and_pins_nothing() -> None:
    def plain(path: str) -> str:
        return path

    s = await plane.Set.bind(plane.InProcess([sandbox.Tool(plain)]))
    c = call("a", tool="plain")
    with s.pin(c):
        assert await s.facts(c) == plane.Facts()
    with pytest.raises(plane.errors.UnknownTool):
        await s.facts(call("a", tool="nope"))


async def test_a_batch_is_read_in_one_request_and_holds_its_readings() -> None:
    t = Counted()

    def size(obj: str) -> int:
        return len(obj)

    ex = Batching(plane.InProcess([t, sandbox.Tool(size)]))
    s = await plane.Set.bind(ex)
    calls = [call("a", id="1"), call("b", id="2"), call("c", id="3")]
    unclaimed = plane.Call(tool="size", arguments={"obj": "x"}, id="4")
    with s.pin_batch([*calls, unclaimed]):
        got = [await s.facts(c) for c in calls]
        again = [await s.facts(c) for c in reversed(calls)]
        assert await s.facts(unclaimed) == plane.Facts()
    assert ex.batches == [3], "one request for the response's claiming calls"
    assert ex.single == 0
    assert [f.writes for f in got] == [("a#1",), ("b#2",), ("c#3",)]
    assert list(reversed(again)) == got
    # A call outside the batch, or after it, is read afresh.
    assert (await s.facts(calls[0])).writes == ("a#4",)


async def test_without_a_batcher_a_batch_reads_each_call_once() -> None:
    t = Counted()
    s = await plane.Set.bind(plane.InProcess([t]))
    calls = [call("a", id="1"), call("b", id="2")]
    with s.pin_batch(calls):
        first = [await s.facts(c) for c in calls]
        assert [await s.facts(c) for c in calls] == first
    assert t.readings == 2


async def test_a_failed_batch_request_blocks_every_call_of_the_batch() -> None:
    t = Counted()
    ex = Batching(plane.InProcess([t]), fail=True)
    s = await plane.Set.bind(ex)
    calls = [call("a", id="1"), call("b", id="2")]
    with s.pin_batch(calls):
        for c in calls:
            with pytest.raises(plane.errors.FactsUnavailable):
                await s.facts(c)
            with pytest.raises(plane.errors.FactsUnavailable):
                await s.call(c)
    assert ex.batches == [2]
    assert t.calls == []


async def test_release_and_a_newer_batch_let_go_of_a_batch() -> None:
    t = Counted()
    s = await plane.Set.bind(plane.InProcess([t]))
    a, b = call("a", id="1"), call("b", id="2")
    with s.pin_batch([a]) as first:
        await s.facts(a)
        s.release()
        assert first.released
        # Released: the decision reads afresh rather than hold a reading open.
        assert (await s.facts(a)).writes == ("a#2",)
    with s.pin_batch([a]) as older:
        await s.facts(a)
        with s.pin_batch([b]):
            assert older.released, "a newer batch of the session lets go of the older one"
            with pytest.raises(plane.errors.FactsUnavailable, match="released"):
                await older.facts(a)
    with s.pin_batch([a]) as last:
        s.release_all()
        assert last.released


async def test_the_policy_decides_on_the_pinned_reading() -> None:
    t = Counted()
    seen: list[plane.Facts] = []

    def policy(c: plane.Call, info: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        seen.append(facts)
        return plane.deny("not there") if facts.writes[0].startswith("/etc") else plane.ALLOW

    s = await plane.Set.bind(plane.InProcess([t]), policy=policy)
    r = await s.call(call("/tmp/x"))
    assert r.text == "touched /tmp/x"
    with pytest.raises(plane.errors.Refused, match="not there"):
        await s.call(call("/etc/passwd"))
    assert [f.writes for f in seen] == [("/tmp/x#1",), ("/etc/passwd#2",)]
    assert t.calls == [{"path": "/tmp/x"}]


async def test_an_async_policy_and_a_bad_verdict() -> None:
    async def policy(c: plane.Call, info: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        await anyio.lowlevel.checkpoint()
        return plane.ALLOW if info.name == "touch" else plane.deny("")

    s = await plane.Set.bind(plane.InProcess([Counted()]), policy=policy)
    assert (await s.decide(call("a"))).allow

    def wrong(*args: object) -> bool:
        return True

    s2 = await plane.Set.bind(plane.InProcess([Counted()]), policy=wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Decision"):
        await s2.decide(call("a"))
