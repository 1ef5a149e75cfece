"""Properties of the framing layer: :class:`FrameDecoder` and :func:`encode_frame`."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    FrameTooLarge,
    LocalFrameTooLarge,
    LocalProtocolError,
    ProtocolError,
    RemoteFrameTooLarge,
    RemoteProtocolError,
    Signal,
    TruncatedFrame,
    _frames,
    encode_frame,
)
from protocol._frames import DIRECT_FROM, DIRECT_UP_TO, PREFIX_BYTES

from .strategies import chunked, frame_payloads, frame_streams

# Each frame costs at least one ``next_frame`` call and at least 5 bytes, so a decoder that
# makes progress returns a signal within this many calls of being fed ``n`` bytes.
_PROGRESS_SLACK = 3


def drain(decoder: FrameDecoder, limit: int = 1_000_000) -> tuple[list[bytes], Signal]:
    """Every whole frame the decoder holds, and the signal that ended the run."""
    frames: list[bytes] = []
    for _ in range(limit):
        item = decoder.next_frame()
        if isinstance(item, Signal):
            return frames, item
        frames.append(item)
    raise AssertionError(f"decoder returned {limit} frames without a signal")


def feed_chunks(
    decoder: FrameDecoder, chunks: list[bytes], *, drain_each: bool
) -> tuple[list[bytes], Signal]:
    """Feed ``chunks`` one by one (draining after each, or once at the end)."""
    frames: list[bytes] = []
    signal = Signal.NEED_DATA
    for chunk in chunks:
        decoder.receive_data(chunk)
        if drain_each:
            got, signal = drain(decoder)
            frames += got
    got, signal = drain(decoder)
    return frames + got, signal


def bytewise(data: bytes) -> list[bytes]:
    """``data`` one byte per chunk."""
    return [data[i : i + 1] for i in range(len(data))]


def a_frame(payload: bytes) -> bytes:
    """``payload`` framed by hand (prefix written independently of :func:`encode_frame`)."""
    return len(payload).to_bytes(4, "big") + payload


# -- splitting ----------------------------------------------------------------------------


@given(frame_streams())
def test_whole_stream_yields_every_payload_in_order(stream: tuple[list[bytes], bytes]) -> None:
    """A stream fed in one chunk yields every payload, in order, and leaves nothing behind."""
    payloads, data = stream
    decoder = FrameDecoder()
    if data:  # b"" would be EOF
        decoder.receive_data(data)
    frames, signal = drain(decoder)
    assert frames == payloads
    assert signal is Signal.NEED_DATA
    assert decoder.buffered == 0


@given(frame_streams(max_frames=6, max_size=24))
def test_byte_by_byte_feeding_yields_the_same_frames(stream: tuple[list[bytes], bytes]) -> None:
    """A stream fed one byte at a time, drained after every byte, yields the same frames."""
    payloads, data = stream
    decoder = FrameDecoder()
    frames, signal = feed_chunks(decoder, bytewise(data), drain_each=True)
    assert frames == payloads
    assert signal is Signal.NEED_DATA
    assert decoder.buffered == 0


@given(frame_streams(), frame_payloads(), st.data())
def test_decoding_is_independent_of_chunk_boundaries_and_keeps_a_trailing_partial_frame(
    stream: tuple[list[bytes], bytes], extra: bytes, data: st.DataObject
) -> None:
    """Any split of a stream yields the same frames; a trailing partial frame stays buffered.

    The partial frame (a cut inside the prefix or the body of one more frame) is counted by
    ``buffered``, and once the rest of it arrives it comes out whole.
    """
    payloads, body = stream
    extra_frame = a_frame(extra)
    keep = data.draw(st.integers(min_value=1, max_value=len(extra_frame) - 1), label="keep")
    wire = body + extra_frame[:keep]
    how = data.draw(st.sampled_from(["whole", "bytewise", "random"]), label="split")
    if how == "whole":
        chunks = [wire]
    elif how == "bytewise":
        chunks = bytewise(wire)
    else:
        chunks = data.draw(chunked(wire), label="chunks")
    assert b"".join(chunks) == wire
    decoder = FrameDecoder()
    frames, signal = feed_chunks(decoder, chunks, drain_each=data.draw(st.booleans()))
    assert frames == payloads
    assert signal is Signal.NEED_DATA
    assert decoder.buffered == keep
    decoder.receive_data(extra_frame[keep:])
    assert drain(decoder) == ([extra], Signal.NEED_DATA)
    assert decoder.buffered == 0


@given(frame_streams(), st.data())
def test_bytes_like_inputs_are_all_accepted(
    stream: tuple[list[bytes], bytes], data: st.DataObject
) -> None:
    """``receive_data`` takes bytes, bytearray and memoryview alike."""
    payloads, wire = stream
    decoder = FrameDecoder()
    for chunk in data.draw(chunked(wire)):
        wrap = data.draw(st.sampled_from([bytes, bytearray, memoryview]))
        decoder.receive_data(wrap(chunk))
    assert drain(decoder) == (payloads, Signal.NEED_DATA)


def test_trailing_partial_frame_survives_buffer_compaction() -> None:
    """Past the compaction threshold, frames and a trailing partial frame are kept intact."""
    payloads = [bytes([i % 251]) * (1 + i % 300) for i in range(3000)]
    extra = b"x" * 5000
    wire = b"".join(a_frame(p) for p in payloads) + a_frame(extra)[:2000]
    decoder = FrameDecoder()
    chunks = [wire[i : i + 100_003] for i in range(0, len(wire), 100_003)]
    frames, signal = feed_chunks(decoder, chunks, drain_each=True)
    assert frames == payloads
    assert signal is Signal.NEED_DATA
    assert decoder.buffered == 2000
    decoder.receive_data(a_frame(extra)[2000:])
    assert drain(decoder) == ([extra], Signal.NEED_DATA)
    assert decoder.buffered == 0


# -- hostile input --------------------------------------------------------------------------


def _structured_noise() -> st.SearchStrategy[bytes]:
    """Streams of prefixes that often lie about their bodies, so frames and errors mix."""
    piece = st.tuples(
        st.one_of(st.integers(0, 40), st.integers(0, 2**32 - 1)),
        st.binary(max_size=40),
    ).map(lambda t: t[0].to_bytes(4, "big") + t[1])
    return st.lists(piece, max_size=8).map(b"".join)


@given(
    st.one_of(st.binary(max_size=200), _structured_noise()),
    st.booleans(),
    st.sampled_from([MAX_FRAME_BYTES, 64, 1]),
    st.data(),
)
def test_random_bytes_yield_frames_or_a_remote_protocol_error(
    noise: bytes, eof: bool, cap: int, data: st.DataObject
) -> None:
    """Arbitrary bytes yield frames, a signal, or a RemoteProtocolError: nothing else, no hang.

    Every frame returned is a piece of the input no longer than the cap, and the decoder
    always returns to the caller within a bounded number of calls.
    """
    decoder = FrameDecoder(max_frame_bytes=cap)
    chunks = data.draw(chunked(noise))
    if eof:
        chunks.append(b"")
    frames: list[bytes] = []
    failure: RemoteProtocolError | None = None
    try:
        for chunk in chunks:
            decoder.receive_data(chunk)
            got, _ = drain(decoder, limit=len(noise) // 5 + _PROGRESS_SLACK)
            frames += got
    except RemoteProtocolError as exc:
        failure = exc
    if failure is not None:
        with pytest.raises(RemoteProtocolError) as again:
            decoder.next_frame()
        assert again.value is failure
    for frame in frames:
        assert 1 <= len(frame) <= cap
        assert frame in noise
    assert sum(len(f) + 4 for f in frames) <= len(noise)


@pytest.mark.parametrize(
    "size",
    [0xFFFF_FFFF, 0x8000_0000, MAX_FRAME_BYTES + 1],
    ids=["4GiB-1", "2GiB", "cap+1"],
)
def test_hostile_prefix_is_refused_at_once_without_allocating(size: int) -> None:
    """A prefix over the cap raises RemoteFrameTooLarge after 4 bytes, allocating nothing big.

    The decoder does not wait for the body, and peak traced memory stays under 1 MiB.
    """
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        decoder = FrameDecoder()
        decoder.receive_data(size.to_bytes(4, "big"))
        with pytest.raises(RemoteFrameTooLarge) as excinfo:
            decoder.next_frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert excinfo.value.size == size
    assert excinfo.value.limit == MAX_FRAME_BYTES
    assert isinstance(excinfo.value, FrameTooLarge)
    assert decoder.buffered == 0


def test_frame_of_exactly_the_cap_is_accepted() -> None:
    """A frame of exactly MAX_FRAME_BYTES is encoded, waited for, and returned whole."""
    payload = b"\xab" * MAX_FRAME_BYTES
    wire = encode_frame(payload)
    assert wire[:4] == MAX_FRAME_BYTES.to_bytes(4, "big")
    decoder = FrameDecoder()
    decoder.receive_data(wire[:4])
    assert decoder.next_frame() is Signal.NEED_DATA
    decoder.receive_data(wire[4:])
    frame = decoder.next_frame()
    assert frame == payload
    assert decoder.buffered == 0


@pytest.mark.parametrize("cap", [1, 5, 100])
def test_custom_cap_accepts_cap_and_refuses_cap_plus_one(cap: int) -> None:
    """A decoder's own cap is inclusive: ``cap`` bytes pass, ``cap + 1`` are refused."""
    decoder = FrameDecoder(max_frame_bytes=cap)
    decoder.receive_data(a_frame(b"y" * cap))
    assert decoder.next_frame() == b"y" * cap
    decoder.receive_data((cap + 1).to_bytes(4, "big"))
    with pytest.raises(RemoteFrameTooLarge) as excinfo:
        decoder.next_frame()
    assert (excinfo.value.size, excinfo.value.limit) == (cap + 1, cap)


