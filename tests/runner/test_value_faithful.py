"""A program's value, and a tool call's arguments, reach the host as the program made
them or not at all: bytes and non-finite floats, which JSON would turn into something else
(base64 text, ``null``), are refused with where they are and what to write instead."""

from __future__ import annotations

import collections
import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandbox
from protocol import Kind
from runner._value import encode_json

pytestmark = pytest.mark.anyio


@dataclasses.dataclass
class Point:
    x: object


@pytest.mark.parametrize(
    ("value", "where", "says"),
    [
        (b"x", "value", "bytes"),
        ([1, bytearray(b"y")], "value[1]", "bytearray"),
        ({"k": memoryview(b"z")}, "value['k']", "memoryview"),
        (Point(b"q"), "value['x']", "bytes"),
        (collections.deque([1, b"a"]), "value[1]", "bytes"),
        ({"a": [1.0, math.nan]}, "value['a'][1]", "nan"),
        ((1, math.inf), "value[1]", "inf"),
        (collections.OrderedDict(a=-math.inf), "value['a']", "-inf"),
        (frozenset({math.nan}), "value (an item)", "nan"),
    ],
    # Not repr: a memoryview's holds its address, which differs between xdist's workers.
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_bytes_and_non_finite_floats_are_refused_where_they_are(
    value: object, where: str, says: str
) -> None:
    """Wherever it is in the value, the refusal names its path and what it is."""
    with pytest.raises(TypeError) as info:
        encode_json(value)
    assert str(info.value).startswith(f"{where} is {says}, which JSON cannot carry")


def test_what_json_carries_faithfully_still_goes_as_before() -> None:
    """Finite floats, dataclasses, sets, ranges and datetimes encode as they did."""
    import datetime

    assert encode_json([1.5, -0.0, 1e308]) == "[1.5,-0.0,1e308]"
    assert encode_json(Point(2.0)) == '{"x":2.0}'
    assert encode_json(range(3)) == "[0,1,2]"
    assert encode_json(datetime.date(2020, 1, 2)) == '"2020-01-02"'
    assert encode_json({"a": None}) == '{"a":null}'


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=20,
)


def unfaithful(value: object) -> bool:
    if isinstance(value, bytes):
        return True
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list | tuple):
        return any(unfaithful(v) for v in value)
    if isinstance(value, dict):
        return any(unfaithful(v) for v in value.values())
    return False


@given(json_like)
def test_a_value_is_encoded_faithfully_or_refused(value: object) -> None:
    """Any nesting of scalars, bytes and floats: refused exactly when it holds bytes or a
    non-finite float; otherwise its JSON reads back as the same value."""
    import msgspec

    if unfaithful(value):
        with pytest.raises(TypeError, match="which JSON cannot carry"):
            encode_json(value)
        return
    back = msgspec.json.decode(encode_json(value))
    assert back == msgspec.json.decode(msgspec.json.encode(value))
    assert msgspec.json.encode(back) == encode_json(value).encode()


@pytest.mark.parametrize("level", [sandbox.Level.IN_PROCESS, sandbox.Level.PROCESS])
async def test_a_program_whose_value_is_bytes_or_nan_fails_as_invalid(
    level: sandbox.Level,
) -> None:
    """The run fails with kind invalid, saying where and what to write, at every level."""
    for program, says in (("b'raw'", "value is bytes"), ("[float('nan')]", "value[0] is nan")):
        result = await sandbox.run(program, level=level)
        assert (result.ok, result.kind) == (False, Kind.INVALID), result.error
        assert says in result.error


async def test_bytes_in_a_tool_call_are_refused_in_the_program() -> None:
    """``host.echo(b'x')`` raises TypeError in the program, naming the arguments."""

    def echo(text: str) -> str:
        return text

    program = "try:\n    host.echo(b'x')\nexcept TypeError as e:\n    err = str(e)\nerr"
    result = await sandbox.run(program, tools=[echo], level=sandbox.Level.IN_PROCESS)
    assert result.ok, result.error
    assert "host.echo(): arguments not sendable" in result.value
    assert "args['text'] is bytes" in result.value
