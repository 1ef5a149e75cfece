"""Read-back: the ``tool_result_read`` tool, which returns a cached result fragment by
fragment.

Theory of operation
-------------------

Fragments are addressed by **byte offset** into the UTF-8 encoding of the full text: that
is the one address that is exact for every text, including a single huge line with no
newlines and text full of multi-byte characters. (A line-only address cannot split a
2 MiB line; a character offset is not what the byte limits count.) Each fragment starts
with a one-line header saying where it is and what to pass for the next one, so the
shown prefix followed by every fragment, headers removed, is the original text byte for
byte. Fragments end at a line end where they can and never inside a code point, and stay
within the stage-1 limits configured for ``tool_result_read``.

The texts are the cache's (:class:`~sandbox.agent._cache.Entry`); this module only reads them.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any, ClassVar, Final, final

import msgspec

from ._cache import CacheMiss, Entry, ResultCache
from ._truncation import (
    TruncationConfig,
    boundary_after,
    boundary_at_or_before,
    decode,
    is_continuation,
)
from ._types import ToolOutcome, ToolSpec

__all__ = [
    "DEFAULT_FRAGMENT_BYTES",
    "DEFAULT_FRAGMENT_LINES",
    "MAX_FRAGMENT_BYTES",
    "MAX_FRAGMENT_LINES",
    "READ_TOOL_NAME",
    "ToolResultRead",
    "read_arguments",
]

#: The read-back tool's name, as the model calls it.
READ_TOOL_NAME: Final = "tool_result_read"

#: Fragment size when the model does not ask: 200 lines, about a screenful of code ten
#: times over, or 16 KiB (about 4k tokens at four bytes a token), whichever comes first.
DEFAULT_FRAGMENT_LINES: Final = 200
DEFAULT_FRAGMENT_BYTES: Final = 16 * 1024

#: The most one fragment may hold when no ``tool_result_read`` truncation is configured:
#: 64 KiB is about 16k tokens, half the default stage-2 hard cap, so a fragment is never
#: itself truncated by stage 2 on a context window of 40k tokens or more.
MAX_FRAGMENT_LINES: Final = 2000
MAX_FRAGMENT_BYTES: Final = 64 * 1024


def read_arguments(hash: str, offset: int) -> str:
    """The arguments of a read from ``offset``, as JSON text (what a nudge or a header
    tells the model to pass)."""
    return msgspec.json.encode({"hash": hash, "offset": offset}).decode()


class _ReadArguments(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    hash: str
    offset: int | None = None
    start_line: int | None = None
    num_lines: int = DEFAULT_FRAGMENT_LINES
    max_bytes: int = DEFAULT_FRAGMENT_BYTES

    def problem(self) -> str | None:
        """What is wrong with arguments that fit the schema's types, or None."""
        if self.offset is not None and self.start_line is not None:
            return "pass offset or start_line, not both"
        if (self.offset or 0) < 0 or (self.start_line is not None and self.start_line < 1):
            return "offset must be >= 0 and start_line >= 1"
        if self.num_lines < 1 or self.max_bytes < 1:
            return "num_lines and max_bytes must be >= 1"
        return None

    def start(self, entry: Entry) -> int:
        """The byte offset the fragment starts at."""
        if self.start_line is not None:
            return entry.line_start(self.start_line)
        return self.offset or 0


_READ_DESCRIPTION: Final = (
    "Read a fragment of a tool result that was truncated. The truncation notice gives "
    "the hash and the arguments for the first read; every fragment starts with a header "
    "line giving the arguments for the next one. Offsets count bytes of the UTF-8 text."
)

_READ_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "hash": {"type": "string", "description": "The cached result's hash."},
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "Byte offset to start at (default 0). Use the offset given "
            "by the truncation notice or the previous fragment's header.",
        },
        "start_line": {
            "type": "integer",
            "minimum": 1,
            "description": "Start at the beginning of this line (1-based) instead of "
            "at a byte offset. Do not pass both.",
        },
        "num_lines": {
            "type": "integer",
            "minimum": 1,
            "description": f"The most lines to return (default {DEFAULT_FRAGMENT_LINES}).",
        },
        "max_bytes": {
            "type": "integer",
            "minimum": 1,
            "description": f"The most bytes to return (default {DEFAULT_FRAGMENT_BYTES}).",
        },
    },
    "required": ["hash"],
    "additionalProperties": False,
}


