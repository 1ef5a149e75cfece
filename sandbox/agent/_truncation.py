"""Tool results cut to fit: stage 1 per tool, stage 2 per context (seed 004, "Tool result
budget and truncation").

Theory of operation
-------------------

1. **Stage 1**, per tool (:class:`TruncationConfig`): keep the first ``max_lines`` lines,
   then the first ``max_bytes`` bytes of their UTF-8 encoding, never cutting inside a
   code point.
2. **Stage 2**, per context (:class:`ResultBudget`): the result may take at most
   ``min(hard_cap_tokens, max_fill_fraction * context window)`` tokens; a longer one is
   cut (at a code-point boundary, at a line end when one is near) to fit.

Either stage keeps a *prefix* of the text it is given, so whatever the model is shown is
a prefix of the tool's full text, and the rest is exactly what read-back returns
(:mod:`sandbox.agent._readback`).

Texts are encoded with ``surrogatepass`` throughout (:func:`encode`, :func:`decode`), so
even a string that holds lone surrogates (text decoded with ``surrogateescape``) hashes,
cuts and reassembles exactly. The code-point helpers here are the ones the cache and
read-back use to address the same bytes.
"""

from __future__ import annotations

from typing import Final, final

import msgspec

from ._types import TokenCounter, estimate_tokens

__all__ = [
    "ResultBudget",
    "TruncationConfig",
    "boundary_after",
    "boundary_at_or_before",
    "count_tokens",
    "cut_to_tokens",
    "decode",
    "default_truncation",
    "encode",
    "is_continuation",
    "truncate_stage1",
    "truncate_to_budget",
]

_ENCODING: Final = "utf-8"
_ERRORS: Final = "surrogatepass"


def encode(text: str) -> bytes:
    return text.encode(_ENCODING, _ERRORS)


def decode(data: bytes) -> str:
    return data.decode(_ENCODING, _ERRORS)


def is_continuation(byte: int) -> bool:
    """A UTF-8 continuation byte (``10xxxxxx``): no code point starts here."""
    return byte & 0xC0 == 0x80


def boundary_at_or_before(data: bytes, pos: int) -> int:
    """The last code-point boundary at or before ``pos`` (walking back over continuation
    bytes; at most three steps in valid UTF-8)."""
    pos = min(pos, len(data))
    while 0 < pos < len(data) and is_continuation(data[pos]):
        pos -= 1
    return pos


def boundary_after(data: bytes, pos: int) -> int:
    """The first code-point boundary strictly after ``pos`` (the end of the code point
    that starts at ``pos``)."""
    pos += 1
    while pos < len(data) and is_continuation(data[pos]):
        pos += 1
    return pos


# --------------------------------------------------------------------------------------
# Stage 1


