"""The start channel without I/O: one Start down, one Result up, as two state machines.

The parent's :class:`StarterCore` and the child's :class:`RunnerCore` each follow a table
``(state, event) -> next state``. An event the table does not list is a protocol error and
moves the role to ``ERROR``, where every later call fails at once: a start channel carries
exactly one run, and a second Start or a second Result is a bug or an attack, never
something to make sense of.

::

    Starter:  IDLE --send Start--> AWAITING_RESULT --Result--> DONE
    Runner:   AWAITING_START --Start--> RUNNING --send Result--> DONE
    either:   anything unlisted --> ERROR;  end of stream before the end --> ERROR
"""

from __future__ import annotations

import enum
from typing import Final

from ._constants import MAX_FRAME_BYTES
from ._errors import ChannelClosed, LocalProtocolError, ProtocolError, RemoteProtocolError
from ._frames import FrameDecoder, Signal
from ._messages import (
    RESULT_DECODER,
    START_DECODER,
    Result,
    Start,
    decode,
    frame_message,
    frame_result_pieces,
    valid_unicode,
)

__all__ = ["Event", "RunnerCore", "StarterCore", "State"]


class State(enum.Enum):
    """States of the two start-channel roles."""

    IDLE = "IDLE"
    AWAITING_RESULT = "AWAITING_RESULT"
    AWAITING_START = "AWAITING_START"
    RUNNING = "RUNNING"
    DONE = "DONE"
    ERROR = "ERROR"


class Event(enum.Enum):
    """What can happen on the start channel."""

    SEND_START = "SEND_START"
    RECV_START = "RECV_START"
    SEND_RESULT = "SEND_RESULT"
    RECV_RESULT = "RECV_RESULT"


STARTER_TRANSITIONS: Final[dict[tuple[State, Event], State]] = {
    (State.IDLE, Event.SEND_START): State.AWAITING_RESULT,
    (State.AWAITING_RESULT, Event.RECV_RESULT): State.DONE,
}

RUNNER_TRANSITIONS: Final[dict[tuple[State, Event], State]] = {
    (State.AWAITING_START, Event.RECV_START): State.RUNNING,
    (State.RUNNING, Event.SEND_RESULT): State.DONE,
}


class _Role:
    __slots__ = ("_decoder", "_error", "_max_frame", "_state")

    _TABLE: dict[tuple[State, Event], State]

    def __init__(self, initial: State, max_frame_bytes: int) -> None:
        self._state = initial
        self._decoder = FrameDecoder(max_frame_bytes)
        self._max_frame = max_frame_bytes
        self._error: ProtocolError | None = None

    @property
    def state(self) -> State:
        """The role's current state."""
        return self._state

    def _allowed(self, event: Event, *, remote: bool) -> State:
        """The state ``event`` leads to; an unlisted event fails the role."""
        if self._error is not None:
            raise self._error
        nxt = self._TABLE.get((self._state, event))
        if nxt is None:
            cls = RemoteProtocolError if remote else LocalProtocolError
            raise self._fail(cls(f"{event.value} is not allowed in state {self._state.value}"))
        return nxt

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._state = State.ERROR
        self._error = error
        return error

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the peer; ``b""`` means the peer closed its end."""
        if self._error is not None:
            raise self._error
        self._decoder.receive_data(data)

    def receive_buffer(self) -> memoryview | None:
        """Where to read a large frame's rest straight into, or ``None``
        (:meth:`protocol.FrameDecoder.receive_buffer`)."""
        if self._error is not None:
            raise self._error
        return self._decoder.receive_buffer()

    def received_into(self, nbytes: int) -> None:
        """Say how many bytes were read into :meth:`receive_buffer`'s view; ``0`` at the
        peer's end."""
        if self._error is not None:
            raise self._error
        self._decoder.received_into(nbytes)

    def _next_frame(self, waiting_for: str) -> memoryview | Signal:
        if self._error is not None:
            raise self._error
        try:
            frame = self._decoder.next_frame_view()
        except ProtocolError as exc:
            raise self._fail(exc) from None
        if frame is Signal.CLOSED:
            if self._state is State.DONE:
                return frame
            raise self._fail(ChannelClosed(f"peer closed the start channel before {waiting_for}"))
        return frame


