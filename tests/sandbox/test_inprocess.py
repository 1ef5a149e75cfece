"""The ``in_process`` level: the program in a worker thread, its calls over a pipe."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
import pytest

import protocol
import sandbox
from sandbox import Budget, Kind, Level

pytestmark = pytest.mark.anyio


def echo(n: int) -> int:
    return n


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def program_threads() -> int:
    """The threads that run in_process programs (other threads of the host come and go)."""
    return sum(1 for t in threading.enumerate() if t.name == "sandbox in_process")


async def test_runs_leave_no_descriptor_and_reuse_their_thread() -> None:
    """Runs in a row, with calls or without, leave no descriptor open when each returns,
    and the program thread of one run serves the next."""
    for _ in range(3):  # warm up: the worker thread, the event loop's own descriptors
        await sandbox.run("host.echo(0)", tools=[echo], level=Level.IN_PROCESS)
    fds = open_fds()
    threads = program_threads()
    for i in range(50):
        program = f"host.echo({i})" if i % 2 else f"{i}"
        result = await sandbox.run(program, tools=[echo], level=Level.IN_PROCESS)
        assert (result.ok, result.value) == (True, i), result.error
        assert open_fds() <= fds
    assert program_threads() <= threads  # (other threads of the host come and go)


async def test_cancelling_waits_for_the_program_to_finish(tmp_path: Path) -> None:
    """Cancelling the host's task fails the program's calls from then on (``canceled``)
    and returns only once the program has finished. (The host's task is cancelled by a
    tool the program calls, so that nothing depends on how fast a loaded machine runs
    the program.)"""
    done = tmp_path / "done"
    program = (
        "from protocol import CallError\n"
        "host.echo(1)\n"
        "try:\n    host.cancel_the_host()\nexcept CallError:\n    pass\n"
        "import time\n"
        "time.sleep(0.2)\n"
        "try:\n    host.echo(2)\nexcept CallError as exc:\n    kind = exc.kind.value\n"
        f"with open({str(done)!r}, 'w') as f:\n    f.write(kind)\n"
    )
    fds = open_fds()
    with anyio.CancelScope() as scope:

        async def cancel_the_host() -> None:
            scope.cancel()

        await sandbox.run(program, tools=[echo, cancel_the_host], level=Level.IN_PROCESS)
    assert scope.cancelled_caught
    assert done.read_text() == Kind.CANCELED.value
    assert open_fds() <= fds


async def test_many_runs_at_once() -> None:
    """Concurrent runs each get their own thread and their own calls."""
    results: dict[int, sandbox.RunResult] = {}

    async def one(i: int) -> None:
        program = f"import time\ntime.sleep(0.01)\nhost.echo({i})"
        results[i] = await sandbox.run(
            program, tools=[echo], budget=Budget(max_calls=1), level=Level.IN_PROCESS
        )

    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(one, i)
    assert {i: (r.ok, r.value, r.calls) for i, r in results.items()} == {
        i: (True, i, 1) for i in range(12)
    }


async def test_the_server_runs_only_for_a_program_that_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program that ends without a call leaves nothing in the pipe but its end: the run
    does not serve at all. One that calls, even without waiting for the answer, is
    served, and its call counted."""
    served: list[bool] = []
    serve = protocol.Server.serve

    async def counted(self: protocol.Server) -> None:
        served.append(True)
        await serve(self)

    monkeypatch.setattr(protocol.Server, "serve", counted)
    quiet = await sandbox.run("1", level=Level.IN_PROCESS)
    assert (quiet.value, served) == (1, [])
    calling = await sandbox.run("host.echo(2)", level=Level.IN_PROCESS, tools=[echo])
    assert (calling.value, calling.calls, served) == (2, 1, [True])
    fired = await sandbox.run(
        "import asyncio\nasyncio.ensure_future(host.echo(3))\nawait asyncio.sleep(0)\n4",
        level=Level.IN_PROCESS,
        tools=[echo],
    )
    assert fired.value == 4
    assert fired.calls == 1  # sent before the program ended: the host counted and served it
    assert served == [True, True]


async def test_a_run_without_tools_makes_no_call_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No tool, no call to serve: no pipes, server or client are made, and the program
    still gets a ``host`` that says it has no such tool, as it does beside other tools."""
    made: list[str] = []
    for name in ("Server", "Client"):
        real = getattr(protocol, name).__init__

        def counted(self: object, *args: object, _real: object = real, **kwargs: object) -> None:
            made.append(type(self).__name__)
            _real(self, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(getattr(protocol, name), "__init__", counted)
    fds = open_fds()
    alone = await sandbox.run("x = 6\nx * 7", level=Level.IN_PROCESS)
    assert (alone.ok, alone.value, alone.calls, made) == (True, 42, 0, [])
    missing = await sandbox.run("host.nope(1)", level=Level.IN_PROCESS)
    beside = await sandbox.run("host.nope(1)", level=Level.IN_PROCESS, tools=[echo])
    assert made == ["Server", "Client"]  # the run with a tool, only
    assert (missing.ok, missing.kind) == (beside.ok, beside.kind) == (False, Kind.RAISED)
    said = "AttributeError: host has no tool named 'nope' (available tools: {})"
    assert missing.error.splitlines()[-1] == said.format("none")
    assert beside.error.splitlines()[-1] == said.format("echo")
    assert open_fds() <= fds


async def test_cancelling_a_run_without_tools_waits_for_the_program(tmp_path: Path) -> None:
    done = tmp_path / "done"
    program = (
        f"import time\ntime.sleep(0.2)\nwith open({str(done)!r}, 'w') as f:\n    f.write('ended')\n"
    )
    await sandbox.run("1", level=Level.IN_PROCESS)  # the worker thread and the loop's fds
    fds = open_fds()
    with anyio.move_on_after(0.05) as scope:
        await sandbox.run(program, level=Level.IN_PROCESS)
    assert scope.cancelled_caught
    assert done.read_text() == "ended"
    assert open_fds() <= fds