@given(frame_streams(max_frames=4))
def test_zero_length_frame_is_refused_after_the_frames_before_it(
    stream: tuple[list[bytes], bytes],
) -> None:
    """The frames before a zero-length frame come out; the empty frame is a protocol error."""
    payloads, wire = stream
    decoder = FrameDecoder()
    decoder.receive_data(wire + b"\x00\x00\x00\x00" + a_frame(b"after"))
    assert [decoder.next_frame() for _ in payloads] == payloads
    with pytest.raises(RemoteProtocolError, match="zero-length"):
        decoder.next_frame()


# -- end of stream ------------------------------------------------------------------------


@given(frame_streams(), st.data())
def test_eof_between_frames_is_a_clean_close(
    stream: tuple[list[bytes], bytes], data: st.DataObject
) -> None:
    """EOF at a frame boundary yields the frames, then CLOSED, and CLOSED again thereafter."""
    payloads, wire = stream
    decoder = FrameDecoder()
    frames, _ = feed_chunks(decoder, [*data.draw(chunked(wire)), b""], drain_each=True)
    assert frames == payloads
    assert decoder.next_frame() is Signal.CLOSED
    assert decoder.next_frame() is Signal.CLOSED
    decoder.receive_data(b"")  # a second EOF is harmless
    assert decoder.next_frame() is Signal.CLOSED


