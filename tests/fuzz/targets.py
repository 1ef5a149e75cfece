"""The fuzz targets: one per role, each ``target(data: bytes) -> None``.

A target raises (an ``AssertionError``, or whatever escaped the role) when the protocol
broke a promise; any other return is a pass. The bytes are a script, read by
:class:`Script`: every choice (which operation, which frame, where to cut the stream, which
text) is taken from them, so a fuzzer that mutates bytes explores sequences of operations,
and an input that crashes replays exactly. When the bytes run out every choice reads 0.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Final, TypeVar

import anyio
import anyio.lowlevel
import msgspec
from anyio.from_thread import BlockingPortal, start_blocking_portal

from protocol import (
    MAX_FRAME_BYTES,
    VERSION,
    CallError,
    CallLimits,
    ClientCore,
    FdChannel,
    FrameDecoder,
    Kind,
    LocalFrameTooLarge,
    LocalProtocolError,
    Message,
    ProtocolError,
    RemoteProtocolError,
    Request,
    Response,
    Result,
    RunnerCore,
    Server,
    ServerCore,
    Signal,
    Start,
    StartBinding,
    StartBudget,
    StarterCore,
    encode_frame,
    frame_message,
)
from protocol._messages import (
    REQUEST_DECODER,
    RESPONSE_DECODER,
    RESULT_DECODER,
    START_DECODER,
    decode,
)
from protocol._start import State

__all__ = [
    "HANG_LIMIT",
    "TARGETS",
    "Script",
    "client_core",
    "runner_core",
    "server_core",
    "server_pipes",
    "starter_core",
]

T = TypeVar("T")
M = TypeVar("M", bound=Message)

#: Seconds one input of the Server target may take before it counts as a hang.
HANG_LIMIT: Final = 10.0

_INT64_MAX: Final = 2**63 - 1

# Text worth over-sampling: what breaks framings and encoders, non-ASCII up to four bytes of
# UTF-8, and lone surrogates (which the wire sends as U+FFFD).
_ALPHABET: Final = 'a1 \n"\\/\x00\x1f\x7f<&\u2028\ufeff\u00e9\u20ac\U0001f600\ud800\udcff{}[]'

# Numbers where the rules change: zero, int64's edges and past them, a float's range.
_INTS: Final = [0, 1, 2, 7, 1000, _INT64_MAX, _INT64_MAX + 1, 2**64, -1, -(2**63) - 1, 10**400]


def _deep(depth: int, head: bytes = b'{"v":1,"x":') -> bytes:
    return head + b"[" * depth + b"]" * depth + b"}"


#: Payloads no peer should send: each must be refused with a protocol error, never crash.
HOSTILE_PAYLOADS: Final = [
    _deep(1_000),
    _deep(10_000),
    _deep(100_000),
    _deep(10_000, b'{"x":'),
    _deep(10_000, b'{"v":2,"x":'),
    b'{"v":' + b"[" * 5_000,
    b'{"v":1,"x":' + b'{"a":' * 3_000 + b"1" + b"}" * 3_000 + b"}",
    b'{"v":1,"id":"1","tool":"t","args":"","deadline_ms":1' + b"0" * 400 + b"}",
    b'{"v":1' + b"0" * 5_000 + b"}",
    b'{"v":2,"x":1e400}',
    b'{"v":2,"id":"\\ud800"}',
    b'{"v":2,"args":"\xff"}',
    b'{"v":1,"id":"\xed\xa0\x80","tool":"t","args":""}',
    b'{"v":1,"result_id":"r","ok":false,"kind":"bogus"}',
    b'{"v":1,"result_id":"r","ok":true,"calls":-1}',
    b'{"v":1,"program":"p","bindings":[{"name":' + b"[" * 2_000 + b"]" * 2_000 + b"}],"
    b'"budget":{"wall_clock":9223372036854775808},"result_id":"r"}',
    b"[]",
    b"null",
    b"\xff\xfe",
    b'{"v":1,"id":"","tool":"t","args":""}',
]

#: Framing that is broken before any JSON is read.
HOSTILE_FRAMING: Final = [b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x01\x00\x00\x01"]


class Script:
    """The fuzzer's bytes, read as a sequence of choices (0 once they run out)."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def more(self) -> bool:
        """Whether any bytes are left."""
        return self._pos < len(self._data)

    def byte(self) -> int:
        """The next byte (0 when none is left)."""
        if self._pos >= len(self._data):
            return 0
        self._pos += 1
        return self._data[self._pos - 1]

    def below(self, n: int) -> int:
        """A choice in ``range(n)``."""
        return self.byte() % n if n > 1 else 0

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options``."""
        return options[self.below(len(options))]

    def take(self, n: int) -> bytes:
        """Up to ``n`` raw bytes."""
        chunk = self._data[self._pos : self._pos + n]
        self._pos += len(chunk)
        return chunk

    def text(self, max_len: int = 12) -> str:
        """Short text over an awkward alphabet (lone surrogates included)."""
        return "".join(self.pick(_ALPHABET) for _ in range(self.below(max_len + 1)))

    def ident(self) -> str:
        """An id: mostly from a handful, so that duplicates and stale ids happen."""
        choice = self.below(8)
        if choice < 6:
            return str(choice + 1)
        return self.text(70) or "x"  # sometimes over the 64-character limit, or odd

    def integer(self) -> int:
        """A number near one of the edges of the rules."""
        return self.pick(_INTS)


# -- frames from the script ---------------------------------------------------------------


def _hostile(s: Script) -> bytes:
    """Bytes a broken or hostile peer sends where a frame belongs."""
    choice = s.below(4)
    if choice == 0:
        return encode_frame(s.pick(HOSTILE_PAYLOADS))
    if choice == 1:
        return s.pick(HOSTILE_FRAMING)
    if choice == 2:
        raw = s.take(s.below(64))
        return encode_frame(raw) if raw else b"\x00\x00\x00\x01{"
    return s.take(s.below(64))  # unframed bytes


def _mutated(frame: bytes | bytearray, s: Script) -> bytes:
    """``frame`` with one byte of its payload changed, or cut short."""
    data = bytearray(frame)
    if s.below(2):
        i = 4 + s.below(max(1, len(data) - 4))
        if i < len(data):
            data[i] = s.byte()
        return bytes(data)
    return bytes(data[: s.below(len(data))])


def _framed(message: msgspec.Struct, s: Script) -> bytes:
    """``message`` framed; one frame_message refuses (a number past int64) framed by hand,
    as a peer that does not check would send it."""
    try:
        return bytes(frame_message(message))  # type: ignore[arg-type]
    except ProtocolError:
        return encode_frame(json.dumps(msgspec.to_builtins(message)).encode())


def _request(s: Script, call_id: str | None = None) -> Request:
    return Request(
        v=VERSION if s.below(16) else s.integer(),
        id=call_id or s.ident(),
        tool=s.text(),
        args=s.text(),
        deadline_ms=s.pick([0, 0, 1, 5, 2500, _INT64_MAX]),
    )


def _response(s: Script, call_id: str) -> Response:
    ok = bool(s.below(2))
    return Response(
        v=VERSION if s.below(16) else s.integer(),
        id=call_id,
        ok=ok,
        value=s.text() if ok else "",
        kind=None if ok else s.pick([None, *Kind]),
        error="" if ok else s.text(),
    )


def _start(s: Script) -> Start:
    bindings = tuple(StartBinding(name=s.text(), signature=s.text()) for _ in range(s.below(3)))
    budget = StartBudget(
        wall_clock=s.pick([0, 30_000_000_000, _INT64_MAX, _INT64_MAX + 1]),
        max_calls=s.pick([0, 100, _INT64_MAX + 1]),
        max_bytes=s.pick([0, 1 << 20]),
        max_memory=s.pick([0, 1 << 28, 2**64]),
        max_inflight=s.pick([0, 64, _INT64_MAX + 1]),
    )
    return Start(
        v=VERSION,
        program=s.text(40),
        bindings=None if s.below(4) == 0 else bindings,
        budget=budget,
        result_id=s.pick(["r1", "r2", s.text(70) or "r"]),
    )


def _result(s: Script, result_id: str) -> Result:
    ok = bool(s.below(2))
    return Result(
        v=VERSION,
        result_id=result_id,
        ok=ok,
        value=s.text() if ok else "",
        kind=None if ok else s.pick([None, *Kind]),
        error="" if ok else s.text(),
        calls=s.pick([0, 3, _INT64_MAX, _INT64_MAX + 1]),
        bytes=s.pick([0, 120, 2**64]),
    )


def _feed(core: ServerCore | ClientCore | StarterCore | RunnerCore, s: Script, wire: bytes) -> None:
    """Give ``wire`` to ``core`` in chunks cut where the script says."""
    pos = 0
    while pos < len(wire):
        n = 1 + s.below(256) if s.below(4) else len(wire) - pos
        core.receive_data(wire[pos : pos + n])
        pos += n


def _check_frame(frame: bytes | bytearray, decoder: msgspec.json.Decoder[M], cap: int) -> M:
    """A frame a role produced: one whole frame, within the cap, that our side decodes."""
    d = FrameDecoder(cap)
    d.receive_data(frame)
    payload = d.next_frame()
    assert isinstance(payload, bytes), f"a role produced a broken frame: {payload!r}"
    assert d.buffered == 0, "a role produced trailing bytes after its frame"
    return decode(decoder, payload)


# -- ServerCore -----------------------------------------------------------------------------


def server_core(data: bytes) -> None:
    """The parent's call-channel core against a scripted child and scripted handlers."""
    s = Script(data)
    cap = 1 + s.below(4)
    max_calls = s.pick([None, None, 1, 5])
    max_bytes = s.pick([None, None, 8, 200])
    frame_cap = s.pick([MAX_FRAME_BYTES, 1024])
    limits = CallLimits(
        max_calls=max_calls,
        max_bytes=max_bytes,
        max_inflight=cap,
        max_call_deadline=s.pick([None, 0.5, 2.0]),
    )
    core = ServerCore(limits, max_frame_bytes=frame_cap)
    inflight: set[str] = set()  # what the model says is accepted and unanswered
    admitted = 0
    delivered = 0
    now = 0.0
    eof = False

    def answered(frame: bytearray | None, call_id: str, *, expect: bool) -> None:
        nonlocal delivered
        if not expect:
            assert frame is None, f"call {call_id!r} answered twice"
            return
        assert frame is not None, f"call {call_id!r} settled with no answer"
        response = _check_frame(frame, RESPONSE_DECODER, frame_cap)
        assert isinstance(response, Response)
        assert response.id == call_id
        if response.ok:
            delivered += len(response.value.encode())
        inflight.discard(call_id)

    def drain() -> bool:
        nonlocal admitted
        while True:
            item = core.next_request()
            if item is Signal.NEED_DATA:
                return True
            if item is Signal.CLOSED:
                return False
            assert isinstance(item, Request)
            duplicate = item.id in inflight
            try:
                refusal = core.admit(item)
            except RemoteProtocolError:
                assert duplicate, "a fresh id was refused as a duplicate"
                raise
            assert not duplicate, f"id {item.id!r} admitted twice while in flight"
            if refusal is None:
                admitted += 1
                inflight.add(item.id)
                assert core.inflight <= cap, "the in-flight cap did not hold"
                if s.below(2):
                    core.arm_deadline(item.id, item.deadline_ms, now)
            else:
                response = _check_frame(refusal, RESPONSE_DECODER, frame_cap)
                assert isinstance(response, Response)
                assert (response.id, response.ok, response.kind) == (item.id, False, Kind.LIMIT)

    try:
        while s.more():
            op = s.below(8)
            if op <= 2 and not eof:
                if op == 0:
                    wire = _framed(_request(s), s)
                elif op == 1:
                    wire = _mutated(_framed(_request(s), s), s)
                else:
                    wire = _hostile(s)
                _feed(core, s, wire)
                if not drain():
                    eof = True
            elif op == 3 and inflight:
                call_id = s.pick(sorted(inflight))
                answered(core.settle(call_id, s.text(s.pick([4, 300, 2000]))), call_id, expect=True)
            elif op == 4 and inflight:
                call_id = s.pick(sorted(inflight))
                frame = core.settle_error(call_id, s.pick(list(Kind)), s.text())
                answered(frame, call_id, expect=True)
            elif op == 5:
                now += s.pick([0.1, 0.6, 3.0])
                for call_id, frame in core.expire(now):
                    assert call_id in inflight, f"expired {call_id!r}, not in flight"
                    answered(frame, call_id, expect=True)
            elif op == 6:
                call_id = s.ident()
                if call_id not in inflight:
                    answered(core.settle(call_id, "late"), call_id, expect=False)
            elif op == 7 and not eof:
                core.receive_data(b"")
                eof = not drain()
                assert eof, "end of stream did not end the stream"
        for call_id in sorted(inflight):  # the handlers finish: each call answered once
            answered(core.settle(call_id, "v"), call_id, expect=True)
        assert not inflight
        assert core.inflight == 0
    except ProtocolError:
        lost = set(core.abandon_all()) ^ inflight
        assert not lost, f"calls lost or invented when the channel failed: {lost}"
    stats = core.statistics()
    assert stats.calls == admitted, "the parent's count of calls is off"
    assert stats.peak_inflight <= cap
    assert max_calls is None or stats.calls <= max_calls
    assert max_bytes is None or stats.bytes <= max_bytes
    assert stats.bytes == delivered


