"""The start channel's two roles as state machines: :class:`StarterCore` and :class:`RunnerCore`.

As h2 tests its stream states: Hypothesis drives random sequences of operations against a
role, and after every step the role has either made a transition its table lists (or
stayed put, for NEED_DATA), or it has raised and is now in ``ERROR``, where every later call
raises that same error. The one exception is a local frame over the cap, which changes
nothing so that a smaller message can be sent instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from protocol import (
    MAX_FRAME_BYTES,
    VERSION,
    ChannelClosed,
    FrameDecoder,
    Kind,
    LocalFrameTooLarge,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    Result,
    RunnerCore,
    Signal,
    Start,
    StartBudget,
    StarterCore,
    encode_frame,
    frame_message,
)
from protocol._messages import RESULT_DECODER, START_DECODER, decode
from protocol._start import RUNNER_TRANSITIONS, STARTER_TRANSITIONS, Event, State

from .strategies import chunked, hostile_frames, results, starts

#: The roles' frame cap in the random tests: small, so an oversized message is cheap.
CAP: Final = 4096

START: Final = Start(
    v=VERSION, program="run()", bindings=None, budget=StartBudget(), result_id="r1"
)


def result_for(result_id: str, *, ok: bool = True, value: str = "42") -> Result:
    """A Result answering the run ``result_id``."""
    return Result(v=VERSION, result_id=result_id, ok=ok, value=value)


def state_of(core: StarterCore | RunnerCore) -> State:
    """The role's state, read afresh (so a type checker does not narrow it across calls)."""
    return core.state


# -- operations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SendStart:
    """Starter: ``send_start`` (over the cap when ``oversized``)."""

    start: Start
    oversized: bool


@dataclass(frozen=True)
class SendResult:
    """Runner: ``send_result`` for the run received (or another), possibly over the cap."""

    result: Result
    matching: bool
    oversized: bool


@dataclass(frozen=True)
class RecvStart:
    """Feed a valid Start frame (split in two at ``split``), then take the next message."""

    start: Start
    split: int


@dataclass(frozen=True)
class RecvResult:
    """Feed a valid Result frame for the run sent (or another), then take the next message."""

    result: Result
    matching: bool
    split: int


@dataclass(frozen=True)
class RecvBad:
    """Feed bytes that are never a valid frame for this role, then take the next message."""

    frame: bytes
    split: int


@dataclass(frozen=True)
class Eof:
    """Feed end of stream, then take the next message."""


@dataclass(frozen=True)
class Poll:
    """Take the next message without feeding anything."""


Op = SendStart | SendResult | RecvStart | RecvResult | RecvBad | Eof | Poll

_splits = st.integers(min_value=0, max_value=1 << 16)
_results = results(result_id=st.sampled_from(["r1", "other", "r1 "]))
# A Result frame on the runner's side, or a Start on the starter's: the wrong frame type
# for the direction is never decodable there.
_wrong_type_for_starter = starts().map(lambda s: bytes(frame_message(s)))
_wrong_type_for_runner = _results.map(lambda r: bytes(frame_message(r)))


_any_starter_op: Final[st.SearchStrategy[Op]] = st.one_of(
    st.builds(SendStart, start=starts(), oversized=st.booleans()),
    st.builds(RecvResult, result=_results, matching=st.booleans(), split=_splits),
    st.builds(RecvBad, frame=hostile_frames() | _wrong_type_for_starter, split=_splits),
    st.just(Eof()),
    st.just(Poll()),
)
_any_runner_op: Final[st.SearchStrategy[Op]] = st.one_of(
    st.builds(SendResult, result=_results, matching=st.booleans(), oversized=st.booleans()),
    st.builds(RecvStart, start=starts(), split=_splits),
    st.builds(RecvBad, frame=hostile_frames() | _wrong_type_for_runner, split=_splits),
    st.just(Eof()),
    st.just(Poll()),
)
# The step the protocol expects next in each state. Half the steps are drawn from these,
# so that runs get deep (to DONE and past it) as well as failing in every way.
_EXPECTED: Final[dict[State, st.SearchStrategy[Op]]] = {
    State.IDLE: st.builds(SendStart, start=starts(), oversized=st.just(False)),
    State.AWAITING_RESULT: st.builds(
        RecvResult, result=_results, matching=st.just(True), split=_splits
    ),
    State.AWAITING_START: st.builds(RecvStart, start=starts(), split=_splits),
    State.RUNNING: st.builds(
        SendResult, result=_results, matching=st.just(True), oversized=st.just(False)
    ),
    State.DONE: st.just(Eof()),
    State.ERROR: st.just(Poll()),
}