@given(frame_streams(max_frames=4), frame_payloads(), st.data())
def test_eof_inside_a_frame_is_a_truncated_frame(
    stream: tuple[list[bytes], bytes], extra: bytes, data: st.DataObject
) -> None:
    """EOF inside a prefix or a body raises TruncatedFrame, after the whole frames before it."""
    payloads, wire = stream
    extra_frame = a_frame(extra)
    keep = data.draw(st.integers(min_value=1, max_value=len(extra_frame) - 1))
    decoder = FrameDecoder()
    decoder.receive_data(wire + extra_frame[:keep])
    decoder.receive_data(b"")
    assert [decoder.next_frame() for _ in payloads] == payloads
    where = "prefix" if keep < 4 else "body"
    with pytest.raises(TruncatedFrame, match=where):
        decoder.next_frame()


@pytest.mark.parametrize("keep", [1, 2, 3, 4, 5, 9])
def test_eof_at_each_position_inside_a_frame_is_truncated(keep: int) -> None:
    """EOF after 1-3 prefix bytes, after the prefix, or mid-body raises TruncatedFrame."""
    decoder = FrameDecoder()
    decoder.receive_data(a_frame(b"0123456789")[:keep])
    assert decoder.next_frame() is Signal.NEED_DATA
    decoder.receive_data(b"")
    with pytest.raises(TruncatedFrame):
        decoder.next_frame()


def test_data_after_eof_is_a_local_protocol_error() -> None:
    """Feeding bytes after EOF is the caller's bug: LocalProtocolError, not a remote error."""
    decoder = FrameDecoder()
    decoder.receive_data(b"")
    with pytest.raises(LocalProtocolError) as excinfo:
        decoder.receive_data(a_frame(b"late"))
    assert not isinstance(excinfo.value, RemoteProtocolError)