class StarterCore(_Role):
    """The parent's side: send one Start, accept the one Result that answers it."""

    __slots__ = ("_result_id",)
    _TABLE = STARTER_TRANSITIONS

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        super().__init__(State.IDLE, max_frame_bytes)
        self._result_id = ""

    def send_start(self, start: Start) -> bytearray:
        """The frame that starts the run (once).

        Raises:
            LocalProtocolError: a Start was sent already (the role is then failed); or the
                Start holds an integer outside Go's int64 (nothing changes).
            LocalFrameTooLarge: the Start is over the frame cap; nothing changes.
        """
        nxt = self._allowed(Event.SEND_START, remote=False)
        frame = frame_message(start, self._max_frame)  # too large: state unchanged
        self._state = nxt
        self._result_id = valid_unicode(start.result_id)  # the id as sent (and echoed)
        return frame

    def next_result(self) -> Result | Signal:
        """The run's Result, or ``NEED_DATA``.

        Raises:
            RemoteProtocolError: garbage, a second Result, a Result before Start, or a
                Result for another run (its ``result_id`` is not the Start's).
            ChannelClosed: the child closed the channel without sending a Result.
        """
        frame = self._next_frame("sending its Result")
        if isinstance(frame, Signal):
            return frame
        try:
            result = decode(RESULT_DECODER, frame)
        except ProtocolError as exc:
            raise self._fail(exc) from None
        finally:
            self._decoder.release_frame()
        self._state = self._allowed(Event.RECV_RESULT, remote=True)
        if result.result_id != self._result_id:
            raise self._fail(
                RemoteProtocolError(
                    f"Result for {result.result_id!r}, but this run is {self._result_id!r}"
                )
            )
        return result


class RunnerCore(_Role):
    """The child's side: accept one Start, send one Result that answers it."""

    __slots__ = ("_result_id",)
    _TABLE = RUNNER_TRANSITIONS

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        super().__init__(State.AWAITING_START, max_frame_bytes)
        self._result_id = ""

    def next_start(self) -> Start | Signal:
        """The run's Start, or ``NEED_DATA``.

        Raises:
            RemoteProtocolError: garbage, or a second Start.
            ChannelClosed: the parent closed the channel before sending Start.
        """
        frame = self._next_frame("sending Start")
        if isinstance(frame, Signal):
            return frame
        try:
            start = decode(START_DECODER, frame)
        except ProtocolError as exc:
            raise self._fail(exc) from None
        finally:
            self._decoder.release_frame()
        self._state = self._allowed(Event.RECV_START, remote=True)
        self._result_id = start.result_id
        return start

    def send_result(self, result: Result) -> bytearray:
        """The frame that reports the run's end (once, after Start).

        Raises:
            LocalProtocolError: no Start yet, a Result already sent, or a ``result_id``
                that is not the Start's (the role is then failed); or an integer outside
                Go's int64 (nothing changes).
            LocalFrameTooLarge: the Result is over the frame cap. Nothing changes: send a
                smaller Result (a failure saying so) instead.
        """
        nxt = self._result_allowed(result)
        frame = frame_message(result, self._max_frame)
        self._state = nxt
        return frame

    def send_result_json(
        self, result: Result, value_json: bytes
    ) -> list[bytes | bytearray | memoryview]:
        """:meth:`send_result` of ``result`` with ``value_json`` (the value's JSON text, as
        msgspec writes it) as its value, as pieces to write in order: a large value is not
        copied into the frame (:func:`~protocol.frame_result_pieces`).

        Raises:
            LocalProtocolError: as :meth:`send_result`.
            LocalFrameTooLarge: as :meth:`send_result`.
            UnicodeDecodeError: ``value_json`` is not UTF-8; nothing changes.
            MemoryError: no memory for the frame; nothing changes.
        """
        nxt = self._result_allowed(result)
        pieces = frame_result_pieces(result, value_json, self._max_frame)
        self._state = nxt
        return pieces

    def _result_allowed(self, result: Result) -> State:
        """The state after sending ``result``, if it may be sent now.

        Raises:
            LocalProtocolError: as :meth:`send_result` (the role is then failed).
        """
        nxt = self._allowed(Event.SEND_RESULT, remote=False)
        if result.result_id != self._result_id:
            raise self._fail(
                LocalProtocolError(
                    f"Result for {result.result_id!r}, but this run is {self._result_id!r}"
                )
            )
        return nxt
