"""The four frames on the wire: round trips, exact bytes, version refusal, field validation."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Final, TypeVar, cast

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    MAX_FRAME_BYTES,
    MAX_NESTING,
    VERSION,
    FrameDecoder,
    Kind,
    LocalFrameTooLarge,
    LocalProtocolError,
    Message,
    RemoteProtocolError,
    Request,
    Response,
    Result,
    Signal,
    Start,
    StartBinding,
    StartBudget,
    VersionMismatch,
    frame_message,
)
from protocol._messages import (
    REQUEST_DECODER,
    RESPONSE_DECODER,
    RESULT_DECODER,
    START_DECODER,
    decode,
)

from .strategies import chunked, messages, texts

M = TypeVar("M", bound=Message)

GOLDEN_FILE: Final = Path(__file__).parent.parent / "golden" / "frames.json"

_DECODERS: Final[dict[type[Message], msgspec.json.Decoder[Any]]] = {
    Request: REQUEST_DECODER,
    Response: RESPONSE_DECODER,
    Start: START_DECODER,
    Result: RESULT_DECODER,
}
_TYPES: Final = list(_DECODERS)
_TYPE_IDS: Final = [t.__name__ for t in _TYPES]


def decoder_for(cls: type[M]) -> msgspec.json.Decoder[M]:
    """The direction's typed decoder for frames of type ``cls``."""
    return cast("msgspec.json.Decoder[M]", _DECODERS[cls])


def roundtrip(message: M) -> M:
    """``message`` framed, pushed through a FrameDecoder, and decoded with its decoder."""
    decoder = FrameDecoder()
    decoder.receive_data(frame_message(message))
    payload = decoder.next_frame()
    assert isinstance(payload, bytes)
    assert decoder.next_frame() is Signal.NEED_DATA
    return decode(decoder_for(type(message)), payload)


def as_dict(message: Message) -> dict[str, Any]:
    """The message's JSON object, keys in wire order."""
    obj = msgspec.json.decode(msgspec.json.encode(message))
    assert isinstance(obj, dict)
    return obj


def payload_of(obj: object) -> bytes:
    """A JSON payload built by hand (keys in the order given)."""
    return msgspec.json.encode(obj)


# -- round trips ----------------------------------------------------------------------------


@given(messages())
def test_every_message_round_trips_through_frame_and_decoder(message: Message) -> None:
    """Any valid frame of any type comes back equal through framing and its typed decoder."""
    assert roundtrip(message) == message


@given(st.lists(messages(), max_size=8), st.data())
def test_a_stream_of_mixed_messages_round_trips_in_any_chunking(
    batch: list[Message], data: st.DataObject
) -> None:
    """Messages framed back to back and split anywhere decode, in order, to themselves."""
    wire = b"".join(bytes(frame_message(m)) for m in batch)
    decoder = FrameDecoder()
    got: list[Message] = []
    for chunk in data.draw(chunked(wire)):
        decoder.receive_data(chunk)
        while isinstance(payload := decoder.next_frame(), bytes):
            got.append(decode(decoder_for(type(batch[len(got)])), payload))
    assert got == batch


# Field order of the seed's Go structs, and the fields it tags ``omitempty``.
_ORDER: Final[dict[type[Message], list[str]]] = {
    Request: ["v", "id", "tool", "args", "deadline_ms"],
    Response: ["v", "id", "ok", "value", "kind", "error"],
    Start: ["v", "program", "bindings", "budget", "result_id", "argv"],
    Result: ["v", "result_id", "ok", "value", "kind", "error", "calls", "bytes"],
}
_OMITEMPTY: Final = {
    "deadline_ms",
    "value",
    "kind",
    "error",
    "calls",
    "bytes",
    "signature",
    "argv",
}
# max_inflight is not in the seed's Go struct: it comes after its fields, omitempty as they are.
_BUDGET_ORDER: Final = ["wall_clock", "max_calls", "max_bytes", "max_memory", "max_inflight"]


def _go_keys(
    order: list[str], obj: msgspec.Struct, omitempty: set[str] | frozenset[str]
) -> list[str]:
    return [k for k in order if k not in omitempty or getattr(obj, k) not in ("", 0, None, ())]