def run_ops(driver: Driver, anything: st.SearchStrategy[Op], data: st.DataObject) -> None:
    """Up to 16 steps, each the expected one or anything at all, as Hypothesis chooses."""
    for _ in range(data.draw(st.integers(min_value=1, max_value=16), label="steps")):
        driver.step(data.draw(st.one_of(_EXPECTED[driver.core.state], anything), label="op"))


# -- the driver ---------------------------------------------------------------------------


class Driver:
    """Runs operations against one role and checks each step against the role's table."""

    def __init__(self, core: StarterCore | RunnerCore) -> None:
        self.core = core
        self.table = STARTER_TRANSITIONS if isinstance(core, StarterCore) else RUNNER_TRANSITIONS
        self.eof = False
        self.error: ProtocolError | None = None
        self.run_id = ""  # the result_id of the Start sent or received

    # What the role does with the next message, whichever role it is.
    def next_message(self) -> Start | Result | Signal:
        if isinstance(self.core, StarterCore):
            return self.core.next_result()
        return self.core.next_start()

    def feed(self, frame: bytes, split: int) -> None:
        """Feed ``frame`` in two pieces, checking that the first alone is not enough."""
        cut = split % len(frame)
        if cut:
            self.core.receive_data(frame[:cut])
            assert self.next_message() is Signal.NEED_DATA
        self.core.receive_data(frame[cut:])

    def step(self, op: Op) -> None:
        """Apply ``op`` and check the outcome against the table."""
        if self.error is not None:
            self.check_failed()
            return
        before = self.core.state
        if isinstance(op, RecvStart | RecvResult | RecvBad) and self.eof:
            op = Poll()  # nothing can be fed after EOF; taking the next message still can
        try:
            self.apply(op, before)
        except LocalFrameTooLarge:
            # Over the cap: nothing was produced and nothing changed, only from the state
            # where sending is allowed (the table is consulted first).
            assert self.core.state is before
            assert self.table.get((before, self.event_of(op))) is not None
            event(f"{before.value} -> {before.value} (LocalFrameTooLarge)")
            return
        except ProtocolError as exc:
            event(f"{before.value} -> ERROR ({type(exc).__name__})")
            self.error = exc
            assert self.core.state is State.ERROR
            assert self.table.get((before, self.event_of(op))) is None or self.bad_input(op)
            self.check_failed()
            return
        after = self.core.state
        assert after is before or self.table[(before, self.event_of(op))] is after
        event(f"{before.value} -> {after.value}")

    def apply(self, op: Op, before: State) -> None:
        """Perform ``op``; return normally only when the table allows it (else raise)."""
        core = self.core
        if isinstance(op, SendStart):
            assert isinstance(core, StarterCore)
            start = op.start
            if op.oversized:
                start = msgspec.structs.replace(start, program="x" * CAP)
            frame = core.send_start(start)
            assert (before, Event.SEND_START) in self.table
            assert decode(START_DECODER, bytes(frame[4:])) == start
            self.run_id = start.result_id
        elif isinstance(op, SendResult):
            assert isinstance(core, RunnerCore)
            result = op.result
            if op.matching and self.run_id:
                result = msgspec.structs.replace(result, result_id=self.run_id)
            if op.oversized:
                result = msgspec.structs.replace(result, value="x" * CAP)
            frame = core.send_result(result)
            assert (before, Event.SEND_RESULT) in self.table
            assert result.result_id == self.run_id
            assert decode(RESULT_DECODER, bytes(frame[4:])) == result
        elif isinstance(op, RecvStart):
            self.feed(bytes(frame_message(op.start)), op.split)
            got = self.next_message()
            assert (before, Event.RECV_START) in self.table
            assert got == op.start
            self.run_id = op.start.result_id
        elif isinstance(op, RecvResult):
            result = op.result
            if op.matching and self.run_id:
                result = msgspec.structs.replace(result, result_id=self.run_id)
            self.feed(bytes(frame_message(result)), op.split)
            got = self.next_message()
            assert (before, Event.RECV_RESULT) in self.table
            assert result.result_id == self.run_id
            assert got == result
        elif isinstance(op, RecvBad):
            self.feed(op.frame, op.split)
            self.next_message()
            raise AssertionError(f"{op.frame!r} was accepted")
        else:
            if isinstance(op, Eof) and not self.eof:
                core.receive_data(b"")
                self.eof = True
            got = self.next_message()
            if self.eof:
                assert before is State.DONE  # a clean end only after the run is over
                assert got is Signal.CLOSED
            else:
                assert got is Signal.NEED_DATA

    def event_of(self, op: Op) -> Event:
        """The table event an operation stands for (feeds stand for their frame's type)."""
        starter = isinstance(self.core, StarterCore)
        if isinstance(op, SendStart):
            return Event.SEND_START
        if isinstance(op, SendResult):
            return Event.SEND_RESULT
        return Event.RECV_RESULT if starter else Event.RECV_START

    def bad_input(self, op: Op) -> bool:
        """Whether ``op`` fails whatever the state: bad bytes, a wrong id, an early EOF."""
        if isinstance(op, RecvBad | Eof | Poll):
            return True  # Poll only fails here after EOF, i.e. as an Eof
        if isinstance(op, SendResult | RecvResult):
            return not op.matching or not self.run_id
        return False

    def check_failed(self) -> None:
        """The role is in ERROR and every call raises the very error that put it there."""
        assert self.error is not None
        assert self.core.state is State.ERROR
        calls: list[Callable[[], object]] = [
            self.next_message,
            lambda: self.core.receive_data(b"\x00\x00\x00\x01x"),
            lambda: self.core.receive_data(b""),
        ]
        core = self.core
        if isinstance(core, StarterCore):
            calls.append(functools.partial(core.send_start, START))
        else:
            calls.append(functools.partial(core.send_result, result_for("r1")))
        for call in calls:
            with pytest.raises(ProtocolError) as excinfo:
                call()
            assert excinfo.value is self.error
        assert self.core.state is State.ERROR


