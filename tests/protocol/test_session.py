"""The call channel as a whole: a ClientCore and a ServerCore wired together in memory.

A Hypothesis state machine plays the program (making calls), the link (delivering bytes in
arbitrary chunks, in either direction), the handlers (finishing calls in any order, with a
value or a failure), the clock (passing deadlines) and the end (EOF or close). A small model
of what the parent must do is checked after every step: the in-flight cap, the call and
byte quotas, the kinds of refusals and expirations, and that every call the program made is
settled exactly once.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Final

import msgspec
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from protocol import (
    MAX_FRAME_BYTES,
    VERSION,
    CallLimits,
    ChannelClosed,
    Client,
    ClientCore,
    Kind,
    LocalFrameTooLarge,
    LocalProtocolError,
    RemoteProtocolError,
    Request,
    Response,
    ServerCore,
    Signal,
    TruncatedFrame,
    effective_deadline,
    encode_frame,
    frame_message,
)
from protocol._messages import RESPONSE_DECODER, decode

from .strategies import kinds, texts

#: A small frame cap, so that "too large for one frame" happens within a short run.
SMALL_CAP: Final = 512


def utf8_size(text: str) -> int:
    """Bytes of ``text`` as UTF-8 (the unit of MaxBytes)."""
    return len(text.encode("utf-8"))


def response_of(frame: bytes | bytearray, cap: int) -> Response:
    """The Response in one whole frame, checking its prefix and the cap."""
    size = int.from_bytes(frame[:4], "big")
    assert size == len(frame) - 4
    assert 0 < size <= cap
    return decode(RESPONSE_DECODER, bytes(frame[4:]))


def chunks_of(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` cut into chunks of the given sizes, repeated as needed."""
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        step = sizes[i % len(sizes)]
        out.append(data[pos : pos + step])
        pos += step
        i += 1
    return out


@dataclass
class Link:
    """One direction of the in-memory pipe: bytes written and not yet delivered."""

    pending: bytearray = field(default_factory=bytearray)
    #: Stream offsets at which a frame ends (EOF there is clean) and bytes delivered so far.
    boundaries: set[int] = field(default_factory=lambda: {0})
    written: int = 0
    delivered: int = 0

    def write(self, frame: bytes | bytearray) -> None:
        self.pending += frame
        self.written += len(frame)
        self.boundaries.add(self.written)

    def take(self, n: int) -> bytes:
        out = bytes(self.pending[:n])
        del self.pending[:n]
        self.delivered += len(out)
        return out

    @property
    def at_boundary(self) -> bool:
        return self.delivered in self.boundaries


_sizes = st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=8)
_amounts = st.integers(min_value=1, max_value=400) | st.just(1 << 30)
_call_args = st.tuples(
    texts(max_size=10),
    st.one_of(texts(max_size=30), texts(max_size=30), st.integers(400, 600).map("a".__mul__)),
    st.just(0) | st.integers(min_value=0, max_value=3000),
)
# Large values: over SMALL_CAP once framed, and over any byte quota drawn below.
_values = texts(max_size=30) | st.integers(min_value=490, max_value=700).map("v".__mul__)


