"""The child's Client holds calls past the parent's in-flight cap back, rather than send
them: the real Client (in a thread, under asyncio or blocking) against the real Server (on
the test's backend), over OS pipes, with the in-flight count taken where the parent
handles the calls."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    DEFAULT_MAX_INFLIGHT,
    VERSION,
    CallError,
    CallLimits,
    Client,
    FdChannel,
    FrameDecoder,
    Kind,
    RemoteProtocolError,
    Request,
    Response,
    Server,
    Signal,
    frame_message,
)
from protocol._messages import REQUEST_DECODER, decode

pytestmark = pytest.mark.anyio

T = TypeVar("T")

#: The longest any one exchange of these tests may take: far more than any needs, so that
#: only a hang reaches it.
WAIT = 20.0


class Parent:
    """The parent's handler: counts the calls it is handling, as the authority sees them.

    The first ``gate`` calls are held until that many are in flight at once, so that a
    client that queues reaches its cap for certain before any call is answered.
    """

    def __init__(self, gate: int = 0) -> None:
        self.gate = gate
        self.active = 0
        self.peak = 0
        self.arrived: list[str] = []
        self._all_in = anyio.Event()
        self.release = threading.Event()  # what a "hold" call waits for

    async def handle_async(self, request: Request) -> str:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.arrived.append(request.args)
        try:
            if self.active >= self.gate:
                self._all_in.set()
            if len(self.arrived) <= self.gate:
                await self._all_in.wait()
            if request.tool == "hold":
                # Set from the child's thread, where no anyio.Event can be set.
                while not self.release.is_set():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            await anyio.lowlevel.checkpoint()
            return request.args
        finally:
            self.active -= 1

    def handle(self, request: Request) -> Awaitable[str]:
        return self.handle_async(request)


@asynccontextmanager
async def channel(
    parent: Parent, *, cap: int, told: int | None = None
) -> AsyncIterator[tuple[Server, Client]]:
    """A Server with in-flight cap ``cap`` and a Client told ``told`` (by default the same
    cap), over a pair of pipes. On the way out the client is closed (its calls fail, so a
    child thread still waiting ends) and the server stops at the EOF."""
    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), parent.handle, CallLimits(max_inflight=cap))
    client = Client(down[0], up[1], max_inflight=cap if told is None else told)
    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve)
                try:
                    yield server, client
                finally:
                    parent.release.set()
                    client.close()
    finally:
        client.close()


async def in_child(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a thread, as the child's program (a hang ends at the test's limit)."""
    return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)


def run_asyncio(make: Callable[[], Awaitable[T]]) -> Callable[[], T]:
    async def main() -> T:
        return await asyncio.wait_for(make(), WAIT)

    return lambda: asyncio.run(main())


async def wait_until(predicate: Callable[[], bool]) -> None:
    while not predicate():  # noqa: ASYNC110 - the state of another thread: nothing to await
        await anyio.sleep(0.01)


def queued(client: Client, n: int) -> None:
    """Wait (in a plain thread) until ``n`` calls wait in ``client``'s queue. The test
    reads the queue itself: nothing else shows it."""
    deadline = time.monotonic() + WAIT
    while len(client._queued) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} calls were not queued within {WAIT} s")
        time.sleep(0.01)


# -- the queue --------------------------------------------------------------------------


@pytest.mark.parametrize(("cap", "calls"), [(1, 50), (4, 300), (DEFAULT_MAX_INFLIGHT, 1000)])
async def test_gather_past_the_cap_succeeds_with_the_cap_in_flight_at_most(
    cap: int, calls: int
) -> None:
    """Every call under asyncio.gather succeeds; the parent never has more than the cap
    in flight (by its own count and by its handler's), and reaches it."""
    parent = Parent(gate=cap)
    async with channel(parent, cap=cap) as (server, client):
        values = await in_child(
            run_asyncio(
                lambda: asyncio.gather(*(client.acall("echo", str(i)) for i in range(calls)))
            )
        )
    assert values == [str(i) for i in range(calls)]
    stats = server.statistics()
    assert (stats.calls, stats.refused, stats.peak_inflight) == (calls, 0, cap)
    assert parent.peak == cap
    assert client.calls_made == calls


