"""Framing, without I/O: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.

Not newline-delimited: tool output contains newlines, and one multi-line log line would cut
every later frame apart. A length prefix assumes nothing about the payload.

:class:`FrameDecoder` is fed whatever chunks the transport happens to deliver and hands
back whole payloads. Its guarantees, each tested:

* The announced length is checked against the cap *before* anything is allocated for the
  body: a hostile prefix of 4 GiB costs nothing.
* A zero-length frame is refused. No message of the protocol encodes to zero bytes, so an
  empty frame can only be garbage, and accepting it as a keep-alive would let a peer make
  us spin on four-byte frames that say nothing.
* End of stream (``receive_data(b"")``) between frames is a clean end; inside a prefix or
  a body it is :class:`~protocol.TruncatedFrame`.
* Work is linear in the bytes received: consumed bytes are dropped from the front of the
  buffer at most once per buffer's worth of frames, never once per frame.
* Failure is a state: after the decoder has raised a :class:`~protocol.RemoteProtocolError`,
  every later call raises the same error. (Feeding data after end of stream is the
  caller's bug, a :class:`~protocol.LocalProtocolError`, and changes nothing.)

A large frame need not come in as chunks of bytes at all. Once its prefix is in and at
least :data:`DIRECT_FROM` bytes of its body are still to come, in a frame of at most
:data:`DIRECT_UP_TO` bytes, :meth:`FrameDecoder.receive_buffer` offers the rest of the body
as a writable view, to read straight into (``os.readv``), and
:meth:`FrameDecoder.received_into` says how much came. The body is then read in one system
call per pipe-full and copied nowhere: not into a new ``bytes`` per read, nor onto the end
of a buffer that grows as it comes. And the buffer is one this process has filled before
(:class:`_Spares` keeps the last few): a fresh one, the size of a 1 MiB frame, costs a page
fault per 4 KiB the first time it is written, 0.6-1.3 ms on a virtual machine, more than
reading the frame.
"""

from __future__ import annotations

import enum
import threading
from typing import Final

from ._constants import MAX_FRAME_BYTES
from ._errors import (
    LocalFrameTooLarge,
    LocalProtocolError,
    ProtocolError,
    RemoteFrameTooLarge,
    RemoteProtocolError,
    TruncatedFrame,
)

__all__ = ["DIRECT_FROM", "DIRECT_UP_TO", "PREFIX_BYTES", "FrameDecoder", "Signal", "encode_frame"]

PREFIX_BYTES: Final = 4
#: A frame with at least this many bytes of its body still to come is read straight into
#: a buffer of its own (:meth:`FrameDecoder.receive_buffer`): one read's worth (64 KiB).
DIRECT_FROM: Final = 1 << 16
#: ... if it is at most this large. The buffer is made whole when the prefix is in (and a
#: new one is filled with zeros, every page of it), so a peer that sends a prefix and
#: nothing more must not make one the size of the largest frame: a larger frame is
#: buffered as it comes, as any frame was.
DIRECT_UP_TO: Final = 4 << 20

# Below this many consumed bytes the buffer is not compacted: dropping a few bytes from the
# front of a bytearray costs a memmove of everything behind them.
_COMPACT_AFTER: Final = 1 << 16


