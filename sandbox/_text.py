"""Program text made safe to show on a terminal or to write to a log.

What a program prints, raises or returns is the program's text, and the program is not
trusted: an ESC starts a terminal control sequence (move the cursor, retitle the window,
rewrite the screen), a CR or a NUL overwrites what was shown before it, and the
bidirectional controls (U+202E, say) make a line read differently from the bytes it holds.
So a program could forge the sandbox's own report lines, or drive the terminal.

:func:`printable` escapes every such character as Python would write it in a string
literal (``\\x1b``, ``\\r``, ``\\u202e``): C0 and C1 control characters but newline and tab,
DEL, the bidirectional controls and the line and paragraph separators. Everything else,
backslashes included, is left as it is, so ordinary output reads the same. The command
line uses it for all program text it writes in human form; :func:`printable_json` does the
same for JSON text (JSON escapes C0 controls itself, not the others), and the API keeps the
raw text.

:func:`size` and :func:`plural` write numbers as the host's own messages show them: a byte
count in binary units (``200 MiB``, not ``209715200 bytes``), a count with its noun
agreeing (``1 call``, ``2 calls``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["plural", "printable", "printable_json", "seconds", "size"]

_BIDI: Final = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED: Final = (
    *(c for c in range(0x20) if chr(c) not in "\n\t"),
    0x7F,
    *range(0x80, 0xA0),
    *_BIDI,
    0x2028,
    0x2029,
)
_TABLE: Final[dict[int, str]] = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _ESCAPED}
# Common ones as Python spells them: easier to read in a report.
_TABLE.update({0x0D: "\\r", 0x00: "\\x00"})


def printable(text: str) -> str:
    """``text`` with its control, bidirectional and separator characters escaped."""
    return text.translate(_TABLE)


# In JSON text these characters can only stand inside strings, where \uXXXX means them.
_JSON_TABLE: Final[dict[int, str]] = {c: f"\\u{c:04x}" for c in _ESCAPED if c >= 0x20}


def printable_json(text: str) -> str:
    """JSON ``text`` that decodes to the same value, with no character :func:`printable`
    would escape left raw."""
    return text.translate(_JSON_TABLE)


_UNITS: Final = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def size(count: int) -> str:
    """A byte count as a person reads it: ``512 MiB``, ``1.5 GiB``, ``100 KiB``, ``1 byte``.

    A count of at least 1 KiB is written in the largest binary unit it reaches, with up to
    two decimals and no trailing zeros (so ``1.4 GiB`` for 1.5e9 bytes: a rounded figure,
    for messages; the exact count is the budget's own). Below 1 KiB, the count of bytes.
    """
    for unit, name in _UNITS:
        if abs(count) >= unit:
            return f"{count / unit:.2f}".rstrip("0").rstrip(".") + f" {name}"
    return plural(count, "byte")


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun with an ``s`` unless the count is one: ``1 call``,
    ``0 calls``, ``3 calls``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def seconds(value: float | None) -> str:
    """A number of seconds as a message shows it: ``2 s``, ``0.5 s``, ``30 s`` (not
    ``30.0 s``); ``no limit`` for None."""
    return "no limit" if value is None else f"{value:g} s"