async def test_queued_calls_are_sent_in_the_order_they_were_made() -> None:
    """With a cap of one, the parent sees the calls in the order the program made them."""
    parent = Parent()
    async with channel(parent, cap=1) as (_, client):
        await in_child(
            run_asyncio(lambda: asyncio.gather(*(client.acall("echo", str(i)) for i in range(30))))
        )
    assert parent.arrived == [str(i) for i in range(30)]
    assert parent.peak == 1


async def test_a_queued_call_cancelled_while_it_waits_is_never_sent() -> None:
    """A call cancelled in the queue never reaches the parent; its place in the queue goes
    to the next call, and the client goes on working."""
    parent = Parent()

    async def program() -> list[object]:
        held = asyncio.ensure_future(client.acall("hold", "held"))
        queued = asyncio.ensure_future(client.acall("echo", "cancelled"))
        while client.calls_made < 1:  # noqa: ASYNC110 - the client has no event for it
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        after = asyncio.ensure_future(client.acall("echo", "after"))
        await asyncio.sleep(0.05)
        parent.release.set()
        return [await held, await after]

    async with channel(parent, cap=1) as (server, client):
        assert await in_child(run_asyncio(program)) == ["held", "after"]
    assert parent.arrived == ["held", "after"]
    assert server.statistics().calls == client.calls_made == 2


async def test_blocking_calls_from_many_threads_wait_for_a_place() -> None:
    """Threads calling the blocking form at once all succeed, the cap in flight at most."""
    cap, n = 3, 24
    parent = Parent(gate=cap)

    def program() -> list[str]:
        out: list[str] = []
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                out.append(client.call("echo", str(i)))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not errors, errors
        return out

    async with channel(parent, cap=cap) as (server, client):
        values = await in_child(program)
    assert sorted(values, key=int) == [str(i) for i in range(n)]
    stats = server.statistics()
    assert (stats.calls, stats.refused, stats.peak_inflight) == (n, 0, cap)
    assert parent.peak == cap


async def test_a_blocking_call_gets_a_place_that_awaited_calls_held() -> None:
    """Under a running loop whose awaited calls hold every place, a blocking call waits
    for one of their answers (it reads them itself: the loop cannot run) and succeeds."""
    parent = Parent()

    async def program() -> list[str]:
        pending = [asyncio.ensure_future(client.acall("hold", f"a{i}")) for i in range(2)]
        while client.calls_made < 2:  # noqa: ASYNC110 - the client has no event for it
            await asyncio.sleep(0.01)
        threading.Timer(0.2, parent.release.set).start()
        blocked = client.call("echo", "blocking")  # blocks the loop until it is answered
        return [blocked, *(await asyncio.gather(*pending))]

    async with channel(parent, cap=2) as (server, client):
        assert await in_child(run_asyncio(program)) == ["blocking", "a0", "a1"]
    assert server.statistics().peak_inflight == 2
    assert server.statistics().refused == 0


async def test_the_end_of_the_channel_fails_queued_calls_too() -> None:
    """When the parent goes away, the calls in flight and the calls queued behind them all
    fail ``canceled``; none of the queued ones was sent."""
    parent = Parent()

    async def program() -> list[str]:
        results = await asyncio.gather(
            *(client.acall("hold", str(i)) for i in range(50)), return_exceptions=True
        )
        return [r.kind.value if isinstance(r, CallError) else repr(r) for r in results]

    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), parent.handle, CallLimits(max_inflight=5))
    client = Client(down[0], up[1], max_inflight=5)
    kinds: list[str] = []

    async def run_child() -> None:
        kinds.extend(await in_child(run_asyncio(program)))

    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as outer:
                outer.start_soon(run_child)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(server.serve)
                    await wait_until(lambda: parent.active == 5)
                    tg.cancel_scope.cancel()  # the server closes the channel: EOF in the child
    finally:
        client.close()
    assert kinds == ["canceled"] * 50
    assert sorted(parent.arrived, key=int) == [str(i) for i in range(5)]
    assert parent.active == 0