# -- failure is a state -------------------------------------------------------------------

_FAILURES: list[tuple[bytes, type[RemoteProtocolError]]] = [
    (b"\xff\xff\xff\xff", RemoteFrameTooLarge),
    (b"\x00\x00\x00\x00", RemoteProtocolError),
    (b"\x00\x00", TruncatedFrame),
    (b"\x00\x00\x00\x09abc", TruncatedFrame),
]


@pytest.mark.parametrize(
    ("wire", "error"), _FAILURES, ids=["too-large", "empty", "eof-prefix", "eof-body"]
)
def test_after_an_error_every_later_call_raises_the_same_error(
    wire: bytes, error: type[RemoteProtocolError]
) -> None:
    """Once the decoder has raised, every call raises that same error object, and nothing
    stays buffered."""
    decoder = FrameDecoder()
    decoder.receive_data(wire)
    if error is TruncatedFrame:
        decoder.receive_data(b"")
    with pytest.raises(error) as first:
        decoder.next_frame()
    later: list[ProtocolError] = []
    calls: list[Callable[[], object]] = [
        decoder.next_frame,
        lambda: decoder.receive_data(a_frame(b"valid")),
        lambda: decoder.receive_data(b""),
        decoder.next_frame,
    ]
    for call in calls:
        with pytest.raises(ProtocolError) as excinfo:
            call()
        later.append(excinfo.value)
    assert all(exc is first.value for exc in later)
    assert decoder.buffered == 0


# -- encode_frame ---------------------------------------------------------------------------


@given(frame_payloads(max_size=300))
def test_encode_frame_writes_a_big_endian_length_then_the_payload(payload: bytes) -> None:
    """``encode_frame`` is the 4-byte big-endian length followed by the payload itself."""
    assert encode_frame(payload) == a_frame(payload)


def test_encode_frame_refuses_a_payload_over_the_cap() -> None:
    """A payload over the cap raises LocalFrameTooLarge (a LocalProtocolError), with sizes."""
    with pytest.raises(LocalFrameTooLarge) as excinfo:
        encode_frame(b"z" * (MAX_FRAME_BYTES + 1))
    assert isinstance(excinfo.value, LocalProtocolError)
    assert not isinstance(excinfo.value, RemoteProtocolError)
    assert (excinfo.value.size, excinfo.value.limit) == (MAX_FRAME_BYTES + 1, MAX_FRAME_BYTES)


@pytest.mark.parametrize("cap", [1, 7, 1000])
def test_encode_frame_honours_a_custom_cap(cap: int) -> None:
    """With a custom cap, ``cap`` bytes are framed and ``cap + 1`` are refused."""
    assert encode_frame(b"a" * cap, max_frame_bytes=cap)[4:] == b"a" * cap
    with pytest.raises(LocalFrameTooLarge):
        encode_frame(b"a" * (cap + 1), max_frame_bytes=cap)


def test_encode_frame_refuses_an_empty_payload() -> None:
    """An empty payload raises LocalProtocolError: no message encodes to zero bytes."""
    with pytest.raises(LocalProtocolError):
        encode_frame(b"")


# -- scale ------------------------------------------------------------------------------


def test_twenty_thousand_frames_fed_one_chunk_each_all_come_out() -> None:
    """20,000 small frames, fed one chunk per frame and drained at the end, all come out."""
    payloads = [b'{"v":1,"id":"%d"}' % i for i in range(20_000)]
    decoder = FrameDecoder()
    for payload in payloads:
        decoder.receive_data(encode_frame(payload))
    frames, signal = drain(decoder)
    assert frames == payloads
    assert signal is Signal.NEED_DATA
    assert decoder.buffered == 0


@settings(max_examples=5)
@given(st.integers(min_value=1, max_value=64))
def test_twenty_thousand_frames_in_misaligned_chunks_all_come_out(step: int) -> None:
    """20,000 frames fed in fixed chunks that straddle frame boundaries, drained after each
    chunk, all come out in order."""
    payloads = [b"frame-%d" % i for i in range(20_000)]
    wire = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder()
    count = 0
    for i in range(0, len(wire), step):
        decoder.receive_data(wire[i : i + step])
        while isinstance(item := decoder.next_frame(), bytes):
            assert item == payloads[count]
            count += 1
    assert count == len(payloads)
    assert decoder.buffered == 0


