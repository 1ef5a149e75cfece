"""The parent's byte transport: a lean anyio adapter over raw file descriptors.

Stock stream APIs cost 2-7x a raw pipe per call on this kind of machine (see PERF-NOTES):
every ``send_all`` and lock acquisition is a checkpoint, a trip through the event loop.
This adapter reads and writes the descriptors directly and only involves the event loop
when the kernel says "would block": ``os.read`` first, ``anyio.wait_readable`` only on
EAGAIN; ``os.write`` first, ``anyio.wait_writable`` only when the pipe is full.

Before writing more than its pipe holds, the channel grows the pipe to fit (up to 1 MiB:
:mod:`protocol._pipesize`), so a large frame crosses in one wake-up of the peer.

The descriptors are made non-blocking. Reading and writing may be separate descriptors (a
pipe pair) or the same one (a socket). Closing notifies any task waiting on them
(``anyio.notify_closing``), so a blocked reader wakes with ``ClosedResourceError``.

A descriptor a task is waiting on is not freed at once when the channel closes: its file
is (the peer sees EOF at once), but the number stays taken, by ``/dev/null``, until the
waiting task has left its wait. On asyncio the woken task unregisters the number only when
it next runs; were the number reused meanwhile (a new pipe of another run), that late
clean-up would unregister the new descriptor's reader and leave its task waiting forever.
"""

from __future__ import annotations

import errno
import os
from typing import Protocol

import anyio
import anyio.lowlevel

from ._pipesize import DEFAULT_PIPE_BYTES, fit_pipe

__all__ = ["FdChannel", "Receiver"]

_READ_CHUNK = 1 << 16
_MAX_READ_CHUNK = 1 << 20
# Consecutive reads that found data before the reader yields to the event loop once: a
# peer that writes without pause must not starve handlers, timers and cancellation.
_READS_PER_CHECKPOINT = 8


class Receiver(Protocol):
    """What :meth:`FdChannel.feed` reads into: a protocol core (its frame decoder)."""

    def receive_data(self, data: bytes) -> None: ...  # pragma: no cover
    def receive_buffer(self) -> memoryview | None: ...  # pragma: no cover
    def received_into(self, nbytes: int) -> None: ...  # pragma: no cover