@given(st.data())
def test_starter_follows_its_table_or_fails_for_good(data: st.DataObject) -> None:
    """Every StarterCore step is a listed transition, a no-op, or a raise into ERROR for good."""
    driver = Driver(StarterCore(max_frame_bytes=CAP))
    assert driver.core.state is State.IDLE
    run_ops(driver, _any_starter_op, data)


@given(st.data())
def test_runner_follows_its_table_or_fails_for_good(data: st.DataObject) -> None:
    """Every RunnerCore step is a listed transition, a no-op, or a raise into ERROR for good."""
    driver = Driver(RunnerCore(max_frame_bytes=CAP))
    assert driver.core.state is State.AWAITING_START
    run_ops(driver, _any_runner_op, data)


# -- every (state, event) pair ------------------------------------------------------------


def starter_in(state: State) -> StarterCore:
    """A StarterCore brought to ``state`` through its public calls."""
    core = StarterCore()
    if state is State.IDLE:
        return core
    core.send_start(START)
    if state is State.AWAITING_RESULT:
        return core
    if state is State.DONE:
        core.receive_data(frame_message(result_for("r1")))
        assert isinstance(core.next_result(), Result)
        return core
    core.receive_data(b"\x00\x00\x00\x00")
    with pytest.raises(RemoteProtocolError):
        core.next_result()
    return core


