"""The call channel without I/O: the parent's accounting and the child's id matching.

Theory of operation
-------------------
The child (``Client``) sends Requests, the parent (``Server``) answers each with one
Response. :class:`ServerCore` is the parent's bookkeeping and the budget authority
(invariant 3); :class:`ClientCore` is the child's. Neither reads a clock or touches a
descriptor: bytes go in through ``receive_data``, frames to write come back as return
values, and "now" is an argument. The I/O adapters (``_server.py``, ``_client.py``) are
thin loops around them, and the property and stateful tests drive them directly.

Each accepted call moves through one life: admitted -> settled, exactly once. It is
settled by its handler's value, its handler's failure, or its deadline, whichever comes
first; later settlements of the same call are ignored (the handler that finishes after its
deadline has passed is too late, and its value is dropped).

The parent's rules, in the order :meth:`ServerCore.admit` applies them:

1. A Request whose id is already in flight is a protocol error (invariant 6): responses
   are matched by id, so no answer to it could be told apart from the first call's.
2. In-flight cap (invariant 4): a call over the cap is answered ``limit`` at once, never
   queued, and is not counted as a call (it was never accepted).
3. Quotas (invariant 3): past MaxCalls, or with MaxBytes already spent, ``limit``.
4. Otherwise the call is accepted and counted, here, by the parent.

Result bytes are counted when a value is delivered: a value that would take the total past
MaxBytes is withheld and the call answered ``limit`` instead, so the child never receives
more than MaxBytes of results. A value too large for one frame is answered ``limit`` too.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Annotated, Final, final

import msgspec

from ._constants import DEFAULT_MAX_INFLIGHT, INT64_MAX, MAX_FRAME_BYTES, VERSION
from ._errors import ChannelClosed, LocalFrameTooLarge, LocalProtocolError, RemoteProtocolError
from ._frames import FrameDecoder, Signal
from ._kinds import Kind
from ._messages import (
    REQUEST_DECODER,
    RESPONSE_DECODER,
    Request,
    Response,
    decode,
    frame_message,
    valid_unicode,
)

__all__ = [
    "CallLimits",
    "CallStats",
    "ClientCore",
    "ServerCore",
    "effective_deadline",
    "utf8_len",
    "valid_unicode",
]


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes, without encoding it when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


# Error texts are for people: past this many characters they are cut before framing.
_MAX_ERROR_CHARS: Final = 1 << 16
# The smallest frame cap that leaves room for any failure frame: the longest id, escaped
# at 6 bytes a character, plus the other fields.
_MIN_FRAME_BYTES: Final = 512


def effective_deadline(deadline_ms: int, cap: float | None) -> float | None:
    """The seconds a call may take: the child's wish clamped to the parent's cap.

    The child can only shorten a deadline, never lengthen it; no wish (0) means the cap;
    no cap (None) means the wish alone; neither means no deadline.
    """
    if deadline_ms <= 0:
        return cap
    wish = deadline_ms / 1000.0
    return wish if cap is None or wish < cap else cap


_Count = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]


def _count(n: int, noun: str) -> str:
    """``1 call``, ``64 calls``: a count as the failures' text writes it."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _size(n: int) -> str:
    """A byte count as the failures' text writes it: ``200 MiB``, ``1.5 KiB``, ``10 bytes``
    (the same words as the host's own messages, ``sandbox._text.size``)."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit:
            return f"{n / unit:.2f}".rstrip("0").rstrip(".") + f" {name}"
    return _count(n, "byte")


@final
class CallLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The parent's limits on one call channel. ``None`` means no limit.

    The bounds in the annotations are the protocol's contract (counts are Go's int64, as
    on the wire). Making a ``CallLimits`` does not check them: msgspec does when it decodes
    or converts one (``msgspec.convert({...}, CallLimits)``), for a caller that takes
    limits from outside. The sandbox makes its limits from a validated ``Budget``, where
    every limit is checked once; a value out of range here would only make the server
    refuse or expire calls, never fail.

    Attributes:
        max_calls: the most calls to accept (0: none at all).
        max_bytes: the most result bytes to deliver.
        max_inflight: the hard cap on calls in flight at once (invariant 4); it cannot be
            lifted.
        max_call_deadline: the longest any one call may take, in seconds. The child's
            ``deadline_ms`` can only shorten it.
    """

    max_calls: _Count | None = None
    max_bytes: _Count | None = None
    max_inflight: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)] = DEFAULT_MAX_INFLIGHT
    max_call_deadline: Annotated[float, msgspec.Meta(gt=0)] | None = None


