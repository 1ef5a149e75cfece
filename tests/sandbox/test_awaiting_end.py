"""A program that awaits ends as it would under ``asyncio.run``, however its child was made.

A child forked ahead for programs that await has its event loop made before the Start,
and a runner leaves the loop's teardown to its own end when there is nothing to tear
down. Neither may show: what a program leaves on its loop (a task, an async generator, a
callback, the executor's threads) is torn down before the Result, as ``asyncio.run``
does, its output in the result; the loop is the thread's current one; and a program that
does not await, in a child made for one that does, finds the descriptors it would find
anywhere else. At each spawn mode, pools warmed for awaiting programs first.
"""

from __future__ import annotations

import anyio
import pytest

import sandbox
from sandbox import Level, Tool
from tests.host import child_levels

from .conftest import runs_pool

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]


async def echo(value: object) -> object:
    return value


ECHO = Tool(echo)

#: A program that does not await, and what it shows of its descriptors.
DESCRIPTORS = "import os\nsorted(os.listdir('/proc/self/fd'))"


async def _warm_the_pool_for_awaiting(level: Level) -> None:
    """Where runs come from a pool: awaiting runs at ``level``, then the pool full again,
    so that its children of that level are made for programs that await."""
    pool = runs_pool()
    if pool is None:
        return
    for _ in range(3):
        result = await sandbox.run("await host.echo(1)", tools=[ECHO], level=level)
        assert result.ok, result.error
    assert await anyio.to_thread.run_sync(pool.wait_full, 60)


#: program -> (value, stdout): each leaves its loop something that asyncio.run's
#: teardown deals with, and says so on stdout.
LEAVING = {
    "a task": (
        "import asyncio\n"
        "async def waiting():\n"
        "    try:\n"
        "        await asyncio.sleep(60)\n"
        "    finally:\n"
        "        print('cancelled')\n"
        "task = asyncio.ensure_future(waiting())\n"
        "await asyncio.sleep(0)\n"
        "1",
        (1, "cancelled\n"),
    ),
    "an async generator": (
        "async def numbers():\n"
        "    try:\n"
        "        yield 2\n"
        "    finally:\n"
        "        print('closed')\n"
        "numbers = numbers()\n"
        "await numbers.__anext__()",
        (2, "closed\n"),
    ),
    "a callback ready": (
        "import asyncio\n"
        "loop = asyncio.get_running_loop()\n"
        "await asyncio.sleep(0)\n"
        "loop.call_soon(loop.call_soon, print, 'called')\n"
        "3",
        (3, "called\n"),
    ),
    "the executor's thread": (
        "import asyncio, time\n"
        "loop = asyncio.get_running_loop()\n"
        "await asyncio.sleep(0)\n"
        "loop.run_in_executor(None, lambda: (time.sleep(0.2), print('finished')))\n"
        "4",
        (4, "finished\n"),
    ),
}


@pytest.mark.parametrize("level", child_levels())
@pytest.mark.parametrize("case", LEAVING.values(), ids=LEAVING.keys())
async def test_what_a_program_leaves_on_its_loop_is_torn_down_before_the_result(
    level: Level, case: tuple[str, tuple[int, str]]
) -> None:
    await _warm_the_pool_for_awaiting(level)
    program, (value, stdout) = case
    result = await sandbox.run(program, tools=[ECHO], level=level)
    assert result.ok, result.error
    assert (result.value, result.stdout) == (value, stdout)


@pytest.mark.parametrize("level", child_levels())
async def test_the_loop_is_the_threads_current_one(level: Level) -> None:
    await _warm_the_pool_for_awaiting(level)
    program = (
        "import asyncio\n"
        "value = await host.echo(5)\n"
        "loop = asyncio.get_running_loop()\n"
        "[value, asyncio.get_event_loop() is loop,"
        " asyncio.get_event_loop_policy().get_event_loop() is loop]"
    )
    result = await sandbox.run(program, tools=[ECHO], level=level)
    assert result.ok, result.error
    assert result.value == [5, True, True]


@pytest.mark.parametrize("level", child_levels())
async def test_a_program_that_does_not_await_sees_no_loop_made_for_one_that_does(
    level: Level,
) -> None:
    """The same descriptors before the pool is warmed for awaiting programs and after
    (at the other spawn modes, the same test twice); and an awaiting program finds the
    three of its loop (its selector and self-pipe) on top."""
    before = await sandbox.run(DESCRIPTORS, tools=[ECHO], level=level)
    await _warm_the_pool_for_awaiting(level)
    after = await sandbox.run(DESCRIPTORS, tools=[ECHO], level=level)
    assert before.ok, before.error
    assert after.ok, after.error
    assert after.value == before.value
    awaiting = await sandbox.run(
        "import asyncio, os\nawait asyncio.sleep(0)\nsorted(os.listdir('/proc/self/fd'))",
        tools=[ECHO],
        level=level,
    )
    assert awaiting.ok, awaiting.error
    assert isinstance(awaiting.value, list)
    assert isinstance(before.value, list)
    assert set(before.value) < set(awaiting.value)
    assert len(awaiting.value) == len(before.value) + 3