class CallSession(RuleBasedStateMachine):
    """A client and a server, the link between them, and a model of the parent's duties."""

    def __init__(self) -> None:
        super().__init__()
        self.max_calls: int | None = None
        self.max_bytes: int | None = None
        self.max_inflight = 1
        self.max_deadline: float | None = None
        self.cap = MAX_FRAME_BYTES
        self.server = ServerCore()
        self.client = ClientCore()
        self.now = 0.0
        self.up = Link()  # client -> server
        self.down = Link()  # server -> client
        self.closed = False
        self.close_after = 0
        # The model.
        self.sent: dict[str, tuple[str, str, int]] = {}  # id -> (tool, args, deadline_ms)
        self.seen: list[str] = []  # ids that reached the server, in arrival order
        self.inflight: dict[str, float | None] = {}  # accepted, unsettled: id -> deadline
        self.expired_ids: set[str] = set()
        self.answers: dict[str, Response] = {}  # the one Response the server sent per id
        self.settled: dict[str, str] = {}  # id -> "response" | "closed", at the client
        self.last_answered = 0
        self.calls = 0
        self.bytes = 0
        self.refused = 0
        self.expired = 0
        self.ok_bytes_at_client = 0

    @initialize(
        max_calls=st.none() | st.integers(min_value=0, max_value=8),
        max_bytes=st.none() | st.integers(min_value=0, max_value=200),
        max_inflight=st.integers(min_value=1, max_value=8),
        max_deadline=st.none() | st.floats(min_value=0.05, max_value=3.0),
        small_frames=st.booleans(),
        close_after=st.integers(min_value=1, max_value=20),
        first=st.lists(_call_args, max_size=8),
    )
    def start(
        self,
        max_calls: int | None,
        max_bytes: int | None,
        max_inflight: int,
        max_deadline: float | None,
        small_frames: bool,
        close_after: int,
        first: list[tuple[str, str, int]],
    ) -> None:
        """Budgets are drawn (None: no limit; 0: none at all), how many answers the
        server sends before the channel may end, and the program's first calls."""
        self.close_after = close_after
        self.max_calls, self.max_bytes = max_calls, max_bytes
        self.max_inflight, self.max_deadline = max_inflight, max_deadline
        self.cap = SMALL_CAP if small_frames else MAX_FRAME_BYTES
        limits = CallLimits(
            max_calls=max_calls,
            max_bytes=max_bytes,
            max_inflight=max_inflight,
            max_call_deadline=max_deadline,
        )
        self.server = ServerCore(limits, max_frame_bytes=self.cap)
        self.client = ClientCore(max_frame_bytes=self.cap)
        self.calls_made(first)

    # -- the program ------------------------------------------------------------------

    @rule(batch=st.lists(_call_args, min_size=1, max_size=4))
    def calls_made(self, batch: list[tuple[str, str, int]]) -> None:
        """The program makes a few calls at once (as under ``asyncio.gather``)."""
        for tool, args, deadline_ms in batch:
            self.call(tool, args, deadline_ms)

    def call(self, tool: str, args: str, deadline_ms: int) -> None:
        """One call: its frame goes onto the link (or it is refused locally, or closed)."""
        pending = self.client.pending
        if self.closed:
            with pytest.raises(ChannelClosed):
                self.client.request(tool, args, deadline_ms)
            return
        too_large: LocalFrameTooLarge | None = None
        try:
            call_id, frame = self.client.request(tool, args, deadline_ms)
        except LocalFrameTooLarge as exc:
            too_large = exc
        if too_large is not None:
            assert too_large.size > self.cap
            assert self.client.pending == pending  # nothing registered
            event("request too large for one frame")
            return
        assert call_id not in self.sent
        assert len(frame) - 4 <= self.cap
        self.sent[call_id] = (tool, args, deadline_ms)
        self.up.write(frame)

    # -- the link, child to parent, and admission ------------------------------------

    @rule(amount=_amounts, sizes=_sizes, arm=st.booleans())
    def deliver_requests(self, amount: int, sizes: list[int], arm: bool) -> None:
        """Some of the client's bytes reach the server, which admits each whole Request.

        An accepted call gets its deadline armed (when ``arm``: a handler that does not
        settle at once) at the current time.
        """
        if self.closed:
            return
        for chunk in chunks_of(self.up.take(amount), sizes):
            self.server.receive_data(chunk)
            while not isinstance(request := self.server.next_request(), Signal):
                self.admit(request, arm)

    def admit(self, request: Request, arm: bool) -> None:
        assert self.sent[request.id] == (request.tool, request.args, request.deadline_ms)
        assert request.id not in self.seen
        self.seen.append(request.id)
        if len(self.inflight) >= self.max_inflight:
            refusal = "in-flight"
        elif self.max_calls is not None and self.calls >= self.max_calls:
            refusal = "call quota"
        elif self.max_bytes is not None and self.bytes >= self.max_bytes:
            refusal = "result quota"
        else:
            refusal = ""
        out = self.server.admit(request)
        if refusal:
            assert out is not None
            response = response_of(out, self.cap)
            assert (response.id, response.ok, response.kind) == (request.id, False, Kind.LIMIT)
            assert refusal in response.error
            self.refused += 1
            self.answer(response, out)
            event(f"refused: {refusal}")
            return
        assert out is None
        self.calls += 1
        self.inflight[request.id] = None
        if arm:
            deadline = self.server.arm_deadline(request.id, request.deadline_ms, self.now)
            timeout = self.expected_timeout(request.deadline_ms)
            assert deadline == (None if timeout is None else self.now + timeout)
            self.inflight[request.id] = deadline

    def expected_timeout(self, deadline_ms: int) -> float | None:
        """The child's wish, clamped to the parent's cap (the wish can only shorten it)."""
        wish = deadline_ms / 1000 if deadline_ms > 0 else None
        if wish is None or self.max_deadline is None:
            return self.max_deadline if wish is None else wish
        return min(wish, self.max_deadline)

    def answer(self, response: Response, frame: bytes | bytearray) -> None:
        """The server sent ``response``: the one answer its call will ever get."""
        assert response.id not in self.answers
        self.answers[response.id] = response
        self.down.write(frame)

    # -- the handlers --------------------------------------------------------------------

    @rule(data=st.data(), value=_values)
    def handler_returns(self, data: st.DataObject, value: str) -> None:
        """A handler returns a value for any call the server has seen, in any order.

        Only a call still in flight is answered; a value over the byte quota, or too large
        for one frame, is withheld and the call answered ``limit`` instead.
        """
        if not self.seen:
            return
        call_id = data.draw(st.sampled_from(self.seen), label="call")
        out = self.server.settle(call_id, value)
        if call_id not in self.inflight:
            assert out is None
            if call_id in self.expired_ids:
                event("settle after expiry")
            return
        del self.inflight[call_id]
        assert out is not None
        response = response_of(out, self.cap)
        size = utf8_size(value)
        encoded = msgspec.json.encode(Response(v=VERSION, id=call_id, ok=True, value=value))
        if self.max_bytes is not None and self.bytes + size > self.max_bytes:
            assert (response.ok, response.kind) == (False, Kind.LIMIT)
            self.refused += 1
            event("value withheld: byte quota")
        elif len(encoded) > self.cap:
            assert (response.ok, response.kind) == (False, Kind.LIMIT)
            self.refused += 1
            event("value withheld: frame cap")
        else:
            assert response == Response(v=VERSION, id=call_id, ok=True, value=value)
            self.bytes += size
        self.answer(response, out)

    @rule(data=st.data(), kind=kinds(), error=texts(max_size=40))
    def handler_fails(self, data: st.DataObject, kind: Kind, error: str) -> None:
        """A handler fails, with a kind, for any call the server has seen, in any order."""
        if not self.seen:
            return
        call_id = data.draw(st.sampled_from(self.seen), label="call")
        out = self.server.settle_error(call_id, kind, error)
        if call_id not in self.inflight:
            assert out is None
            return
        del self.inflight[call_id]
        assert out is not None
        response = response_of(out, self.cap)
        assert response == Response(v=VERSION, id=call_id, ok=False, kind=kind, error=error)
        self.answer(response, out)

    # -- the clock ---------------------------------------------------------------------

    @rule(dt=st.sampled_from([0.0, 0.001, 0.05, 0.5, 1.0, 2.5]))
    def time_passes(self, dt: float) -> None:
        """Time passes; every call whose deadline is due is answered ``transient``, once."""
        self.now += dt
        due = {i for i, d in self.inflight.items() if d is not None and d <= self.now}
        expired = self.server.expire(self.now)
        assert sorted(i for i, _ in expired) == sorted(due)
        for call_id, frame in expired:
            response = response_of(frame, self.cap)
            assert (response.id, response.ok, response.kind) == (call_id, False, Kind.TRANSIENT)
            del self.inflight[call_id]
            self.expired_ids.add(call_id)
            self.answer(response, frame)
        self.expired += len(expired)
        if expired:
            event("expired")
        left = [d for d in self.inflight.values() if d is not None]
        assert self.server.next_deadline() == (min(left) if left else None)

    # -- the link, parent to child --------------------------------------------------------

    @rule(amount=_amounts, sizes=_sizes)
    def deliver_responses(self, amount: int, sizes: list[int]) -> None:
        """Some of the server's bytes reach the client, which matches Responses by id."""
        if self.closed:
            return
        for chunk in chunks_of(self.down.take(amount), sizes):
            self.client.receive_data(chunk)
            while not isinstance(response := self.client.next_response(), Signal):
                self.received(response)

    def received(self, response: Response) -> None:
        assert response == self.answers[response.id]
        assert response.id not in self.settled
        self.settled[response.id] = "response"
        if response.ok:
            self.ok_bytes_at_client += utf8_size(response.value)
        if int(response.id) < self.last_answered:
            event("answered out of order")
        self.last_answered = int(response.id)

    # -- the end -------------------------------------------------------------------------

    @precondition(lambda self: not self.closed and len(self.answers) >= self.close_after)
    @rule(keep=st.integers(min_value=0, max_value=1 << 30))
    def parent_closes(self, keep: int) -> None:
        """The parent goes away: it abandons its calls, some bytes still arrive, then EOF.

        EOF between frames is a clean end; inside a frame it is a TruncatedFrame. Either
        way, every call still pending at the client is failed by the close.
        """
        assert sorted(self.server.abandon_all()) == sorted(self.inflight)
        self.inflight.clear()
        self.client.receive_data(self.down.take(keep))
        self.client.receive_data(b"")
        clean = self.down.at_boundary
        try:
            while not isinstance(response := self.client.next_response(), Signal):
                self.received(response)
        except TruncatedFrame:
            assert not clean
            event("EOF inside a frame")
        else:
            assert clean
            assert response is Signal.CLOSED
            assert self.client.closed
        self.close_client()

    @precondition(lambda self: not self.closed and len(self.answers) >= self.close_after)
    @rule()
    def child_closes(self) -> None:
        """The child closes its channel: its pending calls fail; the server reads EOF."""
        self.close_client()
        self.server.receive_data(self.up.take(len(self.up.pending)))
        self.server.receive_data(b"")
        while not isinstance(request := self.server.next_request(), Signal):
            assert request.id in self.sent
        assert request is Signal.CLOSED
        assert sorted(self.server.abandon_all()) == sorted(self.inflight)
        self.inflight.clear()

    def close_client(self) -> None:
        failed = self.client.close()
        assert sorted(failed) == sorted(set(self.sent) - set(self.settled))
        for call_id in failed:
            self.settled[call_id] = "closed"
        self.closed = True
        assert self.client.closed
        assert self.client.pending == 0

    def teardown(self) -> None:
        """Every call the program made is settled exactly once: answered, or failed by close."""
        if not self.closed:
            self.close_client()
        assert set(self.settled) == set(self.sent)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def budgets_hold(self) -> None:
        """In-flight cap and both quotas hold; the server's accounting matches the model."""
        stats = self.server.statistics()
        assert self.server.inflight == stats.inflight == len(self.inflight)
        assert stats.inflight <= self.max_inflight
        assert stats.peak_inflight <= self.max_inflight
        if self.max_calls is not None:
            assert stats.calls <= self.max_calls
        if self.max_bytes is not None:
            assert stats.bytes <= self.max_bytes
            assert self.ok_bytes_at_client <= self.max_bytes
        assert (stats.calls, stats.bytes, stats.refused, stats.expired) == (
            self.calls,
            self.bytes,
            self.refused,
            self.expired,
        )
        assert all(self.server.is_inflight(i) for i in self.inflight)

    @invariant()
    def client_matches(self) -> None:
        """The client's pending calls are exactly those sent and not yet settled."""
        assert self.client.pending == len(self.sent) - len(self.settled)