# -- a large frame read straight into a buffer of its own ---------------------------------


def read_like_a_channel(
    decoder: FrameDecoder, wire: bytes, sizes: list[int]
) -> tuple[list[bytes], Signal, int]:
    """Feed ``wire`` as a channel would: into the decoder's buffer when it offers one, as
    bytes otherwise; each read takes at most the next of ``sizes`` (cycled) bytes.

    Returns the frames, the last signal, and how many reads went into a buffer.
    """
    frames: list[bytes] = []
    at = direct = turn = 0
    while at < len(wire):
        most = sizes[turn % len(sizes)]
        turn += 1
        view = decoder.receive_buffer()
        if view is None:
            chunk = wire[at : at + most]
            decoder.receive_data(chunk)
        else:
            with view:
                chunk = wire[at : at + min(most, len(view))]
                view[: len(chunk)] = chunk
            decoder.received_into(len(chunk))
            direct += 1
        at += len(chunk)
        got, signal = drain(decoder)
        frames += got
    got, signal = drain(decoder)
    return frames + got, signal, direct


def big_payloads() -> st.SearchStrategy[bytes]:
    """A payload a buffer is offered for, or one just under that size, or a small one."""
    sizes = st.sampled_from(
        [1, 100, DIRECT_FROM - 1, DIRECT_FROM, DIRECT_FROM + 5, 3 * DIRECT_FROM + 17]
    )
    return st.builds(lambda n, b: bytes([b]) * n, sizes, st.integers(0, 255))


@settings(max_examples=60, deadline=None)
@given(st.lists(big_payloads(), min_size=1, max_size=5), st.data())
def test_reading_into_the_offered_buffer_yields_the_same_frames(
    payloads: list[bytes], data: st.DataObject
) -> None:
    """Whatever the reads' sizes, frames read into the decoder's buffers come out the same
    as fed as bytes, in order, and nothing stays buffered."""
    wire = b"".join(a_frame(p) for p in payloads)
    sizes = data.draw(
        st.lists(st.sampled_from([1, 3, 4, 5, 4096, 1 << 16, 1 << 20]), min_size=1, max_size=4)
    )
    decoder = FrameDecoder()
    frames, signal, direct = read_like_a_channel(decoder, wire, sizes)
    assert frames == payloads
    assert signal is Signal.NEED_DATA
    assert decoder.buffered == 0
    if max(sizes) <= 4096 and any(len(p) >= DIRECT_FROM + 4096 for p in payloads):
        assert direct > 0  # such a frame had DIRECT_FROM bytes to come after its prefix


def test_the_offered_buffer_is_exactly_the_rest_of_the_frame() -> None:
    payload = b"a" * (DIRECT_FROM + 100)
    after = a_frame(b"next")
    wire = a_frame(payload) + after
    decoder = FrameDecoder()
    assert decoder.receive_buffer() is None  # nothing in: no size known
    decoder.receive_data(wire[:10])
    view = decoder.receive_buffer()
    assert view is not None
    assert len(view) == len(payload) - (10 - PREFIX_BYTES)
    assert decoder.buffered == 10
    with view:
        view[:] = wire[10 : PREFIX_BYTES + len(payload)]
    decoder.received_into(len(payload) - 6)
    assert decoder.receive_buffer() is None  # whole: what follows comes as bytes
    decoder.receive_data(after)
    assert drain(decoder) == ([payload, b"next"], Signal.NEED_DATA)


def test_no_buffer_is_offered_for_what_is_nearly_in() -> None:
    """A frame with less than DIRECT_FROM bytes still to come is fed as bytes."""
    payload = b"b" * (DIRECT_FROM + 10)
    decoder = FrameDecoder()
    decoder.receive_data(a_frame(payload)[: PREFIX_BYTES + 11])
    assert decoder.receive_buffer() is None
    decoder.receive_data(a_frame(payload)[PREFIX_BYTES + 11 :])
    assert drain(decoder) == ([payload], Signal.NEED_DATA)


def test_no_buffer_is_offered_for_a_hostile_prefix() -> None:
    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    decoder.receive_data(((1 << 20) + 1).to_bytes(PREFIX_BYTES, "big"))
    assert decoder.receive_buffer() is None
    with pytest.raises(RemoteFrameTooLarge):
        decoder.next_frame()
    with pytest.raises(RemoteFrameTooLarge):
        decoder.receive_buffer()  # failed: every call raises the same error