# -- the cap the client is told -----------------------------------------------------------


def test_the_client_keeps_to_the_cap_it_is_told() -> None:
    """0 (the Start's "not said") is the protocol's default cap; anything else is kept;
    a cap that is not a whole number from 0 to int64 is refused."""
    down, up = os.pipe(), os.pipe()
    try:
        assert Client(down[0], up[1]).max_inflight == DEFAULT_MAX_INFLIGHT
        assert Client(down[0], up[1], max_inflight=0).max_inflight == DEFAULT_MAX_INFLIGHT
        assert Client(down[0], up[1], max_inflight=3).max_inflight == 3
        for bad in (-1, 2**63):
            with pytest.raises(ValueError, match="max_inflight"):
                Client(down[0], up[1], max_inflight=bad)
        for wrong in (True, 2.0, "3"):
            with pytest.raises(TypeError, match="max_inflight"):
                Client(down[0], up[1], max_inflight=wrong)  # type: ignore[arg-type]
    finally:
        for fd in (*down, *up):
            os.close(fd)


def test_a_cap_told_after_the_client_is_made_is_kept_and_checked() -> None:
    """A runner makes its Client before the Start says the cap: ``limit_inflight`` sets
    it, with the constructor's checks, and only before the first call."""
    down, up = os.pipe(), os.pipe()
    try:
        client = Client(down[0], up[1])
        client.limit_inflight(3)
        assert client.max_inflight == 3
        client.limit_inflight(0)
        assert client.max_inflight == DEFAULT_MAX_INFLIGHT
        with pytest.raises(ValueError, match="max_inflight"):
            client.limit_inflight(2**63)
        with pytest.raises(TypeError, match="max_inflight"):
            client.limit_inflight(True)
        assert client.max_inflight == DEFAULT_MAX_INFLIGHT  # a refused cap changes nothing
        client.limit_inflight(1)
        client._send("echo", '"1"', 0)  # one call sent: the cap is fixed from now on
        with pytest.raises(RuntimeError, match="first call"):
            client.limit_inflight(5)
        assert client.max_inflight == 1
        client._send("echo", '"2"', 0)  # past the cap of 1: queued, not sent
        assert len(client._queued) == 1
    finally:
        for fd in (*down, *up):
            os.close(fd)


async def test_a_child_that_sends_past_the_cap_is_still_refused() -> None:
    """A client told a larger cap than the parent's (as a hostile child would act) sends
    every call: the parent answers those past its cap ``limit`` at once."""
    parent = Parent()
    outcomes: list[str] = []

    async def program() -> list[str]:
        results = await asyncio.gather(
            *(client.acall("hold", str(i)) for i in range(8)), return_exceptions=True
        )
        return [r.kind.value if isinstance(r, CallError) else "ok" for r in results]

    async def run_child() -> None:
        outcomes.extend(await in_child(run_asyncio(program)))

    async with channel(parent, cap=2, told=8) as (server, client), anyio.create_task_group() as tg:
        tg.start_soon(run_child)
        await wait_until(lambda: server.statistics().refused == 6)
        parent.release.set()  # the two admitted calls are answered only now
    assert sorted(outcomes) == ["limit"] * 6 + ["ok"] * 2
    stats = server.statistics()
    assert (stats.calls, stats.refused, stats.peak_inflight) == (2, 6, 2)
    assert parent.peak == 2