TestCallSession = CallSession.TestCase
# Half the profile's examples (each one is up to 50 steps): 100 in CI.
TestCallSession.settings = settings(
    max_examples=settings().max_examples // 2, stateful_step_count=50, deadline=None
)


# -- plain tests ----------------------------------------------------------------------------


def request(call_id: str, deadline_ms: int = 0) -> Request:
    """A Request with the given id."""
    return Request(v=VERSION, id=call_id, tool="t", args="{}", deadline_ms=deadline_ms)


def test_an_id_already_in_flight_is_a_protocol_error_and_reusable_after_settling() -> None:
    """A Request reusing an in-flight id is a RemoteProtocolError; once settled, it is free."""
    server = ServerCore()
    assert server.admit(request("a")) is None
    with pytest.raises(RemoteProtocolError, match="already in flight"):
        server.admit(request("a"))
    assert server.settle("a", "1") is not None
    assert server.admit(request("a")) is None
    assert server.statistics().calls == 2


def test_in_flight_cap_is_checked_before_quotas_and_refusals_are_not_calls() -> None:
    """Over the cap a call is answered ``limit`` at once and is not counted as a call."""
    server = ServerCore(CallLimits(max_calls=1, max_inflight=1))
    assert server.admit(request("1")) is None
    refusal = server.admit(request("2"))
    assert refusal is not None
    response = response_of(refusal, MAX_FRAME_BYTES)
    assert (response.id, response.ok, response.kind) == ("2", False, Kind.LIMIT)
    assert "in-flight" in response.error
    assert server.statistics().calls == 1
    assert server.settle("1", "x") is not None
    quota = server.admit(request("3"))
    assert quota is not None
    assert "call quota" in response_of(quota, MAX_FRAME_BYTES).error