@given(messages())
def test_encoding_follows_go_field_order_and_omitempty(message: Message) -> None:
    """Keys come out in the Go structs' order, ``v`` first; omitempty fields only when set.

    Required fields (``ok``, ``bindings``, ``budget``, ...) are written even when zero, as
    Go writes them; the budget's fields and a binding's signature are all omitempty.
    """
    obj = as_dict(message)
    assert list(obj) == _go_keys(_ORDER[type(message)], message, _OMITEMPTY)
    if isinstance(message, Start):
        assert list(obj["budget"]) == _go_keys(_BUDGET_ORDER, message.budget, set(_BUDGET_ORDER))
        for wire, binding in zip(obj["bindings"] or [], message.bindings or (), strict=True):
            assert list(wire) == _go_keys(["name", "signature"], binding, _OMITEMPTY)


def test_frame_message_refuses_a_message_over_the_cap() -> None:
    """``frame_message`` raises LocalFrameTooLarge over the cap and frames exactly the cap."""
    small = Request(v=VERSION, id="1", tool="t", args="")
    size = len(frame_message(small)) - 4
    assert frame_message(small, max_frame_bytes=size)[4:] == frame_message(small)[4:]
    with pytest.raises(LocalFrameTooLarge) as excinfo:
        frame_message(small, max_frame_bytes=size - 1)
    assert (excinfo.value.size, excinfo.value.limit) == (size, size - 1)
    with pytest.raises(LocalFrameTooLarge):
        frame_message(Request(v=VERSION, id="1", tool="t", args="a" * MAX_FRAME_BYTES))


# -- golden bytes ---------------------------------------------------------------------------
#
# Each frame is written out by hand, prefix included, as the seed's Go encoder
# (encoding/json.Marshal) writes it: fields in declared order with ``v`` first, omitempty
# fields left out when zero or empty, ``time.Duration`` as integer nanoseconds, a nil slice
# as ``null``, non-ASCII as raw UTF-8, and controls escaped as ``\n``, ``\t`` or ``\u00XX``.
# The strings avoid ``<``, ``>``, ``&``, U+2028 and U+2029, which Go alone escapes (see
# test_go_html_escapes_decode_to_the_same_message), and ``\b``/``\f``, which Go before 1.22
# wrote as ``\u0008``/``\u000c``.