# -- ClientCore -----------------------------------------------------------------------------


def client_core(data: bytes) -> None:
    """The child's call-channel core against a scripted parent."""
    s = Script(data)
    frame_cap = s.pick([MAX_FRAME_BYTES, 1024])
    core = ClientCore(frame_cap)
    pending: set[str] = set()
    done = False

    def drain() -> None:
        nonlocal done
        while True:
            item = core.next_response()
            if item is Signal.NEED_DATA:
                return
            if item is Signal.CLOSED:
                assert core.closed
                done = True
                return
            assert isinstance(item, Response)
            assert item.id in pending, f"a response for {item.id!r} got through twice or unasked"
            pending.discard(item.id)
            assert core.pending == len(pending)

    try:
        while s.more() and not done:
            op = s.below(6)
            if op == 0:
                deadline = s.pick([0, 0, 10, _INT64_MAX, _INT64_MAX + 1, -1])
                before = core.pending
                try:
                    call_id, frame = core.request(s.text(), s.text(s.pick([8, 2000])), deadline)
                except (LocalProtocolError, LocalFrameTooLarge):
                    assert core.pending == before, "a refused call was registered"
                    continue
                assert call_id not in pending, "the client reused an id in flight"
                request = _check_frame(frame, REQUEST_DECODER, frame_cap)
                assert isinstance(request, Request)
                assert request.id == call_id
                pending.add(call_id)
            elif op in (1, 2):
                ids = sorted(pending)
                call_id = s.pick(ids) if ids and op == 1 else s.ident()
                wire = _framed(_response(s, call_id), s)
                if s.below(4) == 0:
                    wire = _mutated(wire, s)
                _feed(core, s, wire)
                drain()
            elif op == 3:
                _feed(core, s, _hostile(s))
                drain()
            elif op == 4:
                core.receive_data(b"")
                drain()
                assert done
            else:
                closed = core.close()
                assert set(closed) == pending
                assert len(closed) == len(pending)
                pending.clear()
                done = True
    except ProtocolError:
        pass
    closed = core.close()
    assert set(closed) == pending, f"calls lost or invented: {set(closed) ^ pending}"


