"""JSON text in and out of the program: tool arguments, tool results, the program's value.

The wire carries ``args`` and ``value`` as text; for the Python backend that text is JSON.
Encoding uses msgspec (the codec the child already has loaded). Beyond what msgspec encodes
natively (``None``, bools, numbers, strings, lists, tuples, sets, dicts with string or
number keys, and more), a few containers a notebook user would expect to "just work" are
turned into JSON arrays and objects: any mapping, ``range``, ``deque``, dict views and other
sized collections. Anything else is refused with a :class:`TypeError` that names its type.
"""

from __future__ import annotations

import collections.abc
from typing import Final

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


_ENCODER: Final = msgspec.json.Encoder(enc_hook=_enc_hook)
_DECODER: Final = msgspec.json.Decoder()


def encode_json(obj: object) -> str:
    """``obj`` as JSON text.

    Raises:
        TypeError: ``obj`` (or something inside it) has no JSON form; the message names
            its type.
        MemoryError: the text would not fit in memory.
    """
    return encode_json_bytes(obj).decode("utf-8")


def encode_json_bytes(obj: object) -> bytes:
    """``obj`` as JSON, in UTF-8: :func:`encode_json` without the copy into a ``str``.

    Raises:
        TypeError: as :func:`encode_json`.
        MemoryError: as :func:`encode_json`.
    """
    try:
        return _ENCODER.encode(obj)
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        # msgspec.EncodeError is a ValueError; a cycle is a RecursionError.
        raise TypeError(f"{_type_name(obj)} cannot be encoded as JSON: {exc}") from None


def decode_result(text: str) -> object:
    """A tool's result: its JSON value, or the text itself when it is not JSON."""
    try:
        return _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return text