class FdChannel:
    """One end of a channel: a descriptor to read from and one to write to.

    Args:
        read_fd: the descriptor the peer's bytes arrive on.
        write_fd: the descriptor our bytes leave by (may equal ``read_fd``).

    The channel owns the descriptors: :meth:`close` closes them.
    """

    __slots__ = (
        "_closed",
        "_holds",
        "_read_fd",
        "_reserved",
        "_streak",
        "_waiting",
        "_write_fd",
    )

    def __init__(self, read_fd: int, write_fd: int) -> None:
        os.set_blocking(read_fd, False)
        if write_fd != read_fd:
            os.set_blocking(write_fd, False)
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._closed = False
        self._streak = 0
        self._waiting: set[int] = set()  # descriptors a task waits on now
        self._reserved: set[int] = set()  # closed, their numbers held until the wait ends
        self._holds = DEFAULT_PIPE_BYTES  # what the write pipe holds, as far as we know

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    async def receive(self, max_bytes: int = _READ_CHUNK) -> bytes:
        """Bytes from the peer, as many as are ready (at least one); ``b""`` at its EOF.

        Raises:
            anyio.ClosedResourceError: the channel was closed, before or while waiting.
            anyio.BrokenResourceError: the descriptor failed (not a clean EOF).
        """
        while (data := self.receive_nowait(max_bytes)) is None:
            await self._wait_readable()
        if self._long_streak():
            await anyio.lowlevel.checkpoint()
        return data

    async def feed(self, core: Receiver) -> None:
        """Read what the peer sends next (at least one byte, or its EOF) into ``core``:
        into the buffer it offers for a large frame, else as :meth:`receive` does.

        Raises:
            as :meth:`receive`; and what ``core`` raises.
        """
        while not self.feed_nowait(core):
            await self._wait_readable()
        if self._long_streak():
            await anyio.lowlevel.checkpoint()

    async def feed_ready(self, core: Receiver) -> bool:
        """What :meth:`feed` would read now, without waiting for it; False if the peer
        has sent nothing more yet. Like :meth:`feed`, it yields to the event loop once
        every few reads in a row that found data.

        Raises:
            as :meth:`feed`.
        """
        if not self.feed_nowait(core):
            self._streak = 0
            return False
        if self._long_streak():
            await anyio.lowlevel.checkpoint()
        return True

    def feed_nowait(self, core: Receiver) -> bool:
        """One read of what is there now into ``core`` (its buffer, or bytes); False if
        nothing is.

        Raises:
            as :meth:`receive_nowait`; and what ``core`` raises.
        """
        view = core.receive_buffer()
        if view is None:
            data = self.receive_nowait()
            if data is None:
                return False
            core.receive_data(data)
            return True
        with view:
            n = self.receive_into_nowait(view)
        if n is None:
            return False
        core.received_into(n)
        return True

    async def _wait_readable(self) -> None:
        self._streak = 0
        await self._wait(self._read_fd, readable=True)

    def _long_streak(self) -> bool:
        """Count one more read in a row that found data; True (and start counting again)
        when it is time to yield to the event loop."""
        self._streak += 1
        if self._streak < _READS_PER_CHECKPOINT:
            return False
        self._streak = 0
        return True

    def receive_nowait(self, max_bytes: int = _READ_CHUNK) -> bytes | None:
        """Bytes from the peer if any are there now (``b""`` at its EOF); ``None`` if none.

        Never waits, never yields to the event loop.

        Raises:
            anyio.ClosedResourceError: the channel was closed.
            anyio.BrokenResourceError: the descriptor failed (not a clean EOF).
        """
        if self._closed:
            raise anyio.ClosedResourceError
        size = min(max(max_bytes, _READ_CHUNK), _MAX_READ_CHUNK)
        try:
            return os.read(self._read_fd, size)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise _translate(exc) from exc

    def receive_into_nowait(self, view: memoryview) -> int | None:
        """Read what is there now into ``view`` (``0`` at the peer's EOF); ``None`` if
        nothing is. Never waits, never yields to the event loop.

        Raises:
            as :meth:`receive_nowait`.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            return os.readv(self._read_fd, (view,))
        except BlockingIOError:
            return None
        except OSError as exc:
            raise _translate(exc) from exc

    def try_write(self, data: bytes | bytearray | memoryview) -> int:
        """Write what the kernel takes now, without waiting; returns the bytes written.

        Raises:
            anyio.ClosedResourceError: the channel was closed.
            anyio.BrokenResourceError: the peer closed its end (EPIPE) or the write failed.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if len(data) > self._holds:
            # A large frame crosses in one pipe-full, not in many (best effort).
            self._holds = fit_pipe(self._write_fd, len(data), self._holds)
        try:
            return os.write(self._write_fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise _translate(exc) from exc

    async def wait_writable(self) -> None:
        """Wait until the kernel will take more bytes.

        Raises:
            anyio.ClosedResourceError: the channel was closed, before or while waiting.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        await self._wait(self._write_fd, readable=False)

    async def _wait(self, fd: int, *, readable: bool) -> None:
        self._waiting.add(fd)
        try:
            if readable:
                await anyio.wait_readable(fd)
            else:
                await anyio.wait_writable(fd)
        finally:
            self._waiting.discard(fd)
            if fd in self._reserved and fd not in self._waiting:
                self._reserved.discard(fd)
                os.close(fd)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data``, waiting for room as needed. For single-writer use.

        Raises:
            anyio.ClosedResourceError: the channel was closed.
            anyio.BrokenResourceError: the peer closed its end.
        """
        view = memoryview(data)
        with view:
            while view:
                n = self.try_write(view)
                view = view[n:]
                if view:
                    await self.wait_writable()

    def close(self) -> None:
        """Close both descriptors (idempotent). Tasks waiting on them are woken.

        Closing is the protocol's cancel signal (invariant 5): the peer reads EOF.
        """
        if self._closed:
            return
        self._closed = True
        for fd in {self._read_fd, self._write_fd}:
            if fd not in self._waiting:
                # Every wait goes through _wait: nobody waits on this one, nobody to wake.
                try:
                    os.close(fd)
                except OSError:
                    pass
                continue
            try:
                anyio.notify_closing(fd)
            except RuntimeError:  # no event loop running: nobody can be waiting
                pass
            try:
                # Release the file now, keep the number until the waiter has left.
                os.dup2(_null(), fd, inheritable=False)
                self._reserved.add(fd)
            except OSError:
                pass


_null_fd = -1


def _null() -> int:
    """A descriptor of ``/dev/null`` (one per process), to hold a number with."""
    global _null_fd
    if _null_fd < 0:
        _null_fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    return _null_fd


def _translate(exc: OSError) -> Exception:
    if exc.errno == errno.EBADF:
        return anyio.ClosedResourceError()
    return anyio.BrokenResourceError(str(exc))
