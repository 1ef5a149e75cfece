"""A run's calls are answered as they come, with no serving task until one needs it.

Inline tools (``Tool(fn, inline=True)``: answered in the host's event loop) are answered
by ``Server.pump`` from the run's own wait; a call to a tool that needs a task of its own
(any other, and every ``async`` one) starts ``Server.serve``, which answers it and every
call after. Either way the program gets every answer, in any mix and order.
"""

from __future__ import annotations

import pytest

import sandbox
from protocol import Server
from sandbox import Level, Tool
from tests.host import child_levels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]


def echo(value: object) -> object:
    return value


async def later(value: object) -> object:
    return ["later", value]


INLINE = Tool(echo, inline=True)
OWN_TASK = Tool(later)


@pytest.fixture
def serves(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a run's Server.serve started."""
    started: list[int] = []
    real = Server.serve

    async def counting(self: Server) -> None:
        started.append(1)
        await real(self)

    monkeypatch.setattr(Server, "serve", counting)
    return started


@pytest.mark.parametrize("level", child_levels())
async def test_inline_calls_start_no_serving_task(level: Level, serves: list[int]) -> None:
    program = (
        "import asyncio\n"
        "first = [await host.echo(i) for i in range(3)]\n"
        "gathered = await asyncio.gather(*(host.echo(i) for i in range(20)))\n"
        "[first, sum(gathered)]"
    )
    result = await sandbox.run(program, tools=[INLINE], level=level)
    assert result.ok, result.error
    assert result.value == [[0, 1, 2], sum(range(20))]
    assert result.calls == 23
    assert serves == []


@pytest.mark.parametrize("level", child_levels())
async def test_a_call_that_needs_a_task_starts_serving_and_every_call_is_answered(
    level: Level, serves: list[int]
) -> None:
    program = (
        "import asyncio\n"
        "a = await host.echo(1)\n"
        "b = await host.later(2)\n"
        "c = await asyncio.gather(host.echo(3), host.later(4), host.echo(5))\n"
        "[a, b, c]"
    )
    result = await sandbox.run(program, tools=[INLINE, OWN_TASK], level=level)
    assert result.ok, result.error
    assert result.value == [1, ["later", 2], [3, ["later", 4], 5]]
    assert result.calls == 5
    assert serves == [1]