# -- StarterCore and RunnerCore ---------------------------------------------------------------


def _check_failed_for_good(core: StarterCore | RunnerCore, error: ProtocolError) -> None:
    """A role that raised and is in ERROR raises that same error from then on."""
    if core.state is not State.ERROR:
        return
    for call in (lambda: core.receive_data(b"x"), _poll(core)):
        again = _raised(call)
        assert again is error, f"a failed role raised {again!r}, not {error!r}"


def _raised(call: Callable[[], object]) -> ProtocolError | None:
    try:
        call()
    except ProtocolError as exc:
        return exc
    return None


def _poll(core: StarterCore | RunnerCore) -> Callable[[], object]:
    return core.next_result if isinstance(core, StarterCore) else core.next_start


def starter_core(data: bytes) -> None:
    """The parent's start-channel core: one Start out, at most one Result accepted."""
    s = Script(data)
    frame_cap = s.pick([MAX_FRAME_BYTES, 1024])
    core = StarterCore(frame_cap)
    sent: Start | None = None
    got: list[Result] = []
    try:
        while s.more():
            op = s.below(5)
            state = core.state
            if op == 0:
                start = _start(s)
                try:
                    frame = core.send_start(start)
                except (LocalFrameTooLarge, LocalProtocolError):
                    if core.state is not State.ERROR:
                        assert core.state is state, "a refused Start changed the state"
                        continue
                    assert state is not State.IDLE, "a first Start failed the starter"
                    raise
                assert sent is None, "a second Start was sent"
                message = _check_frame(frame, START_DECODER, frame_cap)
                assert isinstance(message, Start)
                sent = start
            elif op in (1, 2, 3):
                rid = sent.result_id if sent is not None and op == 1 else s.pick(["r1", "zz"])
                if op == 3:
                    wire = _hostile(s)
                else:
                    wire = _framed(_result(s, rid), s)
                    if s.below(4) == 0:
                        wire = _mutated(wire, s)
                _feed(core, s, wire)
                item = core.next_result()
                if isinstance(item, Result):
                    assert sent is not None, "a Result was accepted before any Start"
                    assert item.result_id == valid_id(sent.result_id)
                    got.append(item)
                    assert len(got) == 1, "a second Result was accepted"
                    assert core.state is State.DONE
            else:
                core.receive_data(b"")
                item = core.next_result()
                assert item is Signal.CLOSED
                assert core.state is State.DONE
    except ProtocolError as exc:
        _check_failed_for_good(core, exc)