def test_no_limit_is_none_and_zero_is_zero() -> None:
    """A quota of None is no limit; a quota of 0 admits no call at all."""
    unlimited = ServerCore(CallLimits(max_calls=None, max_bytes=None))
    for i in range(100):
        assert unlimited.admit(request(str(i))) is None
        assert unlimited.settle(str(i), "x" * 1000) is not None
    for zero in (CallLimits(max_calls=0), CallLimits(max_bytes=0)):
        server = ServerCore(zero)
        refusal = server.admit(request("1"))
        assert refusal is not None
        assert response_of(refusal, MAX_FRAME_BYTES).kind is Kind.LIMIT
        assert server.statistics().calls == 0


@given(
    st.integers(min_value=0, max_value=10**7),
    st.none() | st.floats(min_value=1e-3, max_value=1e5),
)
def test_effective_deadline_only_shortens(deadline_ms: int, cap: float | None) -> None:
    """The child's wish is clamped to the cap; no wish means the cap; no cap means the wish."""
    got = effective_deadline(deadline_ms, cap)
    wish = deadline_ms / 1000 if deadline_ms else None
    if wish is None:
        assert got == cap
    elif cap is None:
        assert got == wish
    else:
        assert got == min(wish, cap)


def test_client_fails_pending_calls_on_eof_and_refuses_new_ones() -> None:
    """On EOF the client reports CLOSED; close() returns the pending ids; new calls raise."""
    client = ClientCore()
    ids = [client.request("t", "{}")[0] for _ in range(3)]
    client.receive_data(b"")
    assert client.next_response() is Signal.CLOSED
    assert client.closed
    assert sorted(client.close()) == sorted(ids)
    with pytest.raises(ChannelClosed):
        client.request("t", "{}")


