"""FdChannel: closing wakes waiters, and a closed descriptor's number is safe to reuse."""

from __future__ import annotations

import os

import anyio
import pytest

from protocol import FdChannel

pytestmark = pytest.mark.anyio


async def test_close_wakes_a_waiting_reader() -> None:
    r, w = os.pipe()
    channel = FdChannel(r, r)
    woke: list[str] = []

    async def reader() -> None:
        try:
            await channel.receive()
        except anyio.ClosedResourceError:
            woke.append("closed")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.sleep(0.05)
            channel.close()
    assert woke == ["closed"]
    os.close(w)


async def test_a_reused_descriptor_number_is_not_lost_to_the_old_waiter() -> None:
    """A channel closed under a waiting reader, then a new pipe that would take the same
    number at once: a reader of the new pipe must wake when it has data.

    (On asyncio the old waiter unregisters its number only when it next runs; had the
    number been freed at once, that would unregister the new pipe's reader.)
    """
    for _ in range(20):
        r, w = os.pipe()
        old = FdChannel(r, r)

        async def old_reader(channel: FdChannel = old) -> None:
            try:
                await channel.receive()
            except anyio.ClosedResourceError:
                pass

        async def write_soon(fd: int) -> None:
            await anyio.sleep(0.01)
            os.write(fd, b"x")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(old_reader)
                await anyio.sleep(0.01)
                old.close()  # wakes old_reader, which has not run yet
                r2, w2 = os.pipe()  # the lowest free number: r's, if it was freed
                new = FdChannel(r2, r2)
                tg.start_soon(write_soon, w2)
                # Registers its wait before old_reader runs again.
                assert await new.receive() == b"x"
        new.close()
        os.close(w)
        os.close(w2)


async def test_receive_nowait_reads_what_is_there_and_never_waits() -> None:
    r, w = os.pipe()
    channel = FdChannel(r, r)
    try:
        assert channel.receive_nowait() is None  # nothing yet: no wait, no error
        os.write(w, b"abc")
        assert channel.receive_nowait() == b"abc"
        assert channel.receive_nowait() is None
        os.write(w, b"d" * 10)
        os.close(w)
        assert channel.receive_nowait(4) == b"d" * 10  # at least a chunk is asked for
        assert channel.receive_nowait() == b""  # the peer's EOF
    finally:
        channel.close()
    with pytest.raises(anyio.ClosedResourceError):
        channel.receive_nowait()
