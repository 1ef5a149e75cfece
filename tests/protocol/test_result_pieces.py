"""A Result whose value is written from its JSON bytes where they lie
(``frame_result_pieces``, ``RunnerCore.send_result_json``, ``Runner.send_result_json``):
the same bytes on the wire as the Result framed whole, whatever the value."""

from __future__ import annotations

import os
import socket

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import (
    VERSION,
    FdChannel,
    LocalFrameTooLarge,
    LocalProtocolError,
    Result,
    Runner,
    RunnerCore,
    Start,
    StartBudget,
    frame_message,
)
from protocol._frames import PREFIX_BYTES
from protocol._messages import MAX_SPLICED_ESCAPES, SPLICE_FROM, frame_result_pieces

from .roles import start_against

RESULT_ID = "r" * 32
RESULT = Result(v=VERSION, result_id=RESULT_ID, ok=True, calls=3, bytes=17)

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _whole(result: Result, value_json: bytes, cap: int = 1 << 24) -> bytes:
    return bytes(frame_message(msgspec.structs.replace(result, value=value_json.decode()), cap))


@settings(max_examples=300)
@given(_json_values, st.sampled_from([RESULT, msgspec.structs.replace(RESULT, result_id="\x00")]))
def test_the_pieces_are_the_frame_framed_whole(value: object, result: Result) -> None:
    """Spliced from the first byte (and with the mark in another field: framed whole),
    the pieces joined are the frame ``frame_message`` writes, byte for byte."""
    value_json = msgspec.json.encode(value)
    pieces = frame_result_pieces(result, value_json, splice_from=0)
    assert b"".join(pieces) == _whole(result, value_json)


def test_a_large_value_is_not_copied() -> None:
    value_json = msgspec.json.encode("x" * (1 << 20))
    pieces = frame_result_pieces(RESULT, value_json)
    # The head, the text between its two quotes (each escaped), and the tail.
    assert len(pieces) == 7
    assert sum(len(p) for p in pieces if isinstance(p, memoryview)) == len(value_json)
    assert all(p.obj is value_json for p in pieces if isinstance(p, memoryview))
    assert b"".join(pieces) == _whole(RESULT, value_json)
    assert int.from_bytes(pieces[0][:PREFIX_BYTES], "big") == len(b"".join(pieces)) - PREFIX_BYTES


@pytest.mark.parametrize(
    "value",
    [
        "x" * (SPLICE_FROM - 3),  # under the size: framed whole
        ["ab"] * (SPLICE_FROM // 4),  # too many quotes to escape: framed whole
        '"' * (SPLICE_FROM + MAX_SPLICED_ESCAPES),
    ],
    ids=["small", "many-strings", "many-quotes"],
)
def test_what_splicing_does_not_pay_for_is_framed_whole(value: object) -> None:
    value_json = msgspec.json.encode(value)
    pieces = frame_result_pieces(RESULT, value_json)
    assert len(pieces) == 1
    assert bytes(pieces[0]) == _whole(RESULT, value_json)


def test_a_few_escapes_in_a_large_value_are_spliced() -> None:
    value = {"a\\b": "q" * SPLICE_FROM, 'say "hi"': ["\\"] * 10}
    value_json = msgspec.json.encode(value)
    pieces = frame_result_pieces(RESULT, value_json)
    assert 1 < len(pieces) <= 2 * MAX_SPLICED_ESCAPES + 3
    assert b"".join(pieces) == _whole(RESULT, value_json)


@pytest.mark.parametrize("splice_from", [0, 1 << 30], ids=["spliced", "whole"])
def test_the_frame_cap_is_the_frames_size_either_way(splice_from: int) -> None:
    value_json = msgspec.json.encode('a "quoted" \\ value ' * 5000)
    size = len(_whole(RESULT, value_json)) - PREFIX_BYTES
    pieces = frame_result_pieces(RESULT, value_json, size, splice_from=splice_from)
    assert b"".join(pieces) == _whole(RESULT, value_json)
    with pytest.raises(LocalFrameTooLarge):
        frame_result_pieces(RESULT, value_json, size - 1, splice_from=splice_from)


def _core_after_start() -> RunnerCore:
    core = RunnerCore()
    start = Start(v=VERSION, program="1", bindings=(), budget=StartBudget(), result_id=RESULT_ID)
    core.receive_data(frame_message(start))
    assert isinstance(core.next_start(), Start)
    return core


def test_the_core_sends_it_once_after_start_for_that_run_only() -> None:
    value_json = msgspec.json.encode("v" * SPLICE_FROM)
    with pytest.raises(LocalProtocolError):
        RunnerCore().send_result_json(RESULT, value_json)  # no Start yet
    wrong = _core_after_start()
    with pytest.raises(LocalProtocolError):
        wrong.send_result_json(msgspec.structs.replace(RESULT, result_id="s" * 32), value_json)
    core = _core_after_start()
    assert b"".join(core.send_result_json(RESULT, value_json)) == _whole(RESULT, value_json)
    with pytest.raises(LocalProtocolError):
        core.send_result_json(RESULT, value_json)  # a second Result


def test_a_refused_result_changes_nothing() -> None:
    """Too large for the cap, or not UTF-8: nothing sent, and a smaller Result still can be."""
    core = _core_after_start()
    with pytest.raises(LocalFrameTooLarge):
        core.send_result_json(RESULT, b'"' + b"x" * (17 << 20) + b'"')
    with pytest.raises(UnicodeDecodeError):
        core.send_result_json(RESULT, b'"\xff"')
    assert b"".join(core.send_result_json(RESULT, b"1")) == _whole(RESULT, b"1")


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["pipe", "socket"])
async def test_the_runner_writes_it_whole_through_partial_writes(transport: str) -> None:
    """Over a pipe (grown to take the frame at once) and over a socket (which is not
    grown: the pieces go in many partial writes), the host reads the value whole."""
    value = ["x" * (3 << 20), 'a "b" \\ c', "y" * 1000]
    value_json = msgspec.json.encode(value)
    if transport == "pipe":
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
    else:
        down_r, down_w = (s.detach() for s in socket.socketpair())
        up_r, up_w = (s.detach() for s in socket.socketpair())
    runner = Runner(down_r, up_w)

    def answer(runner: Runner, start: Start) -> None:
        runner.send_result_json(
            msgspec.structs.replace(RESULT, result_id=start.result_id), value_json
        )

    try:
        result = await start_against(runner, FdChannel(up_r, down_w), answer, seconds=20)
    finally:
        runner.close()
    assert result.ok
    assert msgspec.json.decode(result.value) == value
    assert (result.calls, result.bytes) == (3, 17)
