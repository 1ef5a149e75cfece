"""How the host reads a run's Result: what is in the pipe is read at once, without a trip
through the event loop for each piece, and the loop still gets a turn every few pieces (a
child that writes without pause must not starve the wall clock or cancellation)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

import sandbox
from protocol import VERSION, FdChannel, Pumped, Result, Start, StartBudget, frame_message
from sandbox._engine import _process

pytestmark = pytest.mark.anyio

RESULT_ID = "r" * 32


def _no_pump() -> Pumped:
    raise AssertionError("no call was made: the call channel is not pumped")


def pumping(started: list[str]) -> Any:
    """A pump that says it ran in ``started``, and finds the channel ended."""

    def pump() -> Pumped:
        started.append("pump")
        return Pumped.ENDED

    return pump


#: The pieces the test's channel hands out: a child that writes in small pieces, each
#: there before the host reads it.
PIECE = 4096


class _CountingChannel(FdChannel):
    """An FdChannel whose reads hand out what is in the pipe in pieces of :data:`PIECE`
    bytes, and count them: into bytes (:meth:`receive_nowait`) or into the decoder's
    buffer for a large frame (:meth:`receive_into_nowait`)."""

    reads = 0
    pending = b""

    def receive_nowait(self, max_bytes: int = 1 << 16) -> bytes | None:
        return self._piece(max_bytes, PIECE)

    def receive_into_nowait(self, view: memoryview) -> int | None:
        data = self._piece(len(view), min(PIECE, len(view)))
        if data is None:
            return None
        view[: len(data)] = data
        return len(data)

    def _piece(self, max_bytes: int, most: int) -> bytes | None:
        cls = type(self)
        if not cls.pending:
            cls.pending = super().receive_nowait(max_bytes) or b""
            if not cls.pending:
                return None
        data, cls.pending = cls.pending[:most], cls.pending[most:]
        cls.reads += 1
        return data


@contextmanager
def _pipes(count: int) -> Iterator[list[tuple[int, int]]]:
    with ExitStack() as stack:
        made = []
        for _ in range(count):
            r, w = os.pipe()
            stack.callback(os.close, w)
            stack.callback(os.close, r)
            made.append((r, w))
        yield made


async def test_a_result_already_in_the_pipe_is_read_whole_and_the_loop_gets_turns() -> None:
    value = '"' + "v" * (900 << 10) + '"'
    frame = frame_message(
        Result(v=VERSION, result_id=RESULT_ID, ok=True, value=value, calls=0, bytes=0)
    )
    # The channel is the host's end of two pipes: up (the child's Result) and down.
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    channel = _CountingChannel(up_r, down_w)
    with _pipes(3) as ((call_r, _), (out_r, _), (err_r, _)), ExitStack() as stack:
        stack.callback(channel.close)
        stack.callback(os.close, up_w)
        stack.callback(os.close, down_r)
        # The whole Result waits in the pipe before the host sends its Start, as when
        # a child writes faster than the host reads: every read finds data.
        fcntl.fcntl(up_w, fcntl.F_SETPIPE_SZ, 1 << 20)
        assert os.write(up_w, frame) == len(frame)
        _CountingChannel.reads = 0

        async def serve() -> None:
            raise AssertionError("nothing but the Result was written")

        run = SimpleNamespace(
            start_ch=channel,
            child=SimpleNamespace(
                pipes=SimpleNamespace(start_fds=(up_r, down_w), call_fds=(call_r, -1))
            ),
            stdout=SimpleNamespace(fd=out_r, drain=serve),
            stderr=SimpleNamespace(fd=err_r, drain=serve),
        )
        start = Start(
            v=VERSION, program="1", bindings=(), budget=StartBudget(), result_id=RESULT_ID
        )
        turns: list[int] = []  # the reads done when the other task ran
        done = False

        async def other_task() -> None:
            while not done:
                turns.append(_CountingChannel.reads)
                await anyio.lowlevel.checkpoint()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(other_task)
                await anyio.lowlevel.checkpoint()
                result = await _process._Run._await_result(
                    cast(Any, run), start, tg, serve, _no_pump
                )
                done = True
    assert result.value == value
    reads = _CountingChannel.reads
    assert reads == -(-len(frame) // PIECE)
    between = [n for n in turns if 0 < n < reads]
    # Every eighth read gives the loop a turn; without them the other task would see
    # only "before" and "after". (Half of them at least: trio runs the tasks of a turn in
    # an order of its own choosing, and the last turns may come after the Result.)
    assert len(between) >= (reads - 1) // 8 // 2 >= 10, (reads, turns)


@pytest.mark.parametrize("level", ["in_process", "process"])
async def test_a_value_of_several_mib_comes_back_whole(level: str) -> None:
    size = 5 << 20
    result = await sandbox.run(f"'ab' * {size // 2}", level=level)
    assert result.ok, result.error
    assert result.value == "ab" * (size // 2)


async def test_a_call_channel_ended_with_the_result_starts_no_task() -> None:
    """A runner closes its call channel right after its Result: when the host wakes to
    both at once, it reads the Result and starts no task for the call channel's end (a
    task started only to be cancelled)."""
    frame = frame_message(
        Result(v=VERSION, result_id=RESULT_ID, ok=True, value="1", calls=0, bytes=0)
    )
    # The channel is the host's end of two pipes: up (the child's Result) and down.
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    channel = FdChannel(up_r, down_w)
    with _pipes(2) as ((out_r, _), (err_r, _)), ExitStack() as stack:
        stack.callback(channel.close)
        stack.callback(os.close, up_w)
        stack.callback(os.close, down_r)
        call_r, call_w = os.pipe()
        stack.callback(os.close, call_r)
        open_ends = {call_w}

        @stack.callback
        def _close_open_ends() -> None:
            for fd in open_ends:
                os.close(fd)

        started: list[str] = []

        def task(name: str) -> Any:
            async def run() -> None:
                started.append(name)

            return run

        run = SimpleNamespace(
            start_ch=channel,
            child=SimpleNamespace(
                pipes=SimpleNamespace(start_fds=(up_r, down_w), call_fds=(call_r, call_w))
            ),
            stdout=SimpleNamespace(fd=out_r, drain=task("stdout")),
            stderr=SimpleNamespace(fd=err_r, drain=task("stderr")),
            tasks=False,
        )
        start = Start(
            v=VERSION, program="1", bindings=(), budget=StartBudget(), result_id=RESULT_ID
        )

        async def child() -> None:
            # Once the host waits for the run's descriptors: the Result, then the call
            # channel's end, both before the host wakes.
            await anyio.wait_all_tasks_blocked()
            assert os.write(up_w, frame) == len(frame)
            os.close(call_w)  # the call channel's end
            open_ends.clear()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(child)
                result = await _process._Run._await_result(
                    cast(Any, run), start, tg, task("calls"), pumping(started)
                )
        assert os.read(down_r, 1 << 16)  # the Start went down
    assert result.value == "1"
    assert started == []
    assert not run.tasks