GOLDEN: Final[list[tuple[str, Message, bytes]]] = [
    (
        "request",
        Request(v=1, id="1", tool="search", args='{"q":"tabs\tand\nnewlines"}', deadline_ms=2500),
        b"\x00\x00\x00\x5c"
        rb'{"v":1,"id":"1","tool":"search","args":"{\"q\":\"tabs\tand\nnewlines\"}",'
        rb'"deadline_ms":2500}',
    ),
    (
        "request_minimal",
        Request(v=1, id="req-2", tool="now", args=""),
        b"\x00\x00\x00\x2b" rb'{"v":1,"id":"req-2","tool":"now","args":""}',
    ),
    (
        "response_ok",
        Response(v=1, id="1", ok=True, value='[{"title":"caf\u00e9 \U0001f600","n":1}]'),
        b"\x00\x00\x00\x49"
        b'{"v":1,"id":"1","ok":true,"value":"[{\\"title\\":\\"caf\xc3\xa9 \xf0\x9f\x98\x80\\",'
        b'\\"n\\":1}]"}',
    ),
    (
        "response_failure",
        Response(v=1, id="2", ok=False, kind=Kind.TRANSIENT, error="call deadline passed"),
        b"\x00\x00\x00\x4d"
        rb'{"v":1,"id":"2","ok":false,"kind":"transient","error":"call deadline passed"}',
    ),
    (
        "start",
        Start(
            v=1,
            program='print("h\u00e9llo")\n',
            bindings=(
                StartBinding(name="get_logs", signature="get_logs(host, count)"),
                StartBinding(name="search"),
            ),
            budget=StartBudget(
                wall_clock=30_000_000_000,
                max_calls=100,
                max_bytes=1_048_576,
                max_memory=268_435_456,
            ),
            result_id="run-1",
        ),
        b"\x00\x00\x00\xf1"
        b'{"v":1,"program":"print(\\"h\xc3\xa9llo\\")\\n",'
        b'"bindings":[{"name":"get_logs","signature":"get_logs(host, count)"},{"name":"search"}],'
        b'"budget":{"wall_clock":30000000000,"max_calls":100,"max_bytes":1048576,'
        b'"max_memory":268435456},"result_id":"run-1"}',
    ),
    (
        # max_inflight came after the seed's Go struct: a Go peer that does not know it
        # ignores it, and one that does writes it in this place (after max_memory).
        "start_max_inflight",
        Start(
            v=1,
            program="1+1",
            bindings=(),
            budget=StartBudget(wall_clock=30_000_000_000, max_inflight=8),
            result_id="r",
        ),
        b"\x00\x00\x00\x6a"
        rb'{"v":1,"program":"1+1","bindings":[],'
        rb'"budget":{"wall_clock":30000000000,"max_inflight":8},"result_id":"r"}',
    ),
    (
        "start_nil_bindings",
        Start(v=1, program="1+1", bindings=None, budget=StartBudget(), result_id="r"),
        b"\x00\x00\x00\x43"
        rb'{"v":1,"program":"1+1","bindings":null,"budget":{},"result_id":"r"}',
    ),
    (
        "start_argv",
        Start(
            v=1,
            program="import sys\nsys.argv",
            bindings=(),
            budget=StartBudget(),
            result_id="r",
            argv=("prog.py", "--n", "3"),
        ),
        b"\x00\x00\x00\x6f"
        rb'{"v":1,"program":"import sys\nsys.argv","bindings":[],"budget":{},"result_id":"r",'
        rb'"argv":["prog.py","--n","3"]}',
    ),
    (
        "result_ok",
        Result(v=1, result_id="run-1", ok=True, value='{"answer":42}', calls=3, bytes=120),
        b"\x00\x00\x00\x55"
        rb'{"v":1,"result_id":"run-1","ok":true,"value":"{\"answer\":42}","calls":3,"bytes":120}',
    ),
    (
        "result_failure",
        Result(
            v=1, result_id="run-1", ok=False, kind=Kind.RAISED, error='Traceback:\n  x\x00y "z"\\'
        ),
        b"\x00\x00\x00\x5f"
        rb'{"v":1,"result_id":"run-1","ok":false,"kind":"raised",'
        rb'"error":"Traceback:\n  x\u0000y \"z\"\\"}',
    ),
]
_GOLDEN_IDS: Final = [name for name, _, _ in GOLDEN]


@pytest.mark.parametrize(("name", "message", "frame"), GOLDEN, ids=_GOLDEN_IDS)
def test_golden_frame_encodes_to_exactly_these_bytes(
    name: str, message: Message, frame: bytes
) -> None:
    """Each golden message frames to exactly the bytes written out by hand."""
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4, name
    assert bytes(frame_message(message)) == frame


@pytest.mark.parametrize(("name", "message", "frame"), GOLDEN, ids=_GOLDEN_IDS)
def test_golden_frame_decodes_to_exactly_this_message(
    name: str, message: Message, frame: bytes
) -> None:
    """Each golden frame decodes, through the frame decoder, to its message."""
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    payload = decoder.next_frame()
    assert isinstance(payload, bytes), name
    assert decode(decoder_for(type(message)), payload) == message


def test_golden_file_matches_the_literals() -> None:
    """tests/golden/frames.json, shared with peers in other languages, lists these frames."""
    shared = json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))
    assert shared == [{"name": name, "hex": frame.hex()} for name, _, frame in GOLDEN]


def test_go_html_escapes_decode_to_the_same_message() -> None:
    """Go's ``\\u003c``, ``\\u003e``, ``\\u0026`` and ``\\u2028`` escapes decode to the text.

    Go's encoder escapes these where ours writes them raw; both spellings are the same JSON
    string, so a frame from a Go peer decodes to the same message.
    """
    go_payload = rb'{"v":1,"id":"1","ok":true,"value":"a \u003c b \u0026\u0026 c \u003e d\u2028e"}'
    expected = Response(v=1, id="1", ok=True, value="a < b && c > d\u2028e")
    assert decode(RESPONSE_DECODER, go_payload) == expected


# -- version ----------------------------------------------------------------------------------


def _valid_dict(cls: type[Message]) -> dict[str, Any]:
    message = next(m for _, m, _ in GOLDEN if type(m) is cls)
    return as_dict(message)