def test_client_refuses_a_response_for_an_unknown_id() -> None:
    """A Response for no pending call is a RemoteProtocolError at the client."""
    client = ClientCore()
    client.request("t", "{}")
    client.receive_data(frame_message(Response(v=VERSION, id="99", ok=True, value="x")))
    with pytest.raises(RemoteProtocolError, match="unknown call id"):
        client.next_response()


def test_client_refuses_a_negative_deadline() -> None:
    """A negative deadline is refused locally and registers nothing."""
    client = ClientCore()
    with pytest.raises(LocalProtocolError):
        client.request("t", "{}", deadline_ms=-1)
    assert client.pending == 0


def test_a_value_too_large_for_one_frame_is_answered_limit_and_not_counted() -> None:
    """A value that cannot be framed is withheld: the call is answered ``limit``, 0 bytes."""
    server = ServerCore(max_frame_bytes=SMALL_CAP)
    assert server.admit(request("1")) is None
    frame = server.settle("1", "v" * SMALL_CAP)
    assert frame is not None
    response = response_of(frame, SMALL_CAP)
    assert (response.id, response.ok, response.kind) == ("1", False, Kind.LIMIT)
    assert server.statistics().bytes == 0
    assert server.inflight == 0


def test_a_value_over_the_byte_quota_is_withheld_and_later_calls_refused() -> None:
    """A value past MaxBytes is answered ``limit``; once the quota is spent, calls are refused."""
    server = ServerCore(CallLimits(max_bytes=10))
    assert server.admit(request("1")) is None
    assert server.admit(request("2")) is None
    first = server.settle("1", "\u00e9" * 5)  # 10 bytes of UTF-8: exactly the quota
    assert first is not None
    assert response_of(first, MAX_FRAME_BYTES).ok
    withheld = server.settle("2", "x")
    assert withheld is not None
    assert response_of(withheld, MAX_FRAME_BYTES).kind is Kind.LIMIT
    assert server.statistics().bytes == 10
    refusal = server.admit(request("3"))
    assert refusal is not None
    assert "result quota" in response_of(refusal, MAX_FRAME_BYTES).error