class _Spares:
    """Buffers of large frames, kept for the next large frames of this process.

    A buffer's pages, once written, stay this process's while it is kept; the allocator
    would hand a freed one back to the kernel (a large block is a mapping of its own, or
    the top of the heap trimmed), and the next frame would fault its pages in again. At
    most :attr:`KEEP` buffers of at most :attr:`KEEP_BYTES` each are kept (8 MiB in all;
    no larger frame is read into one). Shared by every decoder of the process, whatever
    its thread.
    """

    KEEP: Final = 2
    KEEP_BYTES: Final = DIRECT_UP_TO
    #: Sizes are rounded up to this, so that frames of about one size share buffers.
    STEP: Final = 1 << 18

    __slots__ = ("_kept", "_lock")

    def __init__(self) -> None:
        self._kept: list[bytearray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes: the smallest kept one that holds it, or a
        new one."""
        with self._lock:
            fits = [buf for buf in self._kept if len(buf) >= size]
            if fits:
                buf = min(fits, key=len)
                self._kept.remove(buf)
                return buf
        return bytearray(-(-size // self.STEP) * self.STEP)

    def give(self, buf: bytearray) -> None:
        """Take back a buffer :meth:`take` gave; it is kept if it is worth keeping."""
        if len(buf) > self.KEEP_BYTES:
            return
        with self._lock:
            self._kept.append(buf)
            if len(self._kept) > self.KEEP:
                self._kept.remove(min(self._kept, key=len))

    def kept(self) -> list[int]:
        """The sizes of the buffers kept now (for tests)."""
        with self._lock:
            return sorted(len(buf) for buf in self._kept)


_SPARES: Final = _Spares()


class Signal(enum.Enum):
    """What a decoder returns instead of a frame."""

    #: No whole frame is buffered yet: feed more bytes.
    NEED_DATA = "NEED_DATA"
    #: The peer ended the stream cleanly, between frames. Nothing more will come.
    CLOSED = "CLOSED"


class FrameDecoder:
    """Incremental frame decoder: ``receive_data`` bytes in, ``next_frame`` payloads out.

    Args:
        max_frame_bytes: the largest payload accepted; larger prefixes are refused.
    """

    __slots__ = (
        "_big",
        "_big_have",
        "_big_size",
        "_buf",
        "_eof",
        "_error",
        "_lent",
        "_lent_end",
        "_max",
        "_pos",
    )

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._pos = 0
        # The frame being read straight into a buffer of its own (receive_buffer): the
        # buffer, the payload's size, and how much of it is in. While there is one, _buf
        # holds only what came after it.
        self._big: bytearray | None = None
        self._big_size = 0
        self._big_have = 0
        # The frame lent out by next_frame_view(): (the buffer's view, the frame's view),
        # and where it ends; consumed at the next call.
        self._lent: tuple[memoryview, memoryview] | None = None
        self._lent_end = 0
        self._eof = False
        self._error: ProtocolError | None = None
        self._max = max_frame_bytes

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        held = len(self._buf) - self._pos
        if self._big is not None:
            held += PREFIX_BYTES + self._big_have
        return held

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the peer; ``b""`` means the peer ended the stream.

        Raises:
            LocalProtocolError: data fed after end of stream (a bug in the caller).
        """
        if self._error is not None:
            raise self._error
        self._return_lent()
        if not data:
            self._eof = True
            return
        if self._eof:
            raise LocalProtocolError("received data after end of stream")
        big = self._big
        if big is not None and self._big_have < self._big_size:
            # (A caller that reads into bytes while a large frame is open: it goes on.)
            have = self._big_have
            take = min(len(data), self._big_size - have)
            big[have : have + take] = data[:take]
            self._big_have = have + take
            data = data[take:]
            if not data:
                return
        self._buf += data

    def receive_buffer(self) -> memoryview | None:
        """Where to read the peer's next bytes straight into, or ``None``: read them as
        bytes and feed them to :meth:`receive_data`.

        A view is offered once a frame's prefix is in and at least :data:`DIRECT_FROM`
        bytes of its body are still to come, for a frame of at most :data:`DIRECT_UP_TO`
        bytes: exactly the rest of that body, so nothing of the next frame is read into
        it. Read into it (``os.readv(fd, [view])``, a ``recv_into``) and say how much came
        with :meth:`received_into`, before any other call to this decoder; the view is not
        to be used after that.

        Raises:
            RemoteProtocolError: as :meth:`next_frame`, once the decoder has failed.
        """
        if self._error is not None:
            raise self._error
        if self._eof:
            return None
        self._return_lent()
        if self._big is None:
            buf, pos = self._buf, self._pos
            have = len(buf) - pos - PREFIX_BYTES
            if have < 0:
                return None
            size = int.from_bytes(buf[pos : pos + PREFIX_BYTES], "big")
            if size - have < DIRECT_FROM or size > min(self._max, DIRECT_UP_TO):
                return None  # (a size over the cap fails at next_frame_view)
            big = _SPARES.take(size)
            big[:have] = buf[pos + PREFIX_BYTES :]
            buf.clear()
            self._pos = 0
            self._big, self._big_size, self._big_have = big, size, have
        elif self._big_have == self._big_size:
            return None  # whole: the next frame's bytes go to _buf as usual
        return memoryview(self._big)[self._big_have : self._big_size]

    def received_into(self, nbytes: int) -> None:
        """Say that ``nbytes`` were read into the view :meth:`receive_buffer` gave; ``0``
        means the peer ended the stream (as ``receive_data(b"")``).

        Raises:
            LocalProtocolError: no view was given, or ``nbytes`` is more than it holds.
        """
        if self._error is not None:
            raise self._error
        if nbytes == 0:
            self.receive_data(b"")
            return
        if self._big is None or not 0 < nbytes <= self._big_size - self._big_have:
            raise LocalProtocolError(f"{nbytes} bytes read into no buffer given to be read into")
        self._big_have += nbytes

    def next_frame(self) -> bytes | Signal:
        """The next whole payload (a copy), or a :class:`Signal` when there is none.

        Raises:
            RemoteProtocolError: the peer's bytes break the framing (the decoder is then
                dead: every later call raises the same error).
        """
        frame = self.next_frame_view()
        if isinstance(frame, Signal):
            return frame
        data = bytes(frame)
        self._return_lent()
        return data

    def next_frame_view(self) -> memoryview | Signal:
        """Like :meth:`next_frame`, without copying: a view of the payload in the buffer.

        The view is valid until the next call to this decoder (which consumes the frame):
        decode it at once. A 16 MiB frame is not copied once more just to be decoded.

        Raises:
            RemoteProtocolError: as :meth:`next_frame`.
        """
        if self._error is not None:
            raise self._error
        self._return_lent()
        big = self._big
        if big is not None:
            if self._big_have == self._big_size:
                whole = memoryview(big)
                frame = whole[: self._big_size]
                self._lent = (whole, frame)
                return frame
            if self._eof:
                raise self._fail(TruncatedFrame("end of stream inside a frame's body"))
            return Signal.NEED_DATA
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail >= PREFIX_BYTES:
            size = int.from_bytes(buf[pos : pos + PREFIX_BYTES], "big")
            if size > self._max:
                raise self._fail(RemoteFrameTooLarge(size, self._max))
            if size == 0:
                raise self._fail(RemoteProtocolError("zero-length frame"))
            end = pos + PREFIX_BYTES + size
            if len(buf) >= end:
                whole = memoryview(buf)
                frame = whole[pos + PREFIX_BYTES : end]
                self._lent = (whole, frame)
                self._lent_end = end
                return frame
        if self._eof:
            if avail == 0:
                return Signal.CLOSED
            where = "prefix" if avail < PREFIX_BYTES else "body"
            raise self._fail(TruncatedFrame(f"end of stream inside a frame's {where}"))
        return Signal.NEED_DATA

    def release_frame(self) -> None:
        """Done with the frame :meth:`next_frame_view` lent: its bytes may be reused now,
        not only at the next call (a large frame's buffer goes back to be kept for the
        next one). The view is not to be used after this."""
        self._return_lent()

    def _return_lent(self) -> None:
        lent = self._lent
        if lent is not None:
            self._lent = None
            lent[1].release()
            lent[0].release()
            if self._big is not None:
                self._give_big()
            else:
                self._consume(self._lent_end)

    def _give_big(self) -> None:
        big = self._big
        assert big is not None
        self._big = None
        self._big_size = self._big_have = 0
        _SPARES.give(big)

    def _consume(self, end: int) -> None:
        if end == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif end >= _COMPACT_AFTER and end * 2 >= len(self._buf):
            del self._buf[:end]
            self._pos = 0
        else:
            self._pos = end

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._error = error
        self._return_lent()
        if self._big is not None:
            self._give_big()
        self._buf.clear()
        self._pos = 0
        return error


def encode_frame(payload: bytes, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """Prefix ``payload`` with its length, in one buffer (one write, no Nagle-style split).

    Raises:
        LocalFrameTooLarge: the payload is over the cap; nothing is produced.
        LocalProtocolError: the payload is empty (no message encodes to nothing).
    """
    size = len(payload)
    if size > max_frame_bytes:
        raise LocalFrameTooLarge(size, max_frame_bytes)
    if size == 0:
        raise LocalProtocolError("refusing to send a zero-length frame")
    return size.to_bytes(PREFIX_BYTES, "big") + payload