def runner_in(state: State) -> RunnerCore:
    """A RunnerCore brought to ``state`` through its public calls."""
    core = RunnerCore()
    if state is State.AWAITING_START:
        return core
    core.receive_data(frame_message(START))
    assert core.next_start() == START
    if state is State.RUNNING:
        return core
    if state is State.DONE:
        core.send_result(result_for("r1"))
        return core
    with pytest.raises(LocalProtocolError):
        core.send_result(result_for("another run"))
    return core


_STARTER_STATES: Final = [State.IDLE, State.AWAITING_RESULT, State.DONE, State.ERROR]
_RUNNER_STATES: Final = [State.AWAITING_START, State.RUNNING, State.DONE, State.ERROR]


@given(st.sampled_from(_STARTER_STATES), st.sampled_from([Event.SEND_START, Event.RECV_RESULT]))
def test_starter_every_state_and_event(state: State, event: Event) -> None:
    """For each StarterCore state and event: the table's next state, else a raise into ERROR."""
    core = starter_in(state)
    assert core.state is state
    nxt = STARTER_TRANSITIONS.get((state, event))

    def act() -> object:
        if event is Event.SEND_START:
            return core.send_start(START)
        core.receive_data(frame_message(result_for("r1")))
        return core.next_result()

    if nxt is None:
        with pytest.raises(ProtocolError):
            act()
        assert core.state is State.ERROR
    else:
        act()
        assert core.state is nxt


@given(st.sampled_from(_RUNNER_STATES), st.sampled_from([Event.RECV_START, Event.SEND_RESULT]))
def test_runner_every_state_and_event(state: State, event: Event) -> None:
    """For each RunnerCore state and event: the table's next state, else a raise into ERROR."""
    core = runner_in(state)
    assert core.state is state
    nxt = RUNNER_TRANSITIONS.get((state, event))

    def act() -> object:
        if event is Event.SEND_RESULT:
            return core.send_result(result_for("r1"))
        core.receive_data(frame_message(START))
        return core.next_start()

    if nxt is None:
        with pytest.raises(ProtocolError):
            act()
        assert core.state is State.ERROR
    else:
        act()
        assert core.state is nxt


# -- plain tests ----------------------------------------------------------------------------


@given(starts(), results(), st.data())
def test_a_whole_run_passes_between_starter_and_runner(
    start: Start, result: Result, data: st.DataObject
) -> None:
    """Start down and Result up, in any chunking, end both roles in DONE, then CLOSED."""
    starter, runner = StarterCore(), RunnerCore()
    for chunk in data.draw(chunked(bytes(starter.send_start(start)))):
        assert runner.next_start() is Signal.NEED_DATA
        runner.receive_data(chunk)
    assert runner.next_start() == start
    assert runner.state is State.RUNNING
    result = msgspec.structs.replace(result, result_id=start.result_id)
    for chunk in data.draw(chunked(bytes(runner.send_result(result)))):
        assert starter.next_result() is Signal.NEED_DATA
        starter.receive_data(chunk)
    assert starter.next_result() == result
    assert (starter.state, runner.state) == (State.DONE, State.DONE)
    starter.receive_data(b"")
    runner.receive_data(b"")
    assert starter.next_result() is Signal.CLOSED
    assert runner.next_start() is Signal.CLOSED


def test_second_start_is_refused() -> None:
    """A second Start on the channel is a RemoteProtocolError and fails the runner."""
    runner = RunnerCore()
    runner.receive_data(frame_message(START) + frame_message(START))
    assert runner.next_start() == START
    with pytest.raises(RemoteProtocolError) as excinfo:
        runner.next_start()
    assert runner.state is State.ERROR
    with pytest.raises(RemoteProtocolError) as again:
        runner.send_result(result_for("r1"))
    assert again.value is excinfo.value


def test_second_start_is_refused_after_the_result_too() -> None:
    """A Start arriving after the Result was sent is refused as well."""
    runner = runner_in(State.DONE)
    runner.receive_data(frame_message(START))
    with pytest.raises(RemoteProtocolError):
        runner.next_start()
    assert runner.state is State.ERROR