def valid_id(text: str) -> str:
    """An id as it arrives: lone surrogates become U+FFFD on the wire."""
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def runner_core(data: bytes) -> None:
    """The child's start-channel core: at most one Start accepted, one Result sent."""
    s = Script(data)
    frame_cap = s.pick([MAX_FRAME_BYTES, 1024])
    core = RunnerCore(frame_cap)
    start: Start | None = None
    results = 0
    try:
        while s.more():
            op = s.below(5)
            state = core.state
            if op in (0, 1):
                wire = _framed(_start(s), s) if op == 0 else _hostile(s)
                if op == 0 and s.below(4) == 0:
                    wire = _mutated(wire, s)
                _feed(core, s, wire)
                item = core.next_start()
                if isinstance(item, Start):
                    assert start is None, "a second Start was accepted"
                    assert core.state is State.RUNNING
                    start = item
            elif op == 2:
                rid = start.result_id if start is not None and s.below(4) else "zz"
                try:
                    frame = core.send_result(_result(s, rid))
                except (LocalFrameTooLarge, LocalProtocolError):
                    if core.state is not State.ERROR:
                        assert core.state is state, "a refused Result changed the state"
                        continue
                    raise
                results += 1
                assert results == 1, "a second Result was sent"
                assert start is not None
                assert core.state is State.DONE
                message = _check_frame(frame, RESULT_DECODER, frame_cap)
                assert isinstance(message, Result)
            else:
                core.receive_data(b"")
                item = core.next_start()
                assert item is Signal.CLOSED
                assert core.state is State.DONE
    except ProtocolError as exc:
        _check_failed_for_good(core, exc)


