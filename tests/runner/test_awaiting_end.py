"""A program that awaits, in the Python backend: its event loop, made ahead or not, and the
loop's teardown, which a runner leaves to its end only where it has nothing to do.

In this process (``as_main=False``, as the ``in_process`` level runs programs), so the
loops and descriptors the backend makes or closes can be looked at directly.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import pytest

from runner._backends import Outcome
from runner._backends.python import PythonBackend, _nothing_left, _run_awaiting

from .helpers import make_start


@pytest.fixture
def no_descriptor_left() -> Iterator[None]:
    """The test leaves this process the descriptors it found."""
    before = sorted(os.listdir("/proc/self/fd"))
    yield
    assert sorted(os.listdir("/proc/self/fd")) == before


def _value(ended: Outcome | bytes) -> object:
    assert isinstance(ended, bytes), ended
    return int(ended)


@pytest.mark.usefixtures("no_descriptor_left")
def test_a_program_that_awaits_runs_on_the_loop_made_ahead() -> None:
    """The loop ``ahead_of_run`` made is the program's running loop, and the thread's
    current one while it runs; torn down after (not a runner: no one else ends it)."""
    backend = PythonBackend(as_main=False)
    backend.ahead_of_run(awaits=True)
    made = backend._loop
    assert made is not None
    assert not made.is_closed()
    program = (
        "import asyncio\n"
        "await asyncio.sleep(0)\n"
        "loop = asyncio.get_running_loop()\n"
        "assert asyncio.get_event_loop_policy().get_event_loop() is loop\n"
        "id(loop)"
    )
    assert _value(backend.run_json(make_start(program), None)) == id(made)
    assert made.is_closed()
    assert backend._loop is None


@pytest.mark.usefixtures("no_descriptor_left")
@pytest.mark.parametrize(
    "program",
    ["import os\nlen(os.listdir('/proc/self/fd'))", "1 +", "host.nothing()"],
    ids=["does not await", "does not compile", "binds nothing"],
)
def test_a_loop_the_program_does_not_take_is_closed_before_it_starts(program: str) -> None:
    """A program that does not await never sees the loop made ahead (its descriptors are
    closed before its first line); one that never runs leaves it closed too."""
    plain = PythonBackend(as_main=False).run_json(make_start(program), None)
    backend = PythonBackend(as_main=False)
    backend.ahead_of_run(awaits=True)
    made = backend._loop
    assert made is not None
    assert backend.run_json(make_start(program), None) == plain
    assert made.is_closed()


def test_no_loop_ahead_for_a_program_not_expected_to_await() -> None:
    backend = PythonBackend(as_main=False)
    backend.ahead_of_run(awaits=False)
    assert backend._loop is None


@pytest.mark.usefixtures("no_descriptor_left")
def test_no_loop_ahead_without_descriptors_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    """No descriptor for the loop's selector: no loop ahead; the program makes its own."""

    def refuse() -> asyncio.AbstractEventLoop:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(asyncio, "new_event_loop", refuse)
    backend = PythonBackend(as_main=False)
    backend.ahead_of_run(awaits=True)
    assert backend._loop is None
    monkeypatch.undo()
    assert (
        _value(backend.run_json(make_start("import asyncio\nawait asyncio.sleep(0)\n3"), None)) == 3
    )


async def _nothing() -> None:
    await asyncio.sleep(0)


_kept: list[object] = []  # what a program keeps alive (an async generator)


async def _leaves_a_task() -> None:
    asyncio.get_running_loop().create_task(asyncio.sleep(60))


async def _leaves_an_async_generator() -> None:
    async def numbers() -> AsyncIterator[int]:
        yield 1

    generator = numbers()
    await anext(generator)
    _kept.append(generator)


async def _leaves_a_callback() -> None:
    # One scheduled now runs before the loop stops; one it schedules is left ready.
    loop = asyncio.get_running_loop()
    loop.call_soon(loop.call_soon, print, "late")


async def _leaves_a_timer() -> None:
    asyncio.get_running_loop().call_later(60, print, "later")


async def _leaves_an_executor() -> None:
    await asyncio.get_running_loop().run_in_executor(None, int)


#: Programs that leave their loop something to tear down.
LEAVING: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
    "a task": _leaves_a_task,
    "an async generator": _leaves_an_async_generator,
    "a callback ready": _leaves_a_callback,
    "a timer": _leaves_a_timer,
    "an executor": _leaves_an_executor,
}


@pytest.mark.parametrize("program", LEAVING.values(), ids=LEAVING.keys())
def test_anything_left_on_the_loop_is_something_to_tear_down(
    program: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    loop = asyncio.new_event_loop()
    runner = asyncio.Runner(loop_factory=lambda: loop)
    try:
        runner.run(_nothing())
        assert _nothing_left(loop)
        runner.run(program())
        assert not _nothing_left(loop)
    finally:
        runner.close()  # asyncio.run's teardown: cancels, closes, shuts down
        _kept.clear()


def test_a_loop_whose_state_cannot_be_read_is_torn_down(monkeypatch: pytest.MonkeyPatch) -> None:
    class Other:
        """Not asyncio's own loop: no ``_ready``, no ``_asyncgens``."""

    assert not _nothing_left(Other())  # type: ignore[arg-type]

    def broken(loop: object = None) -> set[object]:
        raise RuntimeError("asyncio, as a program left it")

    loop = asyncio.new_event_loop()
    try:
        monkeypatch.setattr(asyncio, "all_tasks", broken)
        assert not _nothing_left(loop)
    finally:
        loop.close()


@pytest.mark.usefixtures("no_descriptor_left")
@pytest.mark.parametrize("last", [True, False], ids=["a runner", "not a runner"])
def test_a_runner_leaves_a_teardown_with_nothing_to_do_to_its_end(last: bool) -> None:
    """Nothing left: a runner (``last``) leaves the loop open for its process's end; a
    host's thread (``in_process``) tears it down at once."""
    loop = asyncio.new_event_loop()
    try:
        _run_awaiting(_nothing(), loop, last=last)
        assert loop.is_closed() is not last
    finally:
        loop.close()
        asyncio.set_event_loop(None)


@pytest.mark.usefixtures("no_descriptor_left")
@pytest.mark.parametrize("program", LEAVING.values(), ids=LEAVING.keys())
def test_a_runner_tears_down_what_the_program_left_before_its_result(
    program: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Anything left: torn down as ``asyncio.run`` does, before ``_run_awaiting`` returns."""
    loop = asyncio.new_event_loop()
    try:
        _run_awaiting(program(), loop, last=True)
        assert loop.is_closed()
    finally:
        loop.close()
        asyncio.set_event_loop(None)
        _kept.clear()
