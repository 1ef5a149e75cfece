"""FdChannel: closing wakes waiters, and a closed descriptor's number is safe to reuse."""

from __future__ import annotations

import os

import anyio
import pytest

from protocol import FdChannel, FrameDecoder, Signal, encode_frame
from protocol._pipesize import fit_pipe

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


class _Counted(FdChannel):
    """Counts its reads: into new bytes, and into a buffer it is given."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        super().__init__(read_fd, write_fd)
        self.reads: list[str] = []

    def receive_nowait(self, max_bytes: int = 1 << 16) -> bytes | None:
        data = super().receive_nowait(max_bytes)
        self.reads.append("bytes" if data is not None else "none")
        return data

    def receive_into_nowait(self, view: memoryview) -> int | None:
        n = super().receive_into_nowait(view)
        self.reads.append("into" if n is not None else "none")
        return n


@pytest.mark.parametrize("ready", [False, True])
async def test_a_large_frame_is_read_in_two_reads_into_the_decoders_buffer(ready: bool) -> None:
    """One read of the first chunk, which says the frame's size, then the rest at once
    into the decoder's buffer: not sixteen reads of 64 KiB, each a new ``bytes``."""
    payload = bytes(range(251)) * ((900 << 10) // 251)
    frame = encode_frame(payload)
    r, w = os.pipe()
    fit_pipe(w, len(frame))
    channel = _Counted(r, r)
    try:
        assert os.write(w, frame) == len(frame)
        decoder = FrameDecoder()
        with anyio.fail_after(5):
            while (got := decoder.next_frame()) is Signal.NEED_DATA:
                if ready:
                    assert await channel.feed_ready(decoder)
                else:
                    await channel.feed(decoder)
        assert got == payload
        assert channel.reads == ["bytes", "into"]
        assert not await channel.feed_ready(decoder)  # nothing more there: no wait
        os.close(w)
        w = -1
        await channel.feed(decoder)  # the peer's end
        assert decoder.next_frame() is Signal.CLOSED
    finally:
        channel.close()
        if w >= 0:
            os.close(w)