def test_a_prefix_alone_never_buys_a_buffer_larger_than_direct_up_to() -> None:
    """A peer that announces a frame over DIRECT_UP_TO and sends nothing more costs the
    decoder nothing; the frame, when it does come, is buffered as it comes."""
    payload = b"g" * (DIRECT_UP_TO + 1)
    wire = a_frame(payload)
    decoder = FrameDecoder()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        decoder.receive_data(wire[:PREFIX_BYTES])
        assert decoder.receive_buffer() is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    for at in range(PREFIX_BYTES, len(wire), 1 << 16):
        assert decoder.receive_buffer() is None
        decoder.receive_data(wire[at : at + (1 << 16)])
    assert drain(decoder) == ([payload], Signal.NEED_DATA)


def test_end_of_stream_inside_a_buffered_frame_is_truncated() -> None:
    payload = b"c" * (2 * DIRECT_FROM)
    decoder = FrameDecoder()
    decoder.receive_data(a_frame(payload)[:100])
    view = decoder.receive_buffer()
    assert view is not None
    view.release()
    decoder.received_into(0)  # what a read of 0 bytes means: the peer's end
    assert decoder.receive_buffer() is None
    with pytest.raises(TruncatedFrame, match="body"):
        decoder.next_frame()


def test_bytes_fed_while_a_buffer_is_offered_fill_it_first() -> None:
    payload = bytes(range(256)) * (DIRECT_FROM // 128)
    wire = a_frame(payload) + a_frame(b"tail")
    decoder = FrameDecoder()
    decoder.receive_data(wire[:50])
    view = decoder.receive_buffer()
    assert view is not None
    view.release()
    decoder.receive_data(wire[50:])  # the rest, and the next frame, as bytes
    assert drain(decoder) == ([payload, b"tail"], Signal.NEED_DATA)


def test_reading_more_than_the_buffer_or_into_none_is_a_local_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(LocalProtocolError):
        decoder.received_into(5)
    decoder.receive_data(a_frame(b"d" * (2 * DIRECT_FROM))[:8])
    view = decoder.receive_buffer()
    assert view is not None
    with pytest.raises(LocalProtocolError):
        decoder.received_into(len(view) + 1)
    view.release()


def test_a_large_frames_buffer_is_kept_for_the_next_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once decoded, a large frame's buffer goes back to be reused: the next frame of
    about its size is read into the same memory, not into new pages."""
    spares = _frames._Spares()
    monkeypatch.setattr(_frames, "_SPARES", spares)
    payload = b"e" * (DIRECT_FROM * 4)
    seen = []
    for _ in range(3):
        decoder = FrameDecoder()
        wire = a_frame(payload)
        decoder.receive_data(wire[:100])
        view = decoder.receive_buffer()
        assert view is not None
        seen.append(view.obj)
        with view:
            view[:] = wire[100:]
        decoder.received_into(len(wire) - 100)
        frame = decoder.next_frame_view()
        assert isinstance(frame, memoryview)
        assert frame == payload
        decoder.release_frame()
        assert any(size >= len(payload) for size in spares.kept())
    assert seen[0] is seen[1] is seen[2]


def test_at_most_a_few_small_enough_buffers_are_kept() -> None:
    spares = _frames._Spares()
    big = spares.take(spares.KEEP_BYTES + 1)
    spares.give(big)
    assert spares.kept() == []  # too large to keep
    taken = [spares.take(n * spares.STEP) for n in (1, 2, 3)]
    for buf in taken:
        spares.give(buf)
    assert spares.kept() == [2 * spares.STEP, 3 * spares.STEP]  # the largest KEEP
    assert spares.take(spares.STEP + 1) is taken[1]  # the smallest that holds it
    assert spares.kept() == [3 * spares.STEP]


def test_a_failed_decoder_gives_its_buffer_back(monkeypatch: pytest.MonkeyPatch) -> None:
    spares = _frames._Spares()
    monkeypatch.setattr(_frames, "_SPARES", spares)
    decoder = FrameDecoder()
    decoder.receive_data(a_frame(b"f" * (3 * DIRECT_FROM))[:20])
    view = decoder.receive_buffer()
    assert view is not None
    buf = view.obj
    view.release()
    decoder.received_into(0)
    with pytest.raises(TruncatedFrame):
        decoder.next_frame()
    assert spares.take(1) is buf
