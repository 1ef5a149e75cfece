"""Hypothesis strategies for the wire: text, ids, counters, kinds, the four messages, frames.

Text is drawn from all of Unicode except lone surrogates (which cannot be UTF-8), and is
biased towards the characters that break naive framings and encoders: newlines, quotes,
backslashes, NUL and other controls, JSON's line separators, the characters Go escapes for
HTML, a byte-order mark and multi-byte UTF-8 up to four bytes.
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from protocol import (
    VERSION,
    Kind,
    Message,
    Request,
    Response,
    Result,
    Start,
    StartBinding,
    StartBudget,
    encode_frame,
)

__all__ = [
    "AWKWARD",
    "chunked",
    "frame_payloads",
    "frame_streams",
    "hostile_frames",
    "ids",
    "kinds",
    "messages",
    "non_negative",
    "optional_kinds",
    "requests",
    "responses",
    "results",
    "start_bindings",
    "start_budgets",
    "starts",
    "texts",
]

#: Characters worth over-sampling in every text field.
AWKWARD = '\n\r\t"\\/\x00\x01\x08\x0c\x1b\x1f\x7f<>&\u2028\u2029\ufeff\u00e9\u20ac\U0001f600'

#: Go's ``int64``: the widest counter a Go peer can send.
_INT64_MAX = 2**63 - 1


def texts(*, min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Surrogate-free text, half the time built only from :data:`AWKWARD` characters."""
    return st.one_of(
        st.text(st.characters(codec="utf-8"), min_size=min_size, max_size=max_size),
        st.text(st.sampled_from(AWKWARD), min_size=min_size, max_size=max_size),
    )


def ids() -> st.SearchStrategy[str]:
    """Valid ids: non-empty text."""
    return texts(min_size=1, max_size=20)


def non_negative() -> st.SearchStrategy[int]:
    """Valid counters and durations: small numbers mostly, up to Go's ``int64`` maximum."""
    return st.one_of(
        st.integers(min_value=0, max_value=1000),
        st.integers(min_value=0, max_value=_INT64_MAX),
    )


def kinds() -> st.SearchStrategy[Kind]:
    """Every member of the closed set of failure kinds."""
    return st.sampled_from(Kind)


def optional_kinds() -> st.SearchStrategy[Kind | None]:
    """A kind, or none (a success, or a failure nobody classified on the wire)."""
    return st.none() | kinds()


def requests() -> st.SearchStrategy[Request]:
    """Valid Requests."""
    return st.builds(
        Request,
        v=st.just(VERSION),
        id=ids(),
        tool=texts(),
        args=texts(),
        deadline_ms=non_negative(),
    )


def responses() -> st.SearchStrategy[Response]:
    """Valid Responses, successes and failures, with or without a kind."""
    return st.builds(
        Response,
        v=st.just(VERSION),
        id=ids(),
        ok=st.booleans(),
        value=texts(),
        kind=optional_kinds(),
        error=texts(),
    )


def start_bindings() -> st.SearchStrategy[StartBinding]:
    """Valid bindings, with or without a signature."""
    return st.builds(StartBinding, name=texts(), signature=texts())


def start_budgets() -> st.SearchStrategy[StartBudget]:
    """Valid budgets; 0 ("not asked for") is common."""
    counter = st.just(0) | non_negative()
    return st.builds(
        StartBudget,
        wall_clock=counter,
        max_calls=counter,
        max_bytes=counter,
        max_memory=counter,
        max_inflight=counter,
    )


def starts() -> st.SearchStrategy[Start]:
    """Valid Starts, with bindings absent (``None``, Go's nil slice), empty or several."""
    return st.builds(
        Start,
        v=st.just(VERSION),
        program=texts(max_size=80),
        bindings=st.none() | st.lists(start_bindings(), max_size=4).map(tuple),
        budget=start_budgets(),
        result_id=ids(),
        argv=st.lists(texts(max_size=20), max_size=3).map(tuple),
    )


def results(result_id: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[Result]:
    """Valid Results; ``result_id`` may be pinned (to answer a given Start)."""
    return st.builds(
        Result,
        v=st.just(VERSION),
        result_id=ids() if result_id is None else result_id,
        ok=st.booleans(),
        value=texts(),
        kind=optional_kinds(),
        error=texts(),
        calls=non_negative(),
        bytes=non_negative(),
    )


def messages() -> st.SearchStrategy[Message]:
    """Any of the four frames."""
    return st.one_of(requests(), responses(), starts(), results())


def frame_payloads(max_size: int = 64) -> st.SearchStrategy[bytes]:
    """Payloads the framing layer accepts: any non-empty bytes (it never looks inside)."""
    return st.binary(min_size=1, max_size=max_size)


@st.composite
def frame_streams(
    draw: st.DrawFn, *, max_frames: int = 12, max_size: int = 64
) -> tuple[list[bytes], bytes]:
    """A list of payloads and the byte stream that frames them, back to back."""
    payloads = draw(st.lists(frame_payloads(max_size), max_size=max_frames))
    return payloads, b"".join(encode_frame(p) for p in payloads)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def chunked(data: bytes, *, max_cuts: int = 40) -> st.SearchStrategy[list[bytes]]:
    """``data`` split at arbitrary boundaries into non-empty chunks (joined, they are it)."""
    if not data:
        return st.just([])
    return st.lists(st.integers(min_value=0, max_value=len(data)), max_size=max_cuts).map(
        lambda cuts: _cut(data, cuts)
    )


def hostile_frames() -> st.SearchStrategy[bytes]:
    """Byte strings a broken or hostile peer sends where a frame is expected.

    Each is wrong on its own (none is a valid frame of any type): garbage payloads in a
    well-formed frame, payloads from another version, empty objects, JSON that is not an
    object, and prefixes that break the framing itself.
    """
    garbage_payloads = st.one_of(
        st.sampled_from(
            [
                b"\xff\xfe not json",
                b"{}",
                b"[]",
                b"null",
                b'{"v":2}',
                b'{"v":"1"}',
                b'{"v":true}',
                b'{"v":1}',
                b'{"v":1,"id":""}',
            ]
        ),
        st.binary(min_size=1, max_size=16).filter(lambda b: not b.startswith(b"{")),
    )
    return st.one_of(
        garbage_payloads.map(encode_frame),
        st.sampled_from([b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x01\x00\x00\x01"]),
    )