#: What a server is given when it is given nothing: no quotas, the default in-flight cap.
_DEFAULT_LIMITS: Final = CallLimits()


@final
class CallStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one call channel's accounting, as the parent counted it.

    Attributes:
        calls: calls accepted (the number MaxCalls limits).
        bytes: result bytes delivered (the number MaxBytes limits).
        inflight: calls accepted and not yet settled.
        peak_inflight: the most calls in flight at once so far.
        refused: calls answered ``limit`` by the accounting: over the in-flight cap or a
            quota, or a result withheld for the byte quota or the frame cap.
        expired: calls answered ``transient`` because their deadline passed.
        limited: calls answered ``limit`` in all: those refused, and those whose handler
            failed with ``limit`` (so the parent knows, without the child's word, whether
            a limit of its own ever stopped a call).
    """

    calls: int
    bytes: int
    inflight: int
    peak_inflight: int
    refused: int
    expired: int
    limited: int = 0


class _Reading:
    """What the two cores of the call channel read with: bytes fed to their frame decoder,
    or the rest of a large frame read straight into its buffer."""

    __slots__ = ()
    _decoder: FrameDecoder

    def receive_buffer(self) -> memoryview | None:
        """Where to read a large frame's rest straight into, or ``None``
        (:meth:`protocol.FrameDecoder.receive_buffer`)."""
        return self._decoder.receive_buffer()

    def received_into(self, nbytes: int) -> None:
        """Say how many bytes were read into :meth:`receive_buffer`'s view; ``0`` at the
        peer's end."""
        self._decoder.received_into(nbytes)