_MISSING: Final = object()


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
@pytest.mark.parametrize(
    "v",
    [2, 0, -1, "1", True, False, None, 1.0, [1], {"v": 1}, _MISSING],
    ids=["2", "0", "-1", "str", "true", "false", "null", "float", "list", "object", "missing"],
)
def test_wrong_or_missing_version_is_a_version_mismatch(cls: type[Message], v: object) -> None:
    """A frame that is valid but for its ``v`` raises VersionMismatch, naming what it got."""
    obj = _valid_dict(cls)
    if v is _MISSING:
        del obj["v"]
    else:
        obj["v"] = v
    with pytest.raises(VersionMismatch) as excinfo:
        decode(decoder_for(cls), payload_of(obj))
    assert excinfo.value.expected == VERSION
    assert excinfo.value.got == (None if v is _MISSING else v)


@given(
    st.sampled_from(_TYPES),
    st.one_of(
        st.integers().filter(lambda n: n != VERSION),
        st.text(),
        st.booleans(),
        st.none(),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
)
def test_any_version_but_ours_is_refused(cls: type[Message], v: object) -> None:
    """Any ``v`` other than the integer VERSION raises VersionMismatch."""
    obj = _valid_dict(cls)
    obj["v"] = v
    with pytest.raises(VersionMismatch):
        decode(decoder_for(cls), payload_of(obj))


# Wrong in every way at once: empty ids, a bad kind, negative counters, a wrong-typed ``ok``,
# a scalar where a list and an object belong, and required fields missing.
_BROKEN: Final[dict[str, Any]] = {
    "id": "",
    "result_id": "",
    "ok": "yes",
    "kind": "bogus",
    "deadline_ms": -1,
    "calls": -2,
    "bindings": 5,
    "budget": {"max_calls": -3},
}


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
@pytest.mark.parametrize("v", [2, "1", None, _MISSING], ids=["2", "str", "null", "missing"])
@pytest.mark.parametrize("v_last", [False, True], ids=["v-first", "v-last"])
def test_version_is_checked_before_anything_else(
    cls: type[Message], v: object, v_last: bool
) -> None:
    """A frame wrong in many ways and in ``v`` raises VersionMismatch, wherever ``v`` is."""
    obj = dict(_BROKEN)
    if v is not _MISSING:
        obj = {**obj, "v": v} if v_last else {"v": v, **obj}
    with pytest.raises(VersionMismatch):
        decode(decoder_for(cls), payload_of(obj))


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
def test_a_broken_frame_of_our_version_is_a_plain_protocol_error(cls: type[Message]) -> None:
    """The same broken frame with ``v`` = VERSION is a RemoteProtocolError, not a mismatch."""
    with pytest.raises(RemoteProtocolError) as excinfo:
        decode(decoder_for(cls), payload_of({"v": VERSION, **_BROKEN}))
    assert not isinstance(excinfo.value, VersionMismatch)


# -- forward compatibility ------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_KNOWN_FIELDS: Final = {f for order in _ORDER.values() for f in order} | {
    *_BUDGET_ORDER,
    "name",
    "signature",
}
_unknown_fields = st.dictionaries(
    st.text(max_size=12).filter(lambda k: k not in _KNOWN_FIELDS), _json_values, max_size=4
)


@given(messages(), _unknown_fields, st.booleans())
def test_unknown_fields_are_ignored(
    message: Message, extra: dict[str, Any], in_front: bool
) -> None:
    """Fields this version does not know, before or after the known ones, are ignored.

    Within a version the wire only grows by appending defaulted fields; an older reader
    decodes the newer frame as if they were not there.
    """
    obj = as_dict(message)
    obj = {**extra, **obj} if in_front else {**obj, **extra}
    assert decode(decoder_for(type(message)), payload_of(obj)) == message


@given(_unknown_fields, _unknown_fields)
def test_unknown_fields_inside_budget_and_bindings_are_ignored(
    in_budget: dict[str, Any], in_binding: dict[str, Any]
) -> None:
    """Unknown fields nested in Start's budget and bindings are ignored too."""
    message = next(m for name, m, _ in GOLDEN if name == "start")
    obj = as_dict(message)
    obj["budget"] = {**obj["budget"], **in_budget}
    obj["bindings"] = [{**b, **in_binding} for b in obj["bindings"]]
    assert decode(START_DECODER, payload_of(obj)) == message