def test_an_expired_call_is_answered_transient_once_and_late_settles_are_ignored() -> None:
    """At its deadline a call is answered ``transient``; its handler's late answer is dropped."""
    server = ServerCore(CallLimits(max_call_deadline=2.0))
    for call_id, deadline_ms in (("a", 500), ("b", 5000), ("c", 0)):
        assert server.admit(request(call_id, deadline_ms)) is None
    assert server.arm_deadline("a", 500, now=10.0) == 10.5  # the wish, shorter than the cap
    assert server.arm_deadline("b", 5000, now=10.0) == 12.0  # clamped to the cap
    assert server.arm_deadline("c", 0, now=10.0) == 12.0  # no wish: the cap
    assert server.next_deadline() == 10.5
    assert server.expire(10.4) == []
    expired = server.expire(10.5)
    assert [call_id for call_id, _ in expired] == ["a"]
    response = response_of(expired[0][1], MAX_FRAME_BYTES)
    assert (response.id, response.ok, response.kind) == ("a", False, Kind.TRANSIENT)
    assert server.settle("a", "late") is None
    assert server.settle_error("a", Kind.RAISED, "late") is None
    assert server.settle("b", "in time") is not None
    assert sorted(call_id for call_id, _ in server.expire(100.0)) == ["c"]
    assert server.expire(200.0) == []
    assert server.statistics().expired == 2


def test_failure_frames_respect_the_servers_frame_cap() -> None:
    """A failure with a long error is cut so that its frame fits the server's cap."""
    server = ServerCore(max_frame_bytes=1024)
    assert server.admit(request("1")) is None
    frame = server.settle_error("1", Kind.RAISED, "\x00" * 1000)
    assert frame is not None
    assert len(frame) - 4 <= 1024