class ServerCore(_Reading):
    """The parent's side of the call channel: decoding, admission, accounting, deadlines.

    Args:
        limits: the calls, result bytes, calls in flight and seconds per call allowed
            (:class:`CallLimits`; by default no quotas and the default in-flight cap).
        max_frame_bytes: the largest frame accepted or sent.

    Raises:
        ValueError: a frame cap too small for a failure frame.
    """

    __slots__ = (
        "_bytes",
        "_calls",
        "_deadlines",
        "_decoder",
        "_expired",
        "_handler_limits",
        "_inflight",
        "_limits",
        "_max_bytes",
        "_max_calls",
        "_max_deadline",
        "_max_frame",
        "_max_inflight",
        "_peak",
        "_refused",
    )

    def __init__(
        self, limits: CallLimits = _DEFAULT_LIMITS, *, max_frame_bytes: int = MAX_FRAME_BYTES
    ) -> None:
        if max_frame_bytes < _MIN_FRAME_BYTES:
            raise ValueError(
                f"max_frame_bytes must be >= {_MIN_FRAME_BYTES}, got {max_frame_bytes}"
            )
        # The limits are read on every call: held in slots of their own.
        self._limits = limits
        self._max_calls = limits.max_calls
        self._max_bytes = limits.max_bytes
        self._max_inflight = limits.max_inflight
        self._max_deadline = limits.max_call_deadline
        self._decoder = FrameDecoder(max_frame_bytes)
        self._max_frame = max_frame_bytes
        # id -> absolute deadline (or None). Membership is "in flight".
        self._inflight: dict[str, float | None] = {}
        # (deadline, id, tool, seconds) min-heap; entries of settled calls are dropped lazily.
        self._deadlines: list[tuple[float, str, str, float]] = []
        self._calls = 0
        self._bytes = 0
        self._peak = 0
        self._refused = 0
        self._expired = 0
        self._handler_limits = 0

    # -- reading ------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from the child; ``b""`` means the child closed its end."""
        self._decoder.receive_data(data)

    def next_request(self) -> Request | Signal:
        """The next Request, or ``NEED_DATA``, or ``CLOSED`` at a clean end of stream.

        Raises:
            RemoteProtocolError: the child sent garbage (bad framing, bad frame, version).
        """
        frame = self._decoder.next_frame_view()
        if isinstance(frame, Signal):
            return frame
        try:
            return decode(REQUEST_DECODER, frame)
        finally:
            self._decoder.release_frame()

    # -- admission ----------------------------------------------------------------

    def admit(self, request: Request) -> bytearray | None:
        """Apply the admission rules; None if accepted, else the refusal frame to send.

        Raises:
            RemoteProtocolError: the id is already in flight.
        """
        inflight = self._inflight
        call_id = request.id
        if call_id in inflight:
            raise RemoteProtocolError(f"call id {call_id!r} is already in flight")
        if len(inflight) >= self._max_inflight:
            cap = _count(self._max_inflight, "call")
            return self._refuse(call_id, f"{request.tool}: in-flight cap of {cap} reached")
        if self._max_calls is not None and self._calls >= self._max_calls:
            quota = _count(self._max_calls, "call")
            return self._refuse(call_id, f"{request.tool}: call quota of {quota} used up")
        if self._max_bytes is not None and self._bytes >= self._max_bytes:
            quota = _size(self._max_bytes)
            return self._refuse(call_id, f"{request.tool}: result quota of {quota} used up")
        self._calls += 1
        inflight[call_id] = None
        if len(inflight) > self._peak:
            self._peak = len(inflight)
        return None

    def _refuse(self, call_id: str, reason: str) -> bytearray:
        self._refused += 1
        return frame_message(
            Response(v=VERSION, id=call_id, ok=False, kind=Kind.LIMIT, error=reason)
        )

    def arm_deadline(
        self, call_id: str, deadline_ms: int, now: float, tool: str = ""
    ) -> float | None:
        """Give an accepted call its deadline; returns it (absolute) or None if it has none.

        Only calls that do not settle at once need one, so the inline path never pays for
        the heap. ``tool`` (the Request's) is named in the failure if the deadline passes.
        """
        timeout = effective_deadline(deadline_ms, self._max_deadline)
        if timeout is None or call_id not in self._inflight:
            return None
        deadline = now + timeout
        self._inflight[call_id] = deadline
        # What the failure will say rides in the heap entry: nothing to forget on settling.
        heapq.heappush(self._deadlines, (deadline, call_id, tool, timeout))
        return deadline

    # -- settling -----------------------------------------------------------------

    def settle(self, call_id: str, value: str) -> bytearray | None:
        """The handler returned ``value``: the frame to send, or None if already settled.

        Text that is not valid Unicode (lone surrogates, as ``surrogateescape`` makes from
        undecodable file names) cannot travel as UTF-8 JSON; its bad code points are
        replaced by U+FFFD, as Go does when it encodes such a string.
        """
        if self._inflight.pop(call_id, _GONE) is _GONE:
            return None
        if value.isascii():
            size = len(value)
        else:
            value = valid_unicode(value)
            size = len(value.encode("utf-8"))
        if self._max_bytes is not None and self._bytes + size > self._max_bytes:
            self._refused += 1
            return self._failure(
                call_id,
                Kind.LIMIT,
                f"result of {_size(size)} would pass the quota of {_size(self._max_bytes)} "
                f"({_size(self._bytes)} already delivered)",
            )
        try:
            frame = frame_message(
                Response(v=VERSION, id=call_id, ok=True, value=value), self._max_frame
            )
        except LocalFrameTooLarge as exc:
            self._refused += 1
            return self._failure(call_id, Kind.LIMIT, f"result too large for one frame: {exc}")
        self._bytes += size
        return frame

    def settle_error(self, call_id: str, kind: Kind, error: str) -> bytearray | None:
        """The handler failed: the frame to send, or None if the call was already settled."""
        if self._inflight.pop(call_id, _GONE) is _GONE:
            return None
        if kind is Kind.LIMIT:
            self._handler_limits += 1
        return self._failure(call_id, kind, error)

    def _failure(self, call_id: str, kind: Kind, error: str) -> bytearray:
        """A failure frame that always fits: an error too long to frame is cut until it does.

        The kind is what the child acts on; the text is for people, so cutting it loses
        nothing that matters.
        """
        error = valid_unicode(error[:_MAX_ERROR_CHARS])
        while True:
            try:
                return frame_message(
                    Response(v=VERSION, id=call_id, ok=False, kind=kind, error=error),
                    self._max_frame,
                )
            except LocalFrameTooLarge:
                if not error:
                    raise  # the id alone is over the cap: impossible with a sane cap
                error = error[: len(error) // 2]

    def expire(self, now: float) -> list[tuple[str, bytearray]]:
        """Settle every call whose deadline is at or before ``now`` as ``transient``.

        Returns:
            ``(id, frame)`` for each expired call: send the frame, cancel the handler.
        """
        heap = self._deadlines
        inflight = self._inflight
        out: list[tuple[str, bytearray]] = []
        while heap and heap[0][0] <= now:
            deadline, call_id, tool, timeout = heapq.heappop(heap)
            if inflight.get(call_id, _GONE) != deadline:
                continue  # settled already (or the id was reused with a new deadline)
            del inflight[call_id]
            self._expired += 1
            whose = "max_call_deadline" if timeout == self._max_deadline else "the caller's own"
            error = f"{tool or 'call'}: call deadline of {timeout:g} s passed ({whose})"
            out.append((call_id, self._failure(call_id, Kind.TRANSIENT, error)))
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline among calls in flight, or None."""
        heap = self._deadlines
        inflight = self._inflight
        while heap and inflight.get(heap[0][1], _GONE) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def abandon_all(self) -> list[str]:
        """Forget every call in flight (the channel is going away); returns their ids."""
        ids = list(self._inflight)
        self._inflight.clear()
        self._deadlines.clear()
        return ids

    # -- queries --------------------------------------------------------------------

    @property
    def limits(self) -> CallLimits:
        """The limits this core enforces."""
        return self._limits

    @property
    def inflight(self) -> int:
        """Calls accepted and not yet settled."""
        return len(self._inflight)

    def is_inflight(self, call_id: str) -> bool:
        """Whether ``call_id`` is accepted and not yet settled."""
        return call_id in self._inflight

    def statistics(self) -> CallStats:
        """A frozen snapshot of the accounting."""
        return CallStats(
            calls=self._calls,
            bytes=self._bytes,
            inflight=len(self._inflight),
            peak_inflight=self._peak,
            refused=self._refused,
            expired=self._expired,
            limited=self._refused + self._handler_limits,
        )


_GONE: Final = object()


class ClientCore(_Reading):
    """The child's side of the call channel: ids, requests out, responses matched by id.

    Ids are short decimal strings from a counter, unique for the life of the channel.
    """

    __slots__ = ("_closed", "_decoder", "_ids", "_max_frame", "_pending")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._decoder = FrameDecoder(max_frame_bytes)
        self._max_frame = max_frame_bytes
        self._ids = itertools.count(1)
        self._pending: set[str] = set()
        self._closed = False

    def request(self, tool: str, args: str, deadline_ms: int = 0) -> tuple[str, bytearray]:
        """Register a new call; returns its id and the frame to send.

        Text that is not valid Unicode (lone surrogates) is sent with U+FFFD in their place,
        as in every frame (see :func:`~protocol.frame_message`).

        Raises:
            ChannelClosed: the channel has ended; no new call can be made.
            LocalFrameTooLarge: the arguments do not fit in one frame (nothing registered).
            LocalProtocolError: a deadline that is negative or outside Go's int64 (nothing
                registered).
        """
        if self._closed:
            raise ChannelClosed("the call channel is closed")
        if deadline_ms < 0:
            raise LocalProtocolError(f"deadline_ms must be >= 0, got {deadline_ms}")
        call_id = str(next(self._ids))
        frame = frame_message(
            Request(v=VERSION, id=call_id, tool=tool, args=args, deadline_ms=deadline_ms),
            self._max_frame,
        )
        self._pending.add(call_id)
        return call_id, frame

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from the parent; ``b""`` means the parent closed its end."""
        self._decoder.receive_data(data)

    def next_response(self) -> Response | Signal:
        """The next Response (its call is then settled), ``NEED_DATA`` or ``CLOSED``.

        After ``CLOSED`` the channel is closed: :meth:`close` has been applied and every
        pending call is the caller's to fail.

        Raises:
            RemoteProtocolError: garbage, or a Response for no pending call.
        """
        frame = self._decoder.next_frame_view()
        if isinstance(frame, Signal):
            if frame is Signal.CLOSED:
                self._closed = True
            return frame
        try:
            response = decode(RESPONSE_DECODER, frame)
        finally:
            self._decoder.release_frame()
        try:
            self._pending.remove(response.id)
        except KeyError:
            raise RemoteProtocolError(f"response for unknown call id {response.id!r}") from None
        return response

    def close(self) -> list[str]:
        """Close the channel; returns the ids of the calls that were pending."""
        self._closed = True
        ids = list(self._pending)
        self._pending.clear()
        return ids

    @property
    def pending(self) -> int:
        """Calls sent and not yet answered."""
        return len(self._pending)

    @property
    def closed(self) -> bool:
        """Whether the channel has ended."""
        return self._closed