def test_starter_sends_only_one_start() -> None:
    """Sending Start twice is a LocalProtocolError and fails the starter."""
    starter = starter_in(State.AWAITING_RESULT)
    with pytest.raises(LocalProtocolError):
        starter.send_start(START)
    assert starter.state is State.ERROR


def test_result_with_wrong_result_id_is_refused() -> None:
    """A Result whose result_id is not the Start's is a RemoteProtocolError for the starter."""
    starter = starter_in(State.AWAITING_RESULT)
    starter.receive_data(frame_message(result_for("r2")))
    with pytest.raises(RemoteProtocolError, match="r2"):
        starter.next_result()
    assert starter.state is State.ERROR


def test_runner_refuses_to_send_a_result_for_another_run() -> None:
    """The runner refuses (LocalProtocolError) to send a Result for another run's id."""
    runner = runner_in(State.RUNNING)
    with pytest.raises(LocalProtocolError):
        runner.send_result(result_for("r2"))
    assert runner.state is State.ERROR


def test_result_before_start_is_refused() -> None:
    """A Result arriving before the starter sent Start is a RemoteProtocolError."""
    starter = StarterCore()
    starter.receive_data(frame_message(result_for("r1")))
    with pytest.raises(RemoteProtocolError):
        starter.next_result()
    assert starter.state is State.ERROR


@pytest.mark.parametrize("state", [State.IDLE, State.AWAITING_RESULT])
def test_eof_before_result_is_channel_closed(state: State) -> None:
    """EOF before the Result raises ChannelClosed and fails the starter."""
    starter = starter_in(state)
    starter.receive_data(b"")
    with pytest.raises(ChannelClosed):
        starter.next_result()
    assert starter.state is State.ERROR


def test_eof_inside_the_result_is_a_truncated_frame() -> None:
    """EOF halfway through the Result frame is a RemoteProtocolError (truncated)."""
    starter = starter_in(State.AWAITING_RESULT)
    starter.receive_data(frame_message(result_for("r1"))[:10])
    starter.receive_data(b"")
    with pytest.raises(RemoteProtocolError):
        starter.next_result()
    assert starter.state is State.ERROR


@pytest.mark.parametrize("state", [State.AWAITING_START, State.RUNNING])
def test_eof_before_the_run_is_over_is_channel_closed_for_the_runner(state: State) -> None:
    """EOF before Start (or while running) raises ChannelClosed and fails the runner."""
    runner = runner_in(state)
    runner.receive_data(b"")
    with pytest.raises(ChannelClosed):
        runner.next_start()
    assert runner.state is State.ERROR


def test_oversized_result_changes_nothing_and_a_smaller_one_can_follow() -> None:
    """A Result over MAX_FRAME_BYTES raises LocalFrameTooLarge and leaves the runner RUNNING;
    a smaller Result (a failure saying so) is then sent and accepted by the starter."""
    starter = starter_in(State.IDLE)
    runner = RunnerCore()
    runner.receive_data(starter.send_start(START))
    assert runner.next_start() == START
    with pytest.raises(LocalFrameTooLarge) as excinfo:
        runner.send_result(result_for("r1", value="x" * MAX_FRAME_BYTES))
    assert excinfo.value.size > MAX_FRAME_BYTES
    assert state_of(runner) is State.RUNNING
    smaller = Result(v=VERSION, result_id="r1", ok=False, kind=Kind.LIMIT, error="value too large")
    starter.receive_data(runner.send_result(smaller))
    assert state_of(runner) is State.DONE
    assert starter.next_result() == smaller
    assert starter.state is State.DONE