def test_a_huge_error_is_still_answered() -> None:
    """A handler failure with a huge error text is still answered, with the text cut."""
    server = ServerCore()
    assert server.admit(request("1")) is None
    frame = server.settle_error("1", Kind.RAISED, "\x00" * (MAX_FRAME_BYTES // 2))
    assert frame is not None
    response = response_of(frame, MAX_FRAME_BYTES)
    assert (response.id, response.ok, response.kind) == ("1", False, Kind.RAISED)


def test_a_value_that_is_not_valid_unicode_is_still_answered() -> None:
    """A handler value with a lone surrogate still gets its call answered (and settled)."""
    server = ServerCore()
    assert server.admit(request("1")) is None
    frame = server.settle("1", "name-\udcff.txt")
    assert frame is not None
    response = response_of(frame, MAX_FRAME_BYTES)
    assert (response.id, response.ok, response.value) == ("1", True, "name-\ufffd.txt")
    assert server.inflight == 0


# -- hostile shapes (issue 12) --------------------------------------------------------------

#: A frame nested far deeper than any decoder on a Python stack can follow.
DEEP: Final = encode_frame(b'{"v":[' + b"[" * 10_000 + b"]" * 10_000 + b"]}")


def test_a_deeply_nested_request_is_a_protocol_error_at_the_server_core() -> None:
    """The parent's core raises RemoteProtocolError (never RecursionError) and stays failed."""
    server = ServerCore()
    server.receive_data(frame_message(request("1")) + DEEP)
    first = server.next_request()
    assert isinstance(first, Request)
    assert server.admit(first) is None
    with pytest.raises(RemoteProtocolError):
        server.next_request()
    assert server.abandon_all() == ["1"]  # nothing accepted is forgotten


def test_a_deeply_nested_response_is_a_protocol_error_at_the_client_core() -> None:
    """The child's core raises RemoteProtocolError; close() still hands back every call."""
    client = ClientCore()
    ids = [client.request("t", "{}")[0] for _ in range(3)]
    client.receive_data(DEEP)
    with pytest.raises(RemoteProtocolError):
        client.next_response()
    assert sorted(client.close()) == sorted(ids)


def test_a_deeply_nested_response_fails_every_pending_call_of_the_client() -> None:
    """The real child Client: the call that reads the frame and every other pending call
    fail with the RemoteProtocolError, as do later calls; none of them hangs."""
    down, up = os.pipe(), os.pipe()
    client = Client(down[0], up[1])
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.call("t", "{}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, daemon=True) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while client.calls_made < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.write(down[1], DEEP)
        for t in threads:
            t.join(timeout=10)
        assert not any(t.is_alive() for t in threads)
        assert len(errors) == 3
        assert all(isinstance(e, RemoteProtocolError) for e in errors), errors
        with pytest.raises(RemoteProtocolError):
            client.call("t", "{}")
    finally:
        client.close()
        os.close(down[1])
        os.close(up[0])


@pytest.mark.parametrize("deadline_ms", [2**63, 10**400], ids=["2**63", "10**400"])
def test_a_deadline_outside_int64_is_a_protocol_error_at_the_server_core(
    deadline_ms: int,
) -> None:
    """``deadline_ms`` past Go's int64 is refused on receipt, before any arithmetic."""
    server = ServerCore(CallLimits(max_call_deadline=5.0))
    payload = b'{"v":1,"id":"1","tool":"t","args":"","deadline_ms":%d}' % deadline_ms
    server.receive_data(encode_frame(payload))
    with pytest.raises(RemoteProtocolError):
        server.next_request()


def test_the_largest_int64_deadline_is_clamped_like_any_other() -> None:
    """2**63 - 1 ms is a legal wish: it decodes, and the cap still wins."""
    server = ServerCore(CallLimits(max_call_deadline=5.0))
    server.receive_data(frame_message(request("1", deadline_ms=2**63 - 1)))
    got = server.next_request()
    assert isinstance(got, Request)
    assert server.admit(got) is None
    assert server.arm_deadline("1", got.deadline_ms, now=0.0) == 5.0


def test_client_refuses_a_deadline_outside_int64() -> None:
    """The child never sends a deadline a Go parent could not read; nothing is registered."""
    client = ClientCore()
    with pytest.raises(LocalProtocolError, match="int64"):
        client.request("t", "{}", deadline_ms=2**63)
    assert client.pending == 0


def test_client_sends_lone_surrogates_as_u_fffd() -> None:
    """A call's text with lone surrogates is sent with U+FFFD, as every frame is."""
    client = ClientCore()
    _, frame = client.request("t\udcff", '"\ud800"')
    server = ServerCore()
    server.receive_data(frame)
    got = server.next_request()
    assert isinstance(got, Request)
    assert (got.tool, got.args) == ("t\ufffd", '"\ufffd"')