@final
class TruncationConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's stage-1 limits (seed ``ToolTruncationConfig``).

    Attributes:
        max_lines: the most lines a result keeps (0: no line limit).
        max_bytes: the most bytes of UTF-8 a result keeps, after the line limit
            (0: no byte limit).

    Raises:
        ValueError: a limit is negative.
    """

    max_lines: int = 0
    max_bytes: int = 0

    def __post_init__(self) -> None:
        if self.max_lines < 0 or self.max_bytes < 0:
            raise ValueError(f"truncation limits must be >= 0, not {self!r}")


def default_truncation() -> dict[str, TruncationConfig]:
    """The per-tool stage-1 defaults, as a fresh dict the caller may change.

    The seed's defaults (``DefaultToolTruncationConfig``), plus ``run_program``, the
    sandbox's program tool, which prints like ``bash_exec`` does and gets its limit.
    """
    return {
        "read_file": TruncationConfig(max_lines=50_000),
        "ripgrep": TruncationConfig(max_lines=5_000),
        "glob": TruncationConfig(max_lines=5_000),
        "list_directory": TruncationConfig(max_lines=5_000),
        "web_fetch": TruncationConfig(max_bytes=2 * 1024 * 1024),
        "bash_exec": TruncationConfig(max_lines=10_000),
        "run_program": TruncationConfig(max_lines=10_000),
    }


def _first_lines_end(text: str, max_lines: int) -> int:
    """The index just past the ``max_lines``-th newline, or ``len(text)`` when the text
    has no more than ``max_lines`` lines."""
    pos = -1
    for _ in range(max_lines):
        pos = text.find("\n", pos + 1)
        if pos < 0:
            return len(text)
    return pos + 1


def truncate_stage1(text: str, cfg: TruncationConfig) -> tuple[str, bool]:
    """Apply a tool's line limit, then its byte limit.

    Args:
        text: the tool's full result.
        cfg: the tool's limits.

    Returns:
        The kept prefix and whether anything was cut. A line cut keeps the last kept
        line's newline; a byte cut never splits a code point (it walks back to the last
        boundary, so the prefix may be up to three bytes shorter than the limit).
    """
    truncated = False
    if cfg.max_lines > 0:
        end = _first_lines_end(text, cfg.max_lines)
        if end < len(text):
            text, truncated = text[:end], True
    # Four bytes a code point at most: a text this short cannot exceed the byte limit.
    if cfg.max_bytes > 0 and len(text) * 4 > cfg.max_bytes:
        data = encode(text)
        if len(data) > cfg.max_bytes:
            cut = boundary_at_or_before(data, cfg.max_bytes)
            text, truncated = decode(data[:cut]), True
    return text, truncated


# --------------------------------------------------------------------------------------
# Stage 2


@final
class ResultBudget(msgspec.Struct, frozen=True, kw_only=True):
    """How much of the context one tool result may take (seed ``ToolResultBudget``).

    Attributes:
        hard_cap_tokens: an absolute cap per result (0: none).
        max_fill_fraction: the most of the context window a result may fill (0: none).

    Raises:
        ValueError: a negative cap, or a fraction above 1.
    """

    hard_cap_tokens: int = 30_000
    max_fill_fraction: float = 0.4

    def __post_init__(self) -> None:
        if self.hard_cap_tokens < 0 or not 0.0 <= self.max_fill_fraction <= 1.0:
            raise ValueError(f"invalid result budget {self!r}")

    def limit_tokens(self, context_tokens: int) -> int | None:
        """The token limit for one result in a window of ``context_tokens`` tokens:
        ``min(hard cap, fraction * window)`` over the limits that apply; None when none
        does (both disabled, or no window size and no hard cap)."""
        limits: list[int] = []
        if self.hard_cap_tokens > 0:
            limits.append(self.hard_cap_tokens)
        if self.max_fill_fraction > 0 and context_tokens > 0:
            limits.append(int(self.max_fill_fraction * context_tokens))
        return min(limits) if limits else None


def count_tokens(counter: TokenCounter | None, text: str) -> int:
    return counter.count(text) if counter is not None else estimate_tokens(text)


def cut_to_tokens(text: str, max_tokens: int, counter: TokenCounter | None) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` (by binary search over its
    length, which assumes a counter that does not shrink as text grows), moved back to
    the last line end when one lies in the prefix's second half."""
    if count_tokens(counter, text) <= max_tokens:
        return text
    if max_tokens <= 0:
        return ""
    lo, hi = 0, len(text)  # invariant: text[:lo] fits, text[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_tokens(counter, text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid
    newline = text.rfind("\n", 0, lo)
    if newline >= lo // 2:
        return text[: newline + 1]
    return text[:lo]


def truncate_to_budget(
    text: str, budget: ResultBudget, context_tokens: int, counter: TokenCounter | None
) -> tuple[str, bool]:
    """Stage 2: cut ``text`` to the budget's token limit for this window.

    Args:
        text: the stage-1 result.
        budget: the per-result budget.
        context_tokens: the model's context window, in tokens.
        counter: counts tokens (None: :func:`~sandbox.agent._types.estimate_tokens`).

    Returns:
        The kept prefix (whole when it fits; otherwise cut at a code-point boundary, at a
        line end when one is in its second half) and whether anything was cut.
    """
    limit = budget.limit_tokens(context_tokens)
    if limit is None:
        return text, False
    kept = cut_to_tokens(text, limit, counter)
    return kept, len(kept) < len(text)