def test_oversized_start_changes_nothing_and_a_smaller_one_can_follow() -> None:
    """A Start over the cap raises LocalFrameTooLarge and leaves the starter IDLE."""
    starter = StarterCore(max_frame_bytes=CAP)
    big = msgspec.structs.replace(START, program="x" * CAP)
    with pytest.raises(LocalFrameTooLarge):
        starter.send_start(big)
    assert state_of(starter) is State.IDLE
    frame = starter.send_start(START)
    assert state_of(starter) is State.AWAITING_RESULT
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    payload = decoder.next_frame()
    assert isinstance(payload, bytes)
    assert decode(START_DECODER, payload) == START


def test_eof_after_the_run_is_a_clean_close() -> None:
    """After DONE, EOF is a clean CLOSED for both roles."""
    starter, runner = starter_in(State.DONE), runner_in(State.DONE)
    starter.receive_data(b"")
    runner.receive_data(b"")
    assert starter.next_result() is Signal.CLOSED
    assert runner.next_start() is Signal.CLOSED
    assert (starter.state, runner.state) == (State.DONE, State.DONE)


# -- hostile shapes (issue 12) --------------------------------------------------------------

#: A frame nested far deeper than any decoder on a Python stack can follow.
DEEP: Final = encode_frame(b'{"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}")


def test_a_deeply_nested_result_fails_the_starter_for_good() -> None:
    """Nesting no decoder can follow is a RemoteProtocolError (not RecursionError): the
    starter is then in ERROR, and stays there."""
    starter = starter_in(State.AWAITING_RESULT)
    starter.receive_data(DEEP)
    with pytest.raises(RemoteProtocolError) as excinfo:
        starter.next_result()
    assert starter.state is State.ERROR
    with pytest.raises(RemoteProtocolError) as again:
        starter.next_result()
    assert again.value is excinfo.value


def test_a_deeply_nested_start_fails_the_runner_for_good() -> None:
    """The same for the runner: a RemoteProtocolError, then ERROR."""
    runner = RunnerCore()
    runner.receive_data(DEEP)
    with pytest.raises(RemoteProtocolError):
        runner.next_start()
    assert runner.state is State.ERROR


@pytest.mark.parametrize(
    "field", ["wall_clock", "max_calls", "max_bytes", "max_memory", "max_inflight"]
)
def test_a_start_with_a_budget_outside_int64_is_not_sent(field: str) -> None:
    """A budget a Go child could not decode is refused before anything is sent
    (LocalProtocolError); the starter stays IDLE and a fixed Start can follow."""
    starter = StarterCore()
    bad = msgspec.structs.replace(START, budget=StartBudget(**{field: 2**63}))
    with pytest.raises(LocalProtocolError, match="int64"):
        starter.send_start(bad)
    assert state_of(starter) is State.IDLE
    ok = msgspec.structs.replace(START, budget=StartBudget(**{field: 2**63 - 1}))
    runner = RunnerCore()
    runner.receive_data(starter.send_start(ok))
    assert runner.next_start() == ok


def test_a_result_with_counts_outside_int64_is_not_sent() -> None:
    """The runner never sends a count outside int64 either; it stays RUNNING."""
    runner = runner_in(State.RUNNING)
    with pytest.raises(LocalProtocolError, match="int64"):
        runner.send_result(msgspec.structs.replace(result_for("r1"), calls=2**64))
    assert state_of(runner) is State.RUNNING
    assert runner.send_result(result_for("r1"))


def test_a_start_and_a_result_with_lone_surrogates_are_sent_with_u_fffd() -> None:
    """Text that is not valid Unicode is sent with U+FFFD in place of each lone surrogate,
    as every other frame is (DESIGN: text is UTF-8); nothing raises UnicodeEncodeError."""
    starter = StarterCore()
    runner = RunnerCore()
    start = msgspec.structs.replace(START, program="print('\udcff')")
    runner.receive_data(starter.send_start(start))
    got = runner.next_start()
    assert isinstance(got, Start)
    assert got.program == "print('\ufffd')"
    result = Result(v=VERSION, result_id="r1", ok=False, kind=Kind.RAISED, error="bad \ud800")
    starter.receive_data(runner.send_result(result))
    answer = starter.next_result()
    assert isinstance(answer, Result)
    assert answer.error == "bad \ufffd"
