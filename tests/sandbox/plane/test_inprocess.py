"""The in-process executor and the tool model: definitions, claims, errors, closing."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

import sandbox
from protocol import Kind
from sandbox import ToolError, plane

from .tools import Counted

pytestmark = pytest.mark.anyio


def search(query: str, limit: int = 3, tags: list[str] | None = None) -> list[str]:
    """Search the index.

    More detail for people."""
    return [f"{query}-{i}" for i in range(limit)]


async def test_function_tool_definition_comes_from_the_signature() -> None:
    t = sandbox.Tool(search, annotations=plane.Annotations(read_only=True))
    info = t.info
    assert info.name == "search"
    assert info.description.startswith("Search the index.")
    schema = info.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {"type": "string"}
    assert schema["properties"]["limit"]["default"] == 3
    assert info.read_only
    assert (info.factual, info.replayable) == (False, False)


async def test_function_tool_checks_input_before_running() -> None:
    ran: list[Any] = []

    def f(n: int) -> int:
        ran.append(n)
        return n * 2

    ex = plane.InProcess([sandbox.Tool(f)])
    ok = await ex.call(plane.Call(tool="f", arguments={"n": 21}))
    assert (ok.data, ok.text, ok.is_error) == (42, "42", False)
    for bad in ({"n": "x"}, {}, {"n": 1, "extra": 2}):
        r = await ex.call(plane.Call(tool="f", arguments=bad))
        assert r.is_error
        assert r.kind is Kind.INVALID
    assert ran == [21]


async def test_a_tool_that_raises_is_an_error_result_not_an_exception() -> None:
    async def boom() -> None:
        raise RuntimeError("disk on fire")

    ex = plane.InProcess([sandbox.Tool(boom)])
    r = await ex.call(plane.Call(tool="boom"))
    assert r.is_error
    assert r.kind is Kind.RAISED
    assert "disk on fire" in r.text


async def test_unknown_tool_and_closed_executor_are_typed_errors() -> None:
    t = Counted()
    ex = plane.InProcess([t])
    with pytest.raises(plane.errors.UnknownTool):
        await ex.call(plane.Call(tool="nope"))
    with pytest.raises(plane.errors.UnknownTool):
        await ex.facts(plane.Call(tool="nope"))
    await ex.aclose()
    await ex.aclose()
    assert t.closed == 1, "closed once, however often aclose is called"
    with pytest.raises(plane.errors.ExecutorClosed):
        await ex.call(plane.Call(tool="touch", arguments={"path": "a"}))


async def test_duplicate_names_and_non_tools_are_refused() -> None:
    with pytest.raises(plane.errors.DuplicateTool):
        plane.InProcess([Counted("x"), Counted("x")])
    assert issubclass(plane.errors.DuplicateTool, ToolError)
    with pytest.raises(TypeError):
        plane.InProcess([object()])  # type: ignore[list-item]


async def test_a_flag_promising_a_claim_the_tool_cannot_make_is_refused() -> None:
    class Liar:
        info = plane.ToolInfo(name="liar", factual=True)

        async def call(self, arguments: dict[str, Any], context: plane.CallContext) -> Any:
            return plane.Result()

    with pytest.raises(TypeError, match="facts"):
        plane.InProcess([Liar()])


async def test_build_closes_what_it_made_when_anything_fails() -> None:
    made: list[Counted] = []

    def make(name: str) -> Any:
        def maker() -> Counted:
            made.append(Counted(name))
            return made[-1]

        return maker

    def broken() -> Counted:
        raise OSError("cannot open the index")

    with pytest.raises(OSError, match="index"):
        await plane.InProcess.build([make("a"), make("b"), broken])
    assert [t.closed for t in made] == [1, 1]

    made.clear()
    with pytest.raises(plane.errors.DuplicateTool):
        await plane.InProcess.build([make("a"), make("a")])
    assert [t.closed for t in made] == [1, 1]

    async def several() -> list[Counted]:
        return [Counted("c"), Counted("d")]

    ex = await plane.InProcess.build([make("a"), several])
    assert [t.name for t in await ex.tools()] == ["a", "c", "d"]
    await ex.aclose()


async def test_claims_are_read_in_the_executor() -> None:
    ex = plane.InProcess(
        [
            sandbox.Tool(search),
            sandbox.Tool(
                search,
                name="fetch",
                facts=lambda query, limit, tags: {"network": [f"{query}.example"]},
                replay=plane.Replay.YES,
            ),
        ]
    )
    assert await ex.facts(plane.Call(tool="search", arguments={"query": "q"})) == plane.Facts()
    assert await ex.replay(plane.Call(tool="search", arguments={"query": "q"})) is (
        plane.Replay.UNKNOWN
    )
    got = await ex.facts(plane.Call(tool="fetch", arguments={"query": "q"}))
    assert got.network == ("q.example",)
    assert await ex.replay(plane.Call(tool="fetch", arguments={"query": "q"})) is plane.Replay.YES


async def test_a_failed_or_slow_reading_is_an_error_never_a_guess() -> None:
    ex = plane.InProcess([Counted("bad", fail=True), Counted("slow", slow=5)], facts_timeout=0.2)
    with pytest.raises(plane.errors.FactsUnavailable, match="cannot be read"):
        await ex.facts(plane.Call(tool="bad", arguments={"path": "a"}))
    with anyio.fail_after(3):
        with pytest.raises(plane.errors.FactsUnavailable, match="longer than"):
            await ex.facts(plane.Call(tool="slow", arguments={"path": "a"}))
    # Replay has a safe answer for "cannot tell": unknown.
    assert await ex.replay(plane.Call(tool="bad", arguments={"path": "a"})) is (
        plane.Replay.UNKNOWN
    )


async def test_the_descriptor_defaults_to_this_host() -> None:
    ex = plane.InProcess([])
    assert ex.descriptor.kind == "host"
    assert ex.descriptor.root
    mine = plane.Descriptor(kind="sandbox", ref="box", root="/work")
    assert plane.InProcess([], descriptor=mine).descriptor == mine


async def test_model_types_round_trip_as_json() -> None:
    info = sandbox.Tool(search, annotations=plane.Annotations(read_only=True)).info
    assert msgspec.json.decode(msgspec.json.encode(info), type=plane.ToolInfo) == info
    facts = plane.Facts(reads=("/a",), network=("*",), processes=True)
    assert msgspec.json.decode(msgspec.json.encode(facts), type=plane.Facts) == facts