# -- field validation ---------------------------------------------------------------------


@given(
    st.sampled_from([Response, Result]),
    st.one_of(
        texts().filter(lambda s: s not in {k.value for k in Kind}),
        st.sampled_from(["LIMIT", "Transient", " limit", "limit ", "timeout", "error"]),
        st.integers(),
        st.booleans(),
    ),
)
def test_a_kind_outside_the_closed_set_is_a_protocol_error(
    cls: type[Message], kind: object
) -> None:
    """A ``kind`` that is not one of the closed set's strings is a RemoteProtocolError."""
    obj = _valid_dict(cls)
    obj.update(ok=False, kind=kind)
    with pytest.raises(RemoteProtocolError) as excinfo:
        decode(decoder_for(cls), payload_of(obj))
    assert not isinstance(excinfo.value, VersionMismatch)


@pytest.mark.parametrize("kind", list(Kind), ids=[k.value for k in Kind])
@pytest.mark.parametrize("cls", [Response, Result], ids=["Response", "Result"])
def test_every_kind_in_the_closed_set_decodes(cls: type[Message], kind: Kind) -> None:
    """Each of the seven kinds decodes from its lower-case wire string."""
    obj = _valid_dict(cls)
    obj.update(ok=False, kind=kind.value)
    decoded = decode(decoder_for(cls), payload_of(obj))
    assert isinstance(decoded, Response | Result)
    assert decoded.kind is kind


@pytest.mark.parametrize(
    ("cls", "field"),
    [(Request, "id"), (Response, "id"), (Start, "result_id"), (Result, "result_id")],
    ids=["Request.id", "Response.id", "Start.result_id", "Result.result_id"],
)
def test_an_empty_id_is_refused(cls: type[Message], field: str) -> None:
    """An empty id (or result_id) is a RemoteProtocolError: ids must be non-empty."""
    obj = _valid_dict(cls)
    obj[field] = ""
    with pytest.raises(RemoteProtocolError) as excinfo:
        decode(decoder_for(cls), payload_of(obj))
    assert not isinstance(excinfo.value, VersionMismatch)


_COUNTERS: Final = [
    (Request, ("deadline_ms",)),
    (Result, ("calls",)),
    (Result, ("bytes",)),
    (Start, ("budget", "wall_clock")),
    (Start, ("budget", "max_calls")),
    (Start, ("budget", "max_bytes")),
    (Start, ("budget", "max_memory")),
]


@given(st.sampled_from(_COUNTERS), st.integers(max_value=-1))
def test_a_negative_counter_is_refused(
    counter: tuple[type[Message], tuple[str, ...]], value: int
) -> None:
    """A negative counter or duration is a RemoteProtocolError."""
    cls, path = counter
    obj = _valid_dict(cls)
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(RemoteProtocolError) as excinfo:
        decode(decoder_for(cls), payload_of(obj))
    assert not isinstance(excinfo.value, VersionMismatch)


_NOT_JSON: Final = [
    b"\xff",
    b"\xfe\xff\x00{",
    b"{",
    b'{"v":1',
    b"not json",
    b'{"v":1,}',
    b"\xef\xbb\xbf" + rb'{"v":1,"id":"1","tool":"t","args":""}',  # a UTF-8 BOM is not JSON
    rb'{"v":1,"id":"1","tool":"t","args":""} trailing',
    b'{"v":1,"id":"\xff","tool":"t","args":""}',  # invalid UTF-8 inside a string
    b'{"v":1,"id":"\xc3","tool":"t","args":""}',  # truncated UTF-8 sequence
    b'{"v":1,"id":"\xed\xa0\x80","tool":"t","args":""}',  # an encoded surrogate
]


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
@pytest.mark.parametrize("payload", _NOT_JSON)
def test_non_utf8_or_non_json_payload_is_a_protocol_error(
    cls: type[Message], payload: bytes
) -> None:
    """A payload that is not UTF-8 JSON raises RemoteProtocolError, whatever the type."""
    with pytest.raises(RemoteProtocolError):
        decode(decoder_for(cls), payload)


@given(st.sampled_from(_TYPES), st.binary(min_size=1))
def test_random_payload_decodes_or_is_a_protocol_error(cls: type[Message], payload: bytes) -> None:
    """Arbitrary bytes given to a typed decoder raise RemoteProtocolError and nothing else."""
    with pytest.raises(RemoteProtocolError):
        decode(decoder_for(cls), payload)