# -- Server over OS pipes ---------------------------------------------------------------------

#: What a handler does with a call, chosen by the call's ``args``.
_MODES: Final = ["value", "raise", "call-error", "not-str", "async", "async-raise", "block"]


def server_pipes(data: bytes, backend: str | None = None) -> None:
    """The real Server over a pipe pair, against a scripted child, with a hang limit.

    Without ``backend`` the script picks asyncio or trio, and the input runs on an event
    loop kept for the life of the process (a campaign runs a million inputs; starting a
    loop for each would cost more than the input). With ``backend``, a loop of its own.
    """
    s = Script(data)
    chosen = "trio" if s.below(2) else "asyncio"  # read either way: a script replays alike
    if backend is not None:
        anyio.run(_serve_script, s, backend=backend)
        return
    _portal(chosen).call(_serve_script, s)


_PORTALS: dict[str, tuple[BlockingPortal, contextlib.AbstractContextManager[BlockingPortal]]] = {}


def _portal(backend: str) -> BlockingPortal:
    """An event loop of ``backend`` running in a thread of its own, for the process's life."""
    held = _PORTALS.get(backend)
    if held is None:
        manager = start_blocking_portal(backend)
        held = _PORTALS[backend] = (manager.__enter__(), manager)  # kept: it owns the loop
    return held[0]


