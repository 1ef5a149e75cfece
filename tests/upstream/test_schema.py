"""Input checks, call shapes and stubs from JSON schemas (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol import CallError, Kind
from sandbox.upstream._schema import Checker, call_shape, stub

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Where."},
        "mode": {"enum": ["r", "w"], "default": "r"},
        "limit": {"type": ["integer", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "opts": {"$ref": "#/$defs/Opts"},
        "dry-run": {"type": "boolean"},
    },
    "required": ["path"],
    "$defs": {
        "Opts": {
            "type": "object",
            "properties": {"deep": {"type": "boolean"}, "depth": {"type": "integer"}},
            "required": ["deep"],
        }
    },
}


def test_checker_names_the_argument_that_does_not_match() -> None:
    """A mismatch is ``invalid`` and says where; a match passes."""
    check = Checker("fs__open", SCHEMA)
    check.check({"path": "/x", "opts": {"deep": True}})
    with pytest.raises(CallError) as caught:
        check.check({"path": "/x", "opts": {"deep": "yes"}})
    assert caught.value.kind is Kind.INVALID
    assert "at arguments['opts']['deep']" in caught.value.message
    with pytest.raises(CallError, match="'path' is a required property"):
        check.check({})


def test_a_broken_input_schema_fails_the_call_not_the_listing() -> None:
    """An upstream whose schema is not JSON schema: its calls fail ``raised``, saying so."""
    check = Checker("x__y", {"type": "no-such-type"})
    with pytest.raises(CallError) as caught:
        check.check({})
    assert caught.value.kind is Kind.RAISED
    assert "input schema is not valid" in caught.value.message


def test_call_shape_puts_required_first_and_names_others_by_keyword() -> None:
    """Properties that are not identifiers can still be passed (``**more``)."""
    assert (
        call_shape("fs__open", SCHEMA)
        == "fs__open(path, mode=..., limit=..., tags=..., opts=..., **more)"
    )
    assert call_shape("t", {"type": "object"}) == "t()"


def test_stub_types_parameters_and_the_return() -> None:
    """The stub compiles; refs, enums, unions, arrays and TypedDicts are typed."""
    out = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
        "required": ["items"],
        "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "number"}}}},
    }
    text = stub("fs__open", "Open a file.\n\nMore.", SCHEMA, out, ["Upstream: tool 'open'."])
    compile("from typing import *\n" + text, "<stub>", "exec")
    assert (
        "async def fs__open(path: str, *, mode: Literal['r', 'w'] = 'r', "
        "limit: int | None = None, tags: list[str] | None = None, "
        "opts: FsOpenOpts | None = None, **more: Any) -> FsOpenResult:"
    ) in text
    assert "class FsOpenOpts(TypedDict):\n    deep: bool\n    depth: NotRequired[int]" in text
    assert "class FsOpenItem(TypedDict, total=False):\n    n: float" in text
    assert "class FsOpenResult(TypedDict):\n    items: list[FsOpenItem]" in text
    assert "    path: Where." in text
    assert "Upstream: tool 'open'." in text


def test_stub_without_an_output_schema_returns_text_or_blocks() -> None:
    """Without an output schema, the return is the documented text-or-blocks shape."""
    text = stub("t", "", {"type": "object"}, None)
    assert "async def t() -> str | list[dict[str, Any]]:" in text
    assert "(no description)" in text