@pytest.mark.parametrize(
    ("bindings", "expected"),
    [("null", None), ("[]", ()), ('[{"name":"a"}]', (StartBinding(name="a"),))],
    ids=["null", "empty", "one"],
)
def test_start_bindings_null_empty_or_listed(
    bindings: str, expected: tuple[StartBinding, ...] | None
) -> None:
    """``"bindings":null`` (Go's nil slice) decodes to None, ``[]`` to an empty tuple."""
    payload = b'{"v":1,"program":"p","bindings":%s,"budget":{},"result_id":"r"}' % bindings.encode()
    start = decode(START_DECODER, payload)
    assert start.bindings == expected
    assert start == Start(v=1, program="p", bindings=expected, budget=StartBudget(), result_id="r")


def test_start_without_bindings_is_refused() -> None:
    """A Start with no ``bindings`` key is refused: Go always writes it (null when empty)."""
    with pytest.raises(RemoteProtocolError):
        decode(START_DECODER, b'{"v":1,"program":"p","budget":{},"result_id":"r"}')


# -- integers and text, in and out (issue 12) ----------------------------------------------

_INT64_MAX: Final = 2**63 - 1
_OUTSIDE_INT64: Final = [2**63, 2**64, 10**400, -(2**63) - 1, 10**30]


@pytest.mark.parametrize("counter", _COUNTERS, ids=lambda c: ".".join(c[1]))
@pytest.mark.parametrize("value", [*_OUTSIDE_INT64, "1" + "0" * 400], ids=str)
def test_a_counter_outside_int64_is_refused_on_receipt(
    counter: tuple[type[Message], tuple[str, ...]], value: object
) -> None:
    """Integers on the wire are Go's int64: a counter past it is a RemoteProtocolError."""
    cls, path = counter
    obj = _valid_dict(cls)
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = 0
    payload = payload_of(obj).replace(
        b'"%s":0' % path[-1].encode(), b'"%s":%s' % (path[-1].encode(), str(value).encode())
    )
    with pytest.raises(RemoteProtocolError) as excinfo:
        decode(decoder_for(cls), payload)
    assert not isinstance(excinfo.value, VersionMismatch)


@pytest.mark.parametrize("counter", _COUNTERS, ids=lambda c: ".".join(c[1]))
def test_a_counter_at_the_int64_maximum_is_read(
    counter: tuple[type[Message], tuple[str, ...]],
) -> None:
    """2**63 - 1, the largest int64, decodes (and frames) unchanged."""
    cls, path = counter
    obj = _valid_dict(cls)
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = _INT64_MAX
    message = decode(decoder_for(cls), payload_of(obj))
    assert roundtrip(message) == message


def _with_counter(message: Message, path: tuple[str, ...], value: int) -> Message:
    if len(path) == 1:
        return msgspec.structs.replace(message, **{path[0]: value})
    inner = _with_counter(getattr(message, path[0]), path[1:], value)
    return msgspec.structs.replace(message, **{path[0]: inner})


@pytest.mark.parametrize("counter", [*_COUNTERS, (Response, ("v",))], ids=lambda c: ".".join(c[1]))
@pytest.mark.parametrize("value", [2**63, 2**64, -(2**63) - 1, 10**400], ids=str)
def test_frame_message_refuses_an_integer_outside_int64(
    counter: tuple[type[Message], tuple[str, ...]], value: int
) -> None:
    """The parent never sends an integer a Go peer cannot hold: LocalProtocolError."""
    cls, path = counter
    message = _with_counter(decode(decoder_for(cls), payload_of(_valid_dict(cls))), path, value)
    with pytest.raises(LocalProtocolError, match="int64"):
        frame_message(message)


_SURROGATES: Final = st.integers(min_value=0xD800, max_value=0xDFFF).map(chr)
#: Text with at least one lone surrogate, among valid characters and other surrogates.
_SURROGATE_TEXT: Final = st.tuples(
    texts(max_size=5), _SURROGATES, st.lists(st.characters(codec="utf-8") | _SURROGATES, max_size=6)
).map(lambda parts: parts[0] + parts[1] + "".join(parts[2]))


def _valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


