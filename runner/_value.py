"""JSON text in and out of the program: tool arguments, tool results, the program's value.

The wire carries ``args`` and ``value`` as text; for the Python backend that text is JSON.
Encoding uses msgspec (the codec the child already has loaded). Beyond what msgspec encodes
natively (``None``, bools, numbers, strings, lists, tuples, sets, dicts with string or
number keys, and more), a few containers a notebook user would expect to "just work" are
turned into JSON arrays and objects: any mapping, ``range``, ``deque``, dict views and other
sized collections. Anything else is refused with a :class:`TypeError` that names its type.

Two things msgspec would encode are refused instead, because JSON has no faithful form for
them and the reader would get something else than the program made, with no sign of it:

* ``bytes``, ``bytearray`` and ``memoryview`` (msgspec writes them as base64 text, which
  reads back as a string of other characters): the program says what it means,
  ``data.decode()`` for text or ``base64.b64encode(data).decode()`` for the encoding;
* a float NaN or infinity (msgspec writes ``null``, which reads back as ``None``): the
  program returns ``None`` or a string such as ``"nan"`` if that is what it means.

The refusal names where the value is (``value[2]['mean']``). Finding them costs a walk over
the value's containers, about a microsecond for a small value and under a second for one
as large as a frame holds (16 MiB), against the run that made it.
"""

from __future__ import annotations

import collections.abc
import math
from typing import Any, Final

import msgspec

__all__ = ["decode_result", "encode_json", "encode_json_bytes"]


_NATIVE_CONTAINERS: Final = (list, tuple, dict, set, frozenset)


def _enc_hook(obj: object) -> object:
    """Encode what msgspec does not: mappings as objects, other collections as arrays.

    msgspec calls this only for objects it cannot encode itself. Strings and bytes never
    get here; generators and other one-shot iterators are refused rather than consumed.
    The containers msgspec encodes natively reach here only as dict keys, which JSON
    cannot have (turning them into lists would only bring them back here, forever).
    """
    if isinstance(obj, _NATIVE_CONTAINERS):
        raise TypeError(f"a {_type_name(obj)} cannot be a JSON object key")
    if isinstance(obj, collections.abc.Mapping):
        return dict(obj)
    if isinstance(obj, collections.abc.Collection):
        return list(obj)
    # (msgspec 0.23 lets a NotImplementedError from here through with no message, so the
    # refusal names the type itself.)
    raise TypeError(f"type {_type_name(obj)} has no JSON form")


def _type_name(obj: object) -> str:
    cls = type(obj)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


#: Kinds of bytes, each refused wherever it is in a value.
_BYTES: Final = (bytes, bytearray, memoryview)
#: What needs no look inside: the JSON scalars msgspec writes as they are.
_PLAIN: Final = frozenset({str, int, bool, type(None)})
_CONTAINERS: Final = frozenset({list, tuple, set, frozenset})


def _unfaithful(obj: object) -> bool:
    """Whether ``obj`` holds bytes or a float that is not finite, anywhere (the fast pass:
    no path kept)."""
    stack: list[Any] = [obj]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind in _PLAIN:
            continue
        if kind is float:
            if not math.isfinite(item):
                return True
        elif kind in _CONTAINERS:
            extend(item)
        elif kind is dict:
            extend(item.keys())
            extend(item.values())
        elif isinstance(item, _BYTES):
            return True
        elif isinstance(item, float):
            if not math.isfinite(item):
                return True
        else:
            extend(_children(item))
    return False


def _children(item: object) -> list[object]:
    """What an object msgspec encodes holds, as the encoder sees it: a dataclass's or a
    Struct's fields, a mapping's keys and values, a collection's items (the enc_hook's
    rule); nothing for a scalar (a datetime, a UUID, an enum's value is looked at)."""
    if isinstance(item, str | int):  # a str or int subclass (an IntEnum): its value
        return []
    try:
        shown = msgspec.to_builtins(item, builtin_types=_BYTES, enc_hook=_enc_hook)
    except (TypeError, ValueError, RecursionError):
        return []  # the encoder will refuse it, with its own words
    return [] if shown is item else [shown]


def _where(obj: object, path: str = "value") -> tuple[str, object] | None:
    """The path to the first bytes or non-finite float in ``obj``, and what it is (the
    slow pass, run only once the fast one found something)."""
    kind = type(obj)
    if kind in _PLAIN:
        return None
    if isinstance(obj, _BYTES) or (isinstance(obj, float) and not math.isfinite(obj)):
        return path, obj
    if kind is float:
        return None
    if isinstance(obj, dict):
        for key, item in obj.items():
            found = _where(key, f"{path} (a key)") or _where(item, f"{path}[{key!r}]")
            if found is not None:
                return found
        return None
    if kind in _CONTAINERS and isinstance(obj, list | tuple | set | frozenset):
        for i, item in enumerate(obj):
            found = _where(item, f"{path}[{i}]" if kind in (list, tuple) else f"{path} (an item)")
            if found is not None:
                return found
        return None
    for child in _children(obj):
        found = _where(child, path)
        if found is not None:
            return found
    return None


def _refuse_unfaithful(obj: object, name: str) -> None:
    """Raise if ``obj`` holds what JSON cannot carry faithfully (see the module's
    docstring); the message calls ``obj`` ``name``."""
    if not _unfaithful(obj):
        return
    found = _where(obj, name)
    path, item = found if found is not None else (name, obj)
    if isinstance(item, float):
        raise TypeError(
            f"{path} is {item!r}, which JSON cannot carry (it has no NaN or infinity): "
            "return None, or a string such as 'nan', if that is what is meant"
        )
    raise TypeError(
        f"{path} is {_type_name(item)}, which JSON cannot carry: decode it to text "
        "(data.decode()) or encode it (base64.b64encode(data).decode())"
    )


_ENCODER: Final = msgspec.json.Encoder(enc_hook=_enc_hook)
_DECODER: Final = msgspec.json.Decoder()


def encode_json(obj: object, name: str = "value") -> str:
    """``obj`` as JSON text; ``name`` is what a refusal calls it (``value``, ``args``).

    Raises:
        TypeError: ``obj`` (or something inside it) has no JSON form, or none that reads
            back as what it is (bytes, NaN, infinity); the message names its type, and for
            the latter where it is.
        MemoryError: the text would not fit in memory.
    """
    return encode_json_bytes(obj, name).decode("utf-8")


def encode_json_bytes(obj: object, name: str = "value") -> bytes:
    """``obj`` as JSON, in UTF-8: :func:`encode_json` without the copy into a ``str``.

    Raises:
        TypeError: as :func:`encode_json`.
        MemoryError: as :func:`encode_json`.
    """
    try:
        encoded = _ENCODER.encode(obj)
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        # msgspec.EncodeError is a ValueError; a cycle is a RecursionError.
        raise TypeError(f"{_type_name(obj)} cannot be encoded as JSON: {exc}") from None
    # After the encoder, which has refused cycles and what has no JSON form at all: the
    # walk then always ends.
    _refuse_unfaithful(obj, name)
    return encoded


def decode_result(text: str) -> object:
    """A tool's result: its JSON value, or the text itself when it is not JSON."""
    try:
        return _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return text