async def _serve_script(s: Script) -> None:
    cap = 1 + s.below(4)
    max_calls = s.pick([None, None, 3])
    hostile = False
    sent: list[str] = []
    wire = bytearray()
    for n in range(s.below(12)):
        if s.below(8) == 0:
            wire += _hostile(s)
            hostile = True
            break
        call_id = f"c{n}"
        mode = s.pick(_MODES)
        deadline = s.pick([0, 0, 1, 2]) if mode != "block" else s.pick([1, 2])
        req = Request(v=VERSION, id=call_id, tool="t", args=mode, deadline_ms=deadline)
        wire += frame_message(req)
        sent.append(call_id)
    cut = s.below(len(wire) + 1)

    down, up = os.pipe(), os.pipe()
    server: Server | None = None
    made: Counter[str] = Counter()
    awaited: Counter[str] = Counter()
    coroutines: list[Coroutine[object, object, str]] = []
    broken: list[str] = []  # (raised in a handler, an assertion would only fail its call)

    def handler(request: Request) -> str | Awaitable[str]:
        assert server is not None
        if server.statistics().inflight > cap:
            broken.append("the in-flight cap did not hold")
        made[request.id] += 1
        if made[request.id] > 1:
            broken.append(f"call {request.id!r} handled twice")
        mode = request.args
        if mode == "value":
            return "v" * 3
        if mode == "raise":
            raise ValueError("boom")
        if mode == "call-error":
            raise CallError(Kind.DENIED, "no")
        if mode == "not-str":
            return 42  # type: ignore[return-value]
        coroutine = _async_handler(request.id, mode, awaited)
        coroutines.append(coroutine)
        return coroutine

    limits = CallLimits(max_inflight=cap, max_calls=max_calls)
    server = Server(FdChannel(up[0], down[1]), handler, limits)
    child = FdChannel(down[0], up[1])
    answers: Counter[str] = Counter()
    outcome: list[BaseException | None] = []

    async def serve() -> None:
        assert server is not None
        try:
            await server.serve()
        except ProtocolError as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    async def play_child() -> None:
        decoder = FrameDecoder()
        await child.send_all(wire[:cut])
        await child.send_all(wire[cut:])
        want = set(sent)
        while want:
            item = decoder.next_frame()
            if item is Signal.NEED_DATA:
                try:
                    decoder.receive_data(await child.receive())
                except anyio.BrokenResourceError:
                    break
                continue
            if item is Signal.CLOSED:
                break
            response = decode(RESPONSE_DECODER, item)
            assert response.id in sent, f"an answer to {response.id!r}, never asked"
            answers[response.id] += 1
            assert answers[response.id] == 1, f"call {response.id!r} answered twice"
            want.discard(response.id)
        child.close()  # the child is done: the server sees EOF

    try:
        with anyio.fail_after(HANG_LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                tg.start_soon(play_child)
    finally:
        child.close()
    [result] = outcome
    assert not broken, broken
    assert result is None or isinstance(result, RemoteProtocolError), repr(result)
    for coroutine in coroutines:  # awaited to the end, or closed: never left pending
        assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    if not hostile:
        assert result is None, f"a clean stream failed the server: {result!r}"
        assert set(answers) == set(sent), f"requests lost: {set(sent) - set(answers)}"
    stats = server.statistics()
    assert stats.peak_inflight <= cap
    assert max_calls is None or stats.calls <= max_calls
    for call_id, n in awaited.items():
        assert n <= 1, f"handler of {call_id!r} awaited twice"


async def _async_handler(call_id: str, mode: str, awaited: Counter[str]) -> str:
    awaited[call_id] += 1
    await anyio.lowlevel.checkpoint()
    if mode == "async-raise":
        raise CallError(Kind.RAISED, "async boom")
    if mode == "block":
        await anyio.sleep_forever()
    return "async"


#: Every target by name, as the runner and the tests find them.
TARGETS: Final[dict[str, Callable[[bytes], None]]] = {
    "server_core": server_core,
    "client_core": client_core,
    "starter_core": starter_core,
    "runner_core": runner_core,
    "server_pipes": server_pipes,
}