@given(messages(), _SURROGATE_TEXT, st.data())
def test_every_outgoing_text_field_replaces_lone_surrogates(
    message: Message, text: str, data: st.DataObject
) -> None:
    """One rule for every frame sent: a lone surrogate in any text becomes U+FFFD."""
    fields = [f for f in message.__struct_fields__ if type(getattr(message, f)) is str]
    name = data.draw(st.sampled_from(fields))
    if name in ("id", "result_id"):
        text = text[:60] or "x"
    bad = msgspec.structs.replace(message, **{name: text})
    got = roundtrip(bad)
    assert getattr(got, name) == _valid_text(text)
    assert got == msgspec.structs.replace(message, **{name: _valid_text(text)})


def test_surrogates_in_a_starts_bindings_become_u_fffd() -> None:
    """Nested text (a binding's name and signature) follows the same rule."""
    start = Start(
        v=VERSION,
        program="print('\udcff')",
        bindings=(StartBinding(name="a\ud800", signature="a\udfff(x)"),),
        budget=StartBudget(),
        result_id="r\udcff",
    )
    got = roundtrip(start)
    assert got.program == "print('\ufffd')"
    assert got.bindings == (StartBinding(name="a\ufffd", signature="a\ufffd(x)"),)
    assert got.result_id == "r\ufffd"


# -- nesting, and the version first (issue 12) ---------------------------------------------


def nested(depth: int, *, v: bytes | None = b"1", key: bytes = b"x") -> bytes:
    """A Request with one more field, nested ``depth`` arrays deep (``v`` first unless None)."""
    head = (
        b'{"id":"1","tool":"t","args":"",'
        if v is None
        else b'{"v":%s,"id":"1","tool":"t","args":"",' % v
    )
    return head + b'"%s":' % key + b"[" * depth + b"]" * depth + b"}"


_DEEP: Final = [1_000, 10_000, 100_000]


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
@pytest.mark.parametrize("depth", _DEEP)
@pytest.mark.parametrize(
    "shape",
    [
        lambda d: nested(d, v=None),  # {"x":[[[...]]]}: no v at all
        lambda d: nested(d),  # v ours, then the deep field
        lambda d: nested(d, v=None, key=b"v"),  # {"v":[[[...]]]}: the version itself
        lambda d: b'{"v":1,"x":' + b'{"a":' * d + b"1" + b"}" * d + b"}",  # objects
        lambda d: b'{"v":1,"x":' + b"[" * d,  # never closed
    ],
    ids=["no-v", "v-first", "v-itself", "objects", "unclosed"],
)
def test_deep_nesting_is_a_protocol_error_never_a_recursion_error(
    cls: type[Message], depth: int, shape: Any
) -> None:
    """However deep the nesting, a typed decoder raises RemoteProtocolError, nothing else."""
    with pytest.raises(RemoteProtocolError):
        decode(decoder_for(cls), shape(depth))


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
@pytest.mark.parametrize("depth", _DEEP)
def test_deep_nesting_after_another_version_is_a_version_mismatch(
    cls: type[Message], depth: int
) -> None:
    """The version decides first, even before nesting too deep to read."""
    with pytest.raises(VersionMismatch) as excinfo:
        decode(decoder_for(cls), nested(depth, v=b"2"))
    assert excinfo.value.got == 2


def _stack_depth() -> int:
    depth = 0
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _at_stack_depth(depth: int, fn: Any) -> Any:
    """``fn()`` called with the Python stack ``depth`` frames deep."""
    if _stack_depth() >= depth:
        return fn()
    return _at_stack_depth(depth, fn)


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
def test_nesting_up_to_max_nesting_is_read(cls: type[Message]) -> None:
    """An unknown field nested MAX_NESTING deep is skipped: the frame decodes."""
    obj = _valid_dict(cls)
    payload = payload_of(obj)[:-1] + b',"later":' + b"[" * (MAX_NESTING - 1)
    payload += b"]" * (MAX_NESTING - 1) + b"}"
    assert decode(decoder_for(cls), payload) == decode(decoder_for(cls), payload_of(obj))


@pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="from 3.12 the C decoder's recursion is counted apart from Python frames",
)
def test_a_frame_within_max_nesting_from_too_deep_a_stack_is_a_local_error() -> None:
    """A legal frame our own stack is too deep to decode is a LocalProtocolError: the
    peer did nothing wrong, and it is still a protocol error, never a RecursionError."""
    payload = nested(MAX_NESTING - 1)
    deep = sys.getrecursionlimit() - MAX_NESTING // 2
    with pytest.raises(LocalProtocolError, match="stack"):
        _at_stack_depth(deep, lambda: decode(REQUEST_DECODER, payload))
    assert decode(REQUEST_DECODER, payload).id == "1"  # the same frame, from a sane stack


@pytest.mark.parametrize("v", [*_OUTSIDE_INT64, "1" + "0" * 5000], ids=lambda v: str(v)[:24])
def test_a_version_outside_int64_is_a_version_mismatch(v: object) -> None:
    """A ``v`` no int64 can hold is another version's (and its message stays short)."""
    payload = b'{"v":%s,"id":"1","tool":"t","args":""}' % str(v).encode()
    with pytest.raises(VersionMismatch) as excinfo:
        decode(REQUEST_DECODER, payload)
    assert len(str(excinfo.value)) < 300


_OTHER_VERSION_BROKEN: Final = [
    b'{"v":2,"x":1e400}',
    b'{"v":2,"id":"\\ud800"}',
    b'{"v":2,"args":"\xff"}',
    b'{"v":2,"id":"1","tool":"t","args":"" trailing',
    b'{"v":2,"x":[1,2,}',
    b'{"x":1e400,"v":2}',
    b'{"v":1,"v":2,"args":"\xff"}',
    b'{"\\u0076":2,"x":1e400}',
    b' \n{ "v" : 2 , "x" : [ "\\"]" , { } ] , "y":1e999}',
    b'{"x":1e400}',
]


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
@pytest.mark.parametrize("payload", _OTHER_VERSION_BROKEN, ids=repr)
def test_the_version_decides_first_whatever_else_is_wrong(
    cls: type[Message], payload: bytes
) -> None:
    """Out-of-range numbers, bad escapes, bad UTF-8 and broken syntax after ``v``: the
    frame is another version's (VersionMismatch), as ``decode`` promises."""
    with pytest.raises(VersionMismatch):
        decode(decoder_for(cls), payload)


@pytest.mark.parametrize("cls", _TYPES, ids=_TYPE_IDS)
@pytest.mark.parametrize(
    "payload",
    [b'{"v":1,"x":1e400}', b'{"v":2,"v":1,"x":1e400}', b'{"x":1, oops "v":2}', b"[2]"],
    ids=repr,
)
def test_a_broken_frame_whose_version_is_ours_or_unreadable_is_malformed(
    cls: type[Message], payload: bytes
) -> None:
    """When ``v`` is ours (the last one counts, as in the typed decoder), or the frame
    breaks before any ``v``, the frame is plainly malformed."""
    with pytest.raises(RemoteProtocolError) as excinfo:
        decode(decoder_for(cls), payload)
    assert not isinstance(excinfo.value, VersionMismatch)


# -- kinds ------------------------------------------------------------------------------------

_KIND_TABLE: Final = [
    # kind, retryable, permanent
    (Kind.INVALID, False, True),
    (Kind.DENIED, False, True),
    (Kind.LIMIT, False, False),
    (Kind.TRANSIENT, True, False),
    (Kind.CANCELED, False, True),
    (Kind.RAISED, False, False),
    (Kind.UNKNOWN, False, False),
]


@pytest.mark.parametrize(
    ("kind", "retryable", "permanent"), _KIND_TABLE, ids=[k.value for k, _, _ in _KIND_TABLE]
)
def test_kind_retryable_and_permanent_truth_table(
    kind: Kind, retryable: bool, permanent: bool
) -> None:
    """Only ``transient`` is retryable; ``invalid``, ``denied`` and ``canceled`` are permanent."""
    assert kind.retryable is retryable
    assert kind.permanent is permanent


def test_kinds_are_exactly_the_seven_wire_strings() -> None:
    """The closed set is exactly seven lower-case strings; none is both retryable and permanent."""
    assert {k.value for k in Kind} == {
        "invalid",
        "denied",
        "limit",
        "transient",
        "canceled",
        "raised",
        "unknown",
    }
    assert [k for k, _, _ in _KIND_TABLE] == list(Kind)
    assert not any(k.retryable and k.permanent for k in Kind)
