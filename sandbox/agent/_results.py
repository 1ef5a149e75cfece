"""Tool results on their way into the context: truncated, cached, and told how to read the
rest.

Theory of operation
-------------------

A tool result reaches the model through :func:`process_result`, which ties together three
modules, one concern each:

1. :mod:`~sandbox.agent._truncation` cuts the text in two stages, per tool (lines, then
   bytes, UTF-8 safe) and per context (tokens), always keeping a prefix;
2. :mod:`~sandbox.agent._cache` keeps the full text under ``sha256(tool + "\\x00" +
   text)`` whenever the tool is cacheable, *and* whenever the result was truncated,
   cacheable or not (cache-on-truncate): nothing is ever cut without a way to read it
   back;
3. :mod:`~sandbox.agent._readback` is the ``tool_result_read`` tool that returns the
   rest, fragment by fragment, by byte offset.

A truncated result ends with a nudge (after :data:`NUDGE_PREFIX`) naming the hash, the
sizes and the exact arguments of the first read; the stage-2 cut leaves room for it, so
the result with its nudge stays within the budget.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, final

import msgspec

from ._cache import CORE_SOURCE, Entry, ResultCache, result_hash
from ._readback import READ_TOOL_NAME, read_arguments
from ._truncation import (
    ResultBudget,
    TruncationConfig,
    count_tokens,
    cut_to_tokens,
    encode,
    truncate_stage1,
)
from ._types import TokenCounter

__all__ = ["NUDGE_PREFIX", "ProcessedResult", "process_result"]

#: What separates the shown prefix from the truncation nudge. The nudge is the *last*
#: occurrence of this text in a truncated result (``text.rpartition(NUDGE_PREFIX)``).
NUDGE_PREFIX: Final = "\n\n[truncated: "


@final
class ProcessedResult(msgspec.Struct, frozen=True, kw_only=True):
    """A tool result as the model is to see it.

    Attributes:
        text_for_model: the (possibly truncated) text, with the nudge when truncated.
        truncated: stage 1 or stage 2 cut something.
        cache_hash: the full text's key in the cache; "" when it was not cached (a
            non-cacheable tool's result that was not truncated).
    """

    text_for_model: str
    truncated: bool
    cache_hash: str = ""


def _nudge(hash: str, entry: Entry, shown_bytes: int) -> str:
    total = len(entry.data)
    return (
        f"{NUDGE_PREFIX}showing bytes 0-{shown_bytes} of {total} "
        f"({entry.line_of(shown_bytes) - 1} complete lines of {entry.total_lines}). "
        f"The full result is cached under hash {hash}. To read the rest, call "
        f"{READ_TOOL_NAME} with {read_arguments(hash, shown_bytes)} (offset is a byte "
        f"offset; the rest starts on line {entry.line_of(shown_bytes)}); each fragment's "
        f"header gives the arguments for the next one.]"
    )


def process_result(
    tool_name: str,
    text: str,
    *,
    cache: ResultCache,
    truncation: Mapping[str, TruncationConfig],
    budget: ResultBudget,
    context_tokens: int,
    counter: TokenCounter | None = None,
    source: str = CORE_SOURCE,
    file_path: str | os.PathLike[str] | None = None,
) -> ProcessedResult:
    """Truncate a tool's result for the model and cache its full text.

    Stage 1 (``truncation[tool_name]``, none when absent), then stage 2 (``budget`` over
    ``context_tokens``). The full text is stored when the tool is cacheable or when
    anything was cut. A cut result is followed by a nudge (starting with
    :data:`NUDGE_PREFIX`) that names the hash, the sizes and the exact
    ``tool_result_read`` arguments for the rest; room for the nudge is kept within the
    stage-2 limit.

    Args:
        tool_name: the tool that ran.
        text: its full result.
        cache: where full results are kept.
        truncation: per-tool stage-1 limits.
        budget: the per-result token budget.
        context_tokens: the model's context window.
        counter: counts tokens (None: :func:`~sandbox.agent._types.estimate_tokens`).
        source: the tool's source, for the cache's TTL (see
            :func:`~sandbox.agent._cache.is_mcp_source`).
        file_path: the file the result reflects, for the cache's coherence check.
    """
    shown, truncated = truncate_stage1(text, truncation.get(tool_name, TruncationConfig()))
    limit = budget.limit_tokens(context_tokens)
    if limit is not None and (truncated or count_tokens(counter, shown) > limit):
        # Will be cut (or already was): the nudge must fit too. Rendered with the full
        # sizes, its numbers are as long as they can get.
        h = result_hash(tool_name, text)
        probe = Entry(tool_name, text, mcp=False, stored_at=0.0, file=None)
        reserve = count_tokens(counter, _nudge(h, probe, len(probe.data)))
        kept = cut_to_tokens(shown, max(limit - reserve, 0), counter)
        truncated = truncated or len(kept) < len(shown)
        shown = kept
    if not (truncated or cache.cacheable(tool_name)):
        return ProcessedResult(text_for_model=text, truncated=False)
    h = cache.store(tool_name, text, source=source, file_path=file_path)
    if not truncated:
        return ProcessedResult(text_for_model=text, truncated=False, cache_hash=h)
    nudge = _nudge(h, cache._entries[h], len(encode(shown)))
    return ProcessedResult(text_for_model=shown + nudge, truncated=True, cache_hash=h)