def test_an_answer_to_a_call_still_queued_is_a_protocol_error() -> None:
    """A parent that answers an id it was never sent broke the protocol: every call of
    the client fails with it, the queued one included, and it was never sent."""
    down, up = os.pipe(), os.pipe()
    client = Client(down[0], up[1], max_inflight=1)
    errors: list[BaseException] = []

    def call(args: str) -> None:
        try:
            client.call("t", args)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(a,), daemon=True) for a in ("1", "2")]
    try:
        threads[0].start()
        decoder = FrameDecoder()
        assert select.select([up[0]], [], [], WAIT)[0]
        decoder.receive_data(os.read(up[0], 1 << 16))  # the first call's Request
        first = decoder.next_frame()
        assert isinstance(first, bytes)
        assert decode(REQUEST_DECODER, first).args == "1"
        threads[1].start()
        queued(client, 1)  # behind the first: its id is "2". Answer it.
        os.write(down[1], frame_message(Response(v=VERSION, id="2", ok=True, value="x")))
        for t in threads:
            t.join(WAIT)
        assert not any(t.is_alive() for t in threads)
        assert len(errors) == 2
        assert all(isinstance(e, RemoteProtocolError) for e in errors), errors
        os.set_blocking(up[0], False)
        with pytest.raises(BlockingIOError):
            os.read(up[0], 1 << 16)  # the queued call never left
        assert decoder.next_frame() is Signal.NEED_DATA
        assert client.calls_made == 1
        with pytest.raises(RemoteProtocolError):
            client.call("t", "3")
    finally:
        client.close()
        os.close(down[1])
        os.close(up[0])