@final
class ToolResultRead:
    """The ``tool_result_read`` tool: fragments of cached results, by byte offset.

    Arguments (JSON): ``{"hash": str, "offset": int = 0, "start_line": int, "num_lines":
    int = 200, "max_bytes": int = 16384}``; ``offset`` and ``start_line`` exclude each
    other. A fragment starts at the offset (which must be a code-point boundary, as every
    offset this tool and the nudge give is) and ends at the first of: ``num_lines`` line
    ends, ``max_bytes`` bytes (moved back to a line end in the window if there is one,
    else to a code-point boundary, but always at least one code point), the end of the
    text. ``num_lines`` and ``max_bytes`` are capped by ``truncation["tool_result_read"]``
    when it sets them, else by :data:`MAX_FRAGMENT_LINES` / :data:`MAX_FRAGMENT_BYTES`.

    The outcome's text is one header line, ``\\n``, then the fragment exactly::

        [tool_result_read: bytes 0-16384 of 70000, lines 1-200 of 950; more remains:
        call tool_result_read with {"hash":"<hash>","offset":16384}]

    (one line; ``end of result`` instead of ``more remains: …`` on the last fragment, and
    ``(ends mid-line)`` after the line range when the fragment stops inside a line).

    Args:
        cache: the results to read.
        truncation: per-tool stage-1 limits (only ``tool_result_read``'s is used).
    """

    name: ClassVar[str] = READ_TOOL_NAME

    def __init__(
        self, cache: ResultCache, truncation: Mapping[str, TruncationConfig] | None = None
    ) -> None:
        self._cache = cache
        cfg = (truncation or {}).get(READ_TOOL_NAME, TruncationConfig())
        self._max_lines = cfg.max_lines or MAX_FRAGMENT_LINES
        self._max_bytes = cfg.max_bytes or MAX_FRAGMENT_BYTES

    def definition(self) -> ToolSpec:
        """The tool as the model is offered it."""
        return ToolSpec(
            name=READ_TOOL_NAME,
            description=_READ_DESCRIPTION,
            parameters=dict(_READ_PARAMETERS),
        )

    def read(self, arguments: Mapping[str, Any] | str) -> ToolOutcome:
        """Answer one call: a fragment with its header, or an error outcome.

        Args:
            arguments: the call's arguments, as JSON text or decoded.

        Returns:
            The fragment; ``is_error`` for an unknown, expired or changed hash or an
            offset past the end; ``parse_error`` too for arguments that do not parse or
            do not fit the schema.
        """
        try:
            raw = msgspec.json.decode(arguments) if isinstance(arguments, str) else arguments
            args = msgspec.convert(raw, _ReadArguments, strict=False)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return _bad_arguments(f"invalid arguments: {exc}")
        problem = args.problem()
        if problem is not None:
            return _bad_arguments(problem)
        try:
            entry = self._cache._entry(args.hash)
        except CacheMiss as miss:
            return ToolOutcome(text=_miss_text(miss), is_error=True)
        start = args.start(entry)
        refused = _refused_start(entry, start)
        if refused is not None:
            return refused
        end = self._fragment_end(entry, start, args)
        fragment = decode(entry.data[start:end])
        return ToolOutcome(text=_header(args.hash, entry, start, end) + fragment)

    def _fragment_end(self, entry: Entry, start: int, args: _ReadArguments) -> int:
        data, newlines = entry.data, entry.newlines
        end = min(len(data), start + min(args.max_bytes, self._max_bytes))
        # The num_lines-th newline at or after start, if it comes before the byte limit.
        first = bisect.bisect_left(newlines, start)
        nth = first + min(args.num_lines, self._max_lines) - 1
        if nth < len(newlines) and newlines[nth] + 1 <= end:
            return newlines[nth] + 1
        if end == len(data):
            return end
        # Cut by bytes: at the last line end in the window, else at a code point.
        last = bisect.bisect_left(newlines, end) - 1
        if last >= first:
            return newlines[last] + 1
        end = boundary_at_or_before(data, end)
        return end if end > start else boundary_after(data, start)


def _bad_arguments(why: str) -> ToolOutcome:
    return ToolOutcome(text=f"{READ_TOOL_NAME}: {why}", is_error=True, parse_error=True)


def _refused_start(entry: Entry, start: int) -> ToolOutcome | None:
    """The error for a fragment that cannot start at ``start``: past the end of the text,
    or inside a character; None when it can."""
    data = entry.data
    if start > len(data):
        return ToolOutcome(
            text=f"offset {start} is past the end of the result ({len(data)} bytes)",
            is_error=True,
        )
    if start < len(data) and is_continuation(data[start]):
        return _bad_arguments(
            f"offset {start} falls inside a character; use an offset from a header"
        )
    return None


def _miss_text(miss: CacheMiss) -> str:
    why = {
        "unknown": "no cached result has this hash (it may have been swept)",
        "expired": "the cached result expired",
        "changed": "the file changed since the result was cached; run the tool again",
    }[miss.reason]
    return f"{READ_TOOL_NAME}: {miss.hash}: {why}"


def _header(hash: str, entry: Entry, start: int, end: int) -> str:
    total = len(entry.data)
    first = entry.line_of(start)
    last = entry.line_of(end - 1) if end > start else first
    where = f"bytes {start}-{end} of {total}, lines {first}-{last} of {entry.total_lines}"
    if end < total and entry.data[end - 1] != 0x0A:
        where += " (ends mid-line)"
    if end < total:
        rest = f"more remains: call {READ_TOOL_NAME} with {read_arguments(hash, end)}"
    else:
        rest = "end of result"
    return f"[{READ_TOOL_NAME}: {where}; {rest}]\n"
