"""The parent's start-channel role: send one Start, wait for its Result."""

from __future__ import annotations

from typing import final

import anyio

from ._channel import FdChannel
from ._frames import Signal
from ._messages import Result, Start
from ._start import StarterCore

__all__ = ["Starter"]


@final
class Starter:
    """Start one run over a start channel and collect its Result.

    Args:
        channel: the start channel; it carries one run. The starter closes it if
            :meth:`start` fails, times out or is cancelled. After a Result it is left
            open: closing it is how the caller tells the child it is done with the run
            (our runner lingers until then, holding what the program left running where
            the caller can find it).
    """

    def __init__(self, channel: FdChannel) -> None:
        self._channel = channel
        self._core = StarterCore()

    # The timeout is part of the contract (DESIGN: start always returns on timeout, closing
    # the channel), not a stand-in for the caller's own cancel scope.
    async def start(self, start: Start, *, timeout: float | None = None) -> Result:  # noqa: ASYNC109
        """Send ``start`` and wait for the child's Result.

        Always returns or raises within ``timeout``, even when the child is alive and
        silent: on timeout or cancellation the channel is closed, which unblocks the wait
        here and tells the child to stop (it reads EOF).

        Raises:
            TimeoutError: no Result within ``timeout`` seconds.
            RemoteProtocolError: the child sent garbage or a Result for another run.
            ChannelClosed: the child closed the channel without a Result.
            LocalProtocolError: this starter was used already, or ``start`` is too large.
            anyio.BrokenResourceError: the channel failed.
        """
        core = self._core
        channel = self._channel
        try:
            frame = core.send_start(start)
            with anyio.fail_after(timeout):
                await channel.send_all(frame)
                while True:
                    item = core.next_result()
                    if item is Signal.NEED_DATA:
                        await channel.feed(core)
                        continue
                    assert isinstance(item, Result)
                    return item
        except BaseException:
            channel.close()
            raise