def test_calls_queued_as_the_client_closes_fail_canceled() -> None:
    """Closing the client fails its calls, the queued ones too, with ``canceled``; the
    thread reading for them returns once the parent, seeing EOF, closes its end."""
    down, up = os.pipe(), os.pipe()
    client = Client(down[0], up[1], max_inflight=1)
    kinds: list[Kind] = []

    def call() -> None:
        try:
            client.call("t", "")
        except CallError as exc:
            kinds.append(exc.kind)

    threads = [threading.Thread(target=call, daemon=True) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        queued(client, 3)
        client.close()
        assert select.select([up[0]], [], [], WAIT)[0]
        while os.read(up[0], 1 << 16):  # the parent reads to EOF ...
            pass
        os.close(down[1])  # ... and closes its end
        for t in threads:
            t.join(WAIT)
        assert not any(t.is_alive() for t in threads)
        assert kinds == [Kind.CANCELED] * 4
        assert client.calls_made == 1
    finally:
        client.close()
        for fd in (down[1], up[0]):
            with contextlib.suppress(OSError):
                os.close(fd)


# -- against a model ----------------------------------------------------------------------

OPS = st.lists(
    st.tuples(st.sampled_from(["call", "answer", "cancel"]), st.integers(0, 63)), max_size=40
)


@given(ops=OPS, cap=st.integers(1, 4))
def test_the_queue_keeps_to_a_model(ops: list[tuple[str, int]], cap: int) -> None:
    """Any sequence of calls, answers (in any order) and cancellations: the parent sees
    exactly the calls a FIFO queue under the cap would send, in that order, never more
    than the cap unanswered, never a call cancelled before it was sent; every call not
    cancelled gets its own answer."""
    asyncio.run(_against_the_model(ops, cap))


async def _against_the_model(ops: list[tuple[str, int]], cap: int) -> None:
    down, up = os.pipe(), os.pipe()
    os.set_blocking(up[0], False)
    client = Client(down[0], up[1], max_inflight=cap)
    decoder = FrameDecoder()
    tasks: dict[str, asyncio.Future[str]] = {}
    seen: list[str] = []  # what the parent received, in order
    ids: dict[str, str] = {}  # a call's label -> its request id
    unanswered: list[str] = []  # received and not answered yet
    # The model: a FIFO queue of labels, the number it counts in flight, what it sends.
    queue: deque[str] = deque()
    inflight = 0
    expected: list[str] = []
    cancelled_queued: set[str] = set()

    def promote() -> None:
        nonlocal inflight
        while inflight < cap and queue:
            inflight += 1
            expected.append(queue.popleft())

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        with contextlib.suppress(BlockingIOError):
            while data := os.read(up[0], 1 << 16):
                decoder.receive_data(data)
        while isinstance(frame := decoder.next_frame(), bytes):
            request = decode(REQUEST_DECODER, frame)
            seen.append(request.args)
            ids[request.args] = request.id
            unanswered.append(request.args)

    def answer(index: int) -> None:
        nonlocal inflight
        label = unanswered.pop(index % len(unanswered))
        response = Response(v=VERSION, id=ids[label], ok=True, value=label)
        os.write(down[1], frame_message(response))
        inflight -= 1
        promote()

    try:
        for op, n in ops:
            if op == "call":
                label = f"c{len(tasks)}"
                tasks[label] = asyncio.ensure_future(client.acall("t", label))
                queue.append(label)
                promote()
            elif op == "answer" and unanswered:
                answer(n)
            elif op == "cancel":
                waiting = [label for label, task in tasks.items() if not task.done()]
                if waiting:
                    label = waiting[n % len(waiting)]
                    tasks[label].cancel()
                    if label in queue:  # never sent; a sent call's answer still comes
                        queue.remove(label)
                        cancelled_queued.add(label)
            await settle()
            assert seen == expected
            assert len(unanswered) <= cap
        while unanswered:
            answer(0)
            await settle()
            assert seen == expected
        assert not queue
        assert not cancelled_queued & set(seen)
        for label, task in tasks.items():
            assert task.done()
            if not task.cancelled():
                assert task.result() == label
        assert client.calls_made == len(seen)
    finally:
        client.close()
        for task in tasks.values():
            task.cancel()
        for fd in (down[1], up[0]):
            os.close(fd)


# -- a large answer is read straight into the decoder's buffer ------------------------------


def _answer_in_pieces(up_r: int, down_w: int, value: str, *, cut: bool) -> None:
    """The parent's side: read one Request, answer it with ``value`` in pieces of 100 KiB,
    a little apart, so that the client reads the frame in many reads; with ``cut``, stop
    halfway and close."""
    decoder = FrameDecoder()
    while (frame := decoder.next_frame()) is Signal.NEED_DATA:
        select.select([up_r], [], [], WAIT)
        decoder.receive_data(os.read(up_r, 1 << 16))
    assert isinstance(frame, bytes)
    request = decode(REQUEST_DECODER, frame)
    answer = frame_message(Response(v=VERSION, id=request.id, ok=True, value=value))
    end = len(answer) // 2 if cut else len(answer)
    for at in range(0, end, 100 << 10):
        view = memoryview(answer)[at : min(at + (100 << 10), end)]
        while view:
            select.select([], [down_w], [], WAIT)
            view = view[os.write(down_w, view) :]
        time.sleep(0.002)
    if cut:
        os.close(down_w)


@pytest.mark.parametrize("how", ["call", "acall"])
@pytest.mark.parametrize("cut", [False, True])
def test_a_large_answer_arrives_whole_or_fails_the_call(
    how: str, cut: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3 MiB answer crosses in pieces and comes out whole, blocking or under asyncio,
    read into the client's buffer for it; one cut off halfway fails its call (it is not
    taken for a shorter answer)."""
    into: list[int] = []
    readv = os.readv

    def counted(fd: int, buffers: list[memoryview]) -> int:
        n = readv(fd, buffers)
        into.append(n)
        return n

    monkeypatch.setattr(os, "readv", counted)
    value = '"' + "0123456789abcdef" * (3 << 16) + '"'
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    client = Client(down_r, up_w)
    parent = threading.Thread(
        target=_answer_in_pieces, args=(up_r, down_w, value), kwargs={"cut": cut}
    )
    parent.start()
    try:
        if how == "call":
            outcome: str | BaseException
            try:
                outcome = client.call("big")
            except Exception as exc:
                outcome = exc
        else:

            async def call() -> str:
                return await client.acall("big")

            try:
                outcome = asyncio.run(asyncio.wait_for(call(), WAIT))
            except Exception as exc:
                outcome = exc
    finally:
        parent.join(WAIT)
        client.close()
        os.close(up_r)
        if not cut:
            os.close(down_w)
    if cut:
        assert isinstance(outcome, (CallError, RemoteProtocolError)), outcome
    else:
        assert outcome == value
    assert len(into) >= 5  # the pieces after the first, read into the buffer
