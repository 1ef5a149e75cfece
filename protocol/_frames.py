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
"""

from __future__ import annotations

import enum
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

__all__ = ["PREFIX_BYTES", "FrameDecoder", "Signal", "encode_frame"]

PREFIX_BYTES: Final = 4

# Below this many consumed bytes the buffer is not compacted: dropping a few bytes from the
# front of a bytearray costs a memmove of everything behind them.
_COMPACT_AFTER: Final = 1 << 16


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

    __slots__ = ("_buf", "_eof", "_error", "_lent", "_lent_end", "_max", "_pos")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._pos = 0
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
        return len(self._buf) - self._pos

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
        self._buf += data

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

    def _return_lent(self) -> None:
        lent = self._lent
        if lent is not None:
            self._lent = None
            lent[1].release()
            lent[0].release()
            self._consume(self._lent_end)

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
