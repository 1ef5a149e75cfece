"""One type for a function as a tool: a run's host tool and an executor's tool alike."""

from __future__ import annotations

from typing import Any

import pytest

import sandbox
from sandbox import Kind, Level, Tool, plane

pytestmark = pytest.mark.anyio

calls: list[Any] = []


def scale(values: list[int], factor: int = 2) -> list[int]:
    """Multiply each value."""
    calls.append((values, factor))
    return [v * factor for v in values]


async def test_a_host_tool_checks_its_arguments_before_it_runs() -> None:
    """A call whose arguments are not what the function's annotations say fails `invalid`
    in the program, and the function never runs."""
    calls.clear()
    program = (
        "from protocol import CallError\n"
        "try:\n    host.scale(values=['a'], factor=3)\n"
        "except CallError as exc:\n    out = [exc.kind.value, str(exc)]\n"
        "out.append(host.scale(values=[1, 2]))\n"
        "out\n"
    )
    result = await sandbox.run(program, tools=[scale], level=Level.IN_PROCESS)
    assert result.ok, result.error
    kind, message, value = result.value
    assert kind == "invalid"
    assert "scale(values, factor=2)" in message
    assert value == [2, 4]
    assert calls == [([1, 2], 2)]


async def test_the_same_tool_in_an_executor_with_its_claims() -> None:
    """The host tool type is the executor's tool type: schema, annotations and claims."""
    t = Tool(
        scale,
        annotations=plane.Annotations(read_only=True),
        facts=lambda values, factor=2: plane.Facts(reads=(f"/values/{len(values)}",)),
        replay=plane.Replay.YES,
    )
    info = t.info
    assert (info.name, info.description) == ("scale", "Multiply each value.")
    assert info.input_schema["required"] == ["values"]
    assert info.input_schema["properties"]["factor"] == {"type": "integer", "default": 2}
    assert (info.factual, info.replayable, info.annotations.read_only) == (True, True, True)
    executor = plane.InProcess([t])
    call = plane.Call(tool="scale", arguments={"values": [3]})
    assert (await executor.facts(call)).reads == ("/values/1",)
    assert await executor.replay(call) is plane.Replay.YES
    done = await executor.call(call, plane.CallContext())
    assert (done.is_error, done.data) == (False, [6])
    bad = await executor.call(
        plane.Call(tool="scale", arguments={"values": "x"}), plane.CallContext()
    )
    assert (bad.is_error, bad.kind) == (True, Kind.INVALID)
    await executor.aclose()


def test_annotations_that_do_not_resolve_take_any_value() -> None:
    """A tool whose annotations name what cannot be imported here still binds."""

    def f(x: NotImportedHere) -> int:  # type: ignore[name-defined]  # noqa: F821
        return 1

    assert Tool(f).info.input_schema["properties"] == {"x": {}}


def test_a_parameter_that_cannot_be_given_by_name_is_refused() -> None:
    def f(x: int, /) -> int:
        return x

    with pytest.raises(sandbox.ToolError, match="cannot be given by name"):
        Tool(f)
