"""Tool results on their way into the context: truncation, the result cache, read-back.

Theory of operation
-------------------

A tool result reaches the model through :func:`process_result`, in two stages (seed 004,
"Tool result budget and truncation"):

1. **Stage 1**, per tool (:class:`TruncationConfig`): keep the first ``max_lines`` lines,
   then the first ``max_bytes`` bytes of their UTF-8 encoding, never cutting inside a
   code point.
2. **Stage 2**, per context (:class:`ResultBudget`): the result may take at most
   ``min(hard_cap_tokens, max_fill_fraction * context window)`` tokens; a longer one is
   cut (at a code-point boundary, at a line end when one is near) to fit, leaving room
   for the nudge.

Whatever is shown is always a *prefix* of the tool's full text. The full (pre-truncation)
text is kept in the :class:`ResultCache` under ``sha256(tool + "\\x00" + text)`` whenever the
tool is cacheable, *and* whenever the result was truncated, cacheable or not
(cache-on-truncate): nothing is ever cut without a way to read it back. A truncated result
ends with a nudge naming the hash and the exact arguments of the next read.

The model reads the rest with the ``tool_result_read`` tool (:class:`ToolResultRead`).
Fragments are addressed by **byte offset** into the UTF-8 encoding of the full text: that
is the one address that is exact for every text, including a single huge line with no
newlines and text full of multi-byte characters. (A line-only address cannot split a
2 MiB line; a character offset is not what the byte limits count.) Each fragment starts
with a one-line header saying where it is and what to pass for the next one, so the
shown prefix followed by every fragment, headers removed, is the original text byte for
byte. Fragments end at a line end where they can and never inside a code point, and stay
within the stage-1 limits configured for ``tool_result_read``.

Texts are encoded with ``surrogatepass`` throughout, so even a string that holds lone
surrogates (text decoded with ``surrogateescape``) hashes, cuts and reassembles exactly.

The cache is plain synchronous state for one agent loop (it is not shared across threads).
Its only I/O is an ``os.stat`` of a cached file's path, to tell whether the file changed.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal, final

import msgspec

from ._types import TokenCounter, ToolOutcome, ToolSpec, estimate_tokens

__all__ = [
    "CORE_SOURCE",
    "DEFAULT_FRAGMENT_BYTES",
    "DEFAULT_FRAGMENT_LINES",
    "DEFAULT_NON_CACHEABLE",
    "FILE_TOOLS",
    "MAX_FRAGMENT_BYTES",
    "MAX_FRAGMENT_LINES",
    "NUDGE_PREFIX",
    "READ_TOOL_NAME",
    "CacheMiss",
    "ProcessedResult",
    "ResultBudget",
    "ResultCache",
    "ToolResultRead",
    "TruncationConfig",
    "default_truncation",
    "file_path_from_arguments",
    "is_mcp_source",
    "process_result",
    "result_hash",
    "truncate_stage1",
    "truncate_to_budget",
]

#: The read-back tool's name, as the model calls it.
READ_TOOL_NAME: Final = "tool_result_read"

#: The source of the loop's own tools (the seed's ``GetToolSource`` value for them).
CORE_SOURCE: Final = "core"

#: Tools whose result reflects a file (seed 004, "File coherence"): store their results
#: with the file's path so that the entry is checked against the file. (Any tool's result
#: stored with a path is checked; without a path there is nothing to check.)
FILE_TOOLS: Final = frozenset({"read_file", "write_file", "edit_file"})

#: Meta-tools whose results are not worth keeping (seed 004, "Non-cacheable tools"): the
#: finish answer, a fragment of something already cached, bookkeeping.
DEFAULT_NON_CACHEABLE: Final = frozenset(
    {"finish", READ_TOOL_NAME, "update_checklist", "store_fact"}
)

#: Fragment size when the model does not ask: 200 lines, about a screenful of code ten
#: times over, or 16 KiB (about 4k tokens at four bytes a token), whichever comes first.
DEFAULT_FRAGMENT_LINES: Final = 200
DEFAULT_FRAGMENT_BYTES: Final = 16 * 1024

#: The most one fragment may hold when no ``tool_result_read`` truncation is configured:
#: 64 KiB is about 16k tokens, half the default stage-2 hard cap, so a fragment is never
#: itself truncated by stage 2 on a context window of 40k tokens or more.
MAX_FRAGMENT_LINES: Final = 2000
MAX_FRAGMENT_BYTES: Final = 64 * 1024

#: What separates the shown prefix from the truncation nudge. The nudge is the *last*
#: occurrence of this text in a truncated result (``text.rpartition(NUDGE_PREFIX)``).
NUDGE_PREFIX: Final = "\n\n[truncated: "

_ENCODING: Final = "utf-8"
_ERRORS: Final = "surrogatepass"


def _encode(text: str) -> bytes:
    return text.encode(_ENCODING, _ERRORS)


def _decode(data: bytes) -> str:
    return data.decode(_ENCODING, _ERRORS)


def _is_continuation(byte: int) -> bool:
    """A UTF-8 continuation byte (``10xxxxxx``): no code point starts here."""
    return byte & 0xC0 == 0x80


def _boundary_at_or_before(data: bytes, pos: int) -> int:
    """The last code-point boundary at or before ``pos`` (walking back over continuation
    bytes; at most three steps in valid UTF-8)."""
    pos = min(pos, len(data))
    while 0 < pos < len(data) and _is_continuation(data[pos]):
        pos -= 1
    return pos


def _boundary_after(data: bytes, pos: int) -> int:
    """The first code-point boundary strictly after ``pos`` (the end of the code point
    that starts at ``pos``)."""
    pos += 1
    while pos < len(data) and _is_continuation(data[pos]):
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
        data = _encode(text)
        if len(data) > cfg.max_bytes:
            cut = _boundary_at_or_before(data, cfg.max_bytes)
            text, truncated = _decode(data[:cut]), True
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


def _count(counter: TokenCounter | None, text: str) -> int:
    return counter.count(text) if counter is not None else estimate_tokens(text)


def _cut_to_tokens(text: str, max_tokens: int, counter: TokenCounter | None) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` (by binary search over its
    length, which assumes a counter that does not shrink as text grows), moved back to
    the last line end when one lies in the prefix's second half."""
    if _count(counter, text) <= max_tokens:
        return text
    if max_tokens <= 0:
        return ""
    lo, hi = 0, len(text)  # invariant: text[:lo] fits, text[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _count(counter, text[:mid]) <= max_tokens:
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
        counter: counts tokens (None: :func:`estimate_tokens`).

    Returns:
        The kept prefix (whole when it fits; otherwise cut at a code-point boundary, at a
        line end when one is in its second half) and whether anything was cut.
    """
    limit = budget.limit_tokens(context_tokens)
    if limit is None:
        return text, False
    kept = _cut_to_tokens(text, limit, counter)
    return kept, len(kept) < len(text)


# --------------------------------------------------------------------------------------
# The cache


def result_hash(tool_name: str, content: str) -> str:
    """The cache key of a result: ``sha256(tool_name + "\\x00" + content)``, in hex (seed
    ``ComputeToolResultHash``). The same text from two tools has two keys."""
    return hashlib.sha256(_encode(tool_name + "\x00" + content)).hexdigest()


def is_mcp_source(source: str) -> bool:
    """Whether a tool's source makes its results MCP-sourced, and so expire.

    Exactly: every source except ``"core"`` (the loop's own tools) and ``""`` (the
    executor does not know the tool) is an MCP server's name (seed ``GetToolSource``).
    """
    return source not in (CORE_SOURCE, "")


def file_path_from_arguments(arguments: str) -> str | None:
    """The file a call's arguments name (``path`` or ``file_path``), for the cache's
    coherence check; None when the arguments are not a JSON object naming one."""
    try:
        parsed = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return None
    if isinstance(parsed, dict):
        for key in ("path", "file_path"):
            value = parsed.get(key)
            if isinstance(value, str) and value:
                return value
    return None


class CacheMiss(LookupError):
    """A hash the cache cannot answer for.

    Attributes:
        hash: the hash asked for.
        reason: ``unknown`` (never stored, or swept), ``expired`` (an MCP entry past its
            TTL) or ``changed`` (its file changed or vanished since it was stored).
    """

    def __init__(self, hash: str, reason: Literal["unknown", "expired", "changed"]) -> None:
        super().__init__(f"{hash}: {reason}")
        self.hash = hash
        self.reason = reason


_FileStat = tuple[int, int] | None  # (mtime_ns, size); None: the file did not exist


def _stat(path: str) -> _FileStat:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class _Entry:
    """One cached result, with its encoding and line index built on first read."""

    __slots__ = ("_data", "_newlines", "content", "file", "mcp", "stored_at", "tool")

    def __init__(
        self,
        tool: str,
        content: str,
        *,
        mcp: bool,
        stored_at: float,
        file: tuple[str, _FileStat] | None,
    ) -> None:
        self.tool = tool
        self.content = content
        self.mcp = mcp
        self.stored_at = stored_at
        self.file = file
        self._data: bytes | None = None
        self._newlines: list[int] | None = None

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = _encode(self.content)
        return self._data

    @property
    def newlines(self) -> list[int]:
        """The byte offsets of every ``\\n``, in order."""
        if self._newlines is None:
            data, found, pos = self.data, [], self.data.find(b"\n")
            while pos >= 0:
                found.append(pos)
                pos = data.find(b"\n", pos + 1)
            self._newlines = found
        return self._newlines

    @property
    def total_lines(self) -> int:
        data = self.data
        return len(self.newlines) + (1 if data and not data.endswith(b"\n") else 0)

    def line_of(self, offset: int) -> int:
        """The 1-based line the byte at ``offset`` is on."""
        return bisect.bisect_left(self.newlines, offset) + 1

    def line_start(self, line: int) -> int:
        """The byte offset where 1-based ``line`` starts (the end, past the last line)."""
        if line <= 1:
            return 0
        newlines = self.newlines
        return newlines[line - 2] + 1 if line - 2 < len(newlines) else len(self.data)

    def coherent(self) -> bool:
        return self.file is None or _stat(self.file[0]) == self.file[1]


@final
class ResultCache:
    """Full tool results by hash (seed ``ToolResultCache``).

    * **Dedup**: the key is :func:`result_hash`; storing the same text from the same tool
      again keeps one entry (and refreshes its time and file record).
    * **File coherence**: an entry stored with a ``file_path`` (as a file tool's,
      :data:`FILE_TOOLS`, should be) records the file's mtime and size; once either
      differs, or the file is gone, the entry is incoherent and no longer served. (A path
      that did not exist when stored stays coherent while it does not.) A result stored
      without a path cannot be checked and is served as is.
    * **MCP TTL**: entries from an MCP source (:func:`is_mcp_source`) expire ``mcp_ttl``
      seconds after they were stored; others never expire. :meth:`sweep` drops expired
      entries; it also runs by itself on :meth:`store` once the oldest one is due.
    * **Non-cacheable tools**: :data:`DEFAULT_NON_CACHEABLE` plus
      :meth:`add_non_cacheable`. :meth:`cacheable` tells the caller; :meth:`store` itself
      stores anything, which is how a truncated non-cacheable result is still kept
      (cache-on-truncate, see :func:`process_result`).

    Args:
        mcp_ttl: seconds an MCP-sourced entry lives.
        clock: the time source (seconds, monotonic); tests pass a fake one.

    Raises:
        ValueError: ``mcp_ttl`` is not positive.
    """

    def __init__(self, mcp_ttl: float = 300.0, clock: Callable[[], float] = time.monotonic):
        if not mcp_ttl > 0:
            raise ValueError(f"mcp_ttl must be positive, not {mcp_ttl!r}")
        self._ttl = mcp_ttl
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._non_cacheable = set(DEFAULT_NON_CACHEABLE)
        self._next_expiry: float | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, hash: object) -> bool:
        return hash in self._entries

    @property
    def mcp_ttl(self) -> float:
        return self._ttl

    def cacheable(self, name: str) -> bool:
        """Whether results of tool ``name`` are cached as a matter of course."""
        return name not in self._non_cacheable

    def add_non_cacheable(self, *names: str) -> None:
        """Exclude more tools (an application's meta-tools) from caching."""
        self._non_cacheable.update(names)

    def store(
        self,
        tool: str,
        content: str,
        *,
        source: str = CORE_SOURCE,
        file_path: str | os.PathLike[str] | None = None,
    ) -> str:
        """Keep a full result and return its hash.

        Args:
            tool: the tool's name.
            content: its full, untruncated text.
            source: the tool's source (``"core"``, ``""`` or an MCP server's name).
            file_path: the file the result reflects; recorded (mtime and size) for file
                tools and whenever given. Pass an absolute path: it is checked from the
                process's working directory.
        """
        now = self._clock()
        self._sweep_if_due(now)
        h = result_hash(tool, content)
        file: tuple[str, _FileStat] | None = None
        if file_path is not None:
            path = os.fspath(file_path)
            file = (path, _stat(path))
        mcp = is_mcp_source(source)
        old = self._entries.get(h)
        if old is not None:
            old.stored_at, old.mcp = now, mcp
            if file is not None:
                old.file = file
        else:
            self._entries[h] = _Entry(tool, content, mcp=mcp, stored_at=now, file=file)
        if mcp:
            due = now + self._ttl
            if self._next_expiry is None or due < self._next_expiry:
                self._next_expiry = due
        return h

    def _expired(self, entry: _Entry, now: float) -> bool:
        return entry.mcp and now - entry.stored_at >= self._ttl

    def _sweep_if_due(self, now: float) -> None:
        if self._next_expiry is not None and now >= self._next_expiry:
            self.sweep()

    def sweep(self) -> int:
        """Drop every expired entry; return how many were dropped."""
        now = self._clock()
        expired = [h for h, e in self._entries.items() if self._expired(e, now)]
        for h in expired:
            del self._entries[h]
        dues = [e.stored_at + self._ttl for e in self._entries.values() if e.mcp]
        self._next_expiry = min(dues) if dues else None
        return len(expired)

    def _entry(self, hash: str) -> _Entry:
        entry = self._entries.get(hash)
        if entry is None:
            raise CacheMiss(hash, "unknown")
        if self._expired(entry, self._clock()):
            del self._entries[hash]
            raise CacheMiss(hash, "expired")
        if not entry.coherent():
            del self._entries[hash]
            raise CacheMiss(hash, "changed")
        return entry

    def lookup(self, hash: str) -> str:
        """The full text stored under ``hash``.

        Raises:
            CacheMiss: unknown, expired or no longer coherent (the latter two are dropped).
        """
        return self._entry(hash).content

    def get(self, hash: str) -> str | None:
        """The full text stored under ``hash``; None when unknown, expired or
        incoherent."""
        try:
            return self._entry(hash).content
        except CacheMiss:
            return None

    def check_coherence(self, hash: str) -> bool:
        """Whether the entry's file is as it was when stored (true for an entry with no
        file); false for an unknown hash or a file that changed (mtime or size) or
        vanished. Does not drop anything."""
        entry = self._entries.get(hash)
        return entry is not None and entry.coherent()


# --------------------------------------------------------------------------------------
# Processing one result


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


def _read_arguments(hash: str, offset: int) -> str:
    return msgspec.json.encode({"hash": hash, "offset": offset}).decode()


def _nudge(hash: str, entry: _Entry, shown_bytes: int) -> str:
    total = len(entry.data)
    return (
        f"{NUDGE_PREFIX}showing bytes 0-{shown_bytes} of {total} "
        f"({entry.line_of(shown_bytes) - 1} complete lines of {entry.total_lines}). "
        f"The full result is cached under hash {hash}. To read the rest, call "
        f"{READ_TOOL_NAME} with {_read_arguments(hash, shown_bytes)} (offset is a byte "
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
        counter: counts tokens (None: :func:`estimate_tokens`).
        source: the tool's source, for the cache's TTL (see :func:`is_mcp_source`).
        file_path: the file the result reflects, for the cache's coherence check.
    """
    shown, truncated = truncate_stage1(text, truncation.get(tool_name, TruncationConfig()))
    limit = budget.limit_tokens(context_tokens)
    if limit is not None and (truncated or _count(counter, shown) > limit):
        # Will be cut (or already was): the nudge must fit too. Rendered with the full
        # sizes, its numbers are as long as they can get.
        h = result_hash(tool_name, text)
        probe = _Entry(tool_name, text, mcp=False, stored_at=0.0, file=None)
        reserve = _count(counter, _nudge(h, probe, len(probe.data)))
        kept = _cut_to_tokens(shown, max(limit - reserve, 0), counter)
        truncated = truncated or len(kept) < len(shown)
        shown = kept
    if not (truncated or cache.cacheable(tool_name)):
        return ProcessedResult(text_for_model=text, truncated=False)
    h = cache.store(tool_name, text, source=source, file_path=file_path)
    if not truncated:
        return ProcessedResult(text_for_model=text, truncated=False, cache_hash=h)
    nudge = _nudge(h, cache._entries[h], len(_encode(shown)))
    return ProcessedResult(text_for_model=shown + nudge, truncated=True, cache_hash=h)


# --------------------------------------------------------------------------------------
# tool_result_read


class _ReadArguments(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    hash: str
    offset: int | None = None
    start_line: int | None = None
    num_lines: int = DEFAULT_FRAGMENT_LINES
    max_bytes: int = DEFAULT_FRAGMENT_BYTES


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
        if args.offset is not None and args.start_line is not None:
            return _bad_arguments("pass offset or start_line, not both")
        if (args.offset or 0) < 0 or (args.start_line is not None and args.start_line < 1):
            return _bad_arguments("offset must be >= 0 and start_line >= 1")
        if args.num_lines < 1 or args.max_bytes < 1:
            return _bad_arguments("num_lines and max_bytes must be >= 1")
        try:
            entry = self._cache._entry(args.hash)
        except CacheMiss as miss:
            return ToolOutcome(text=_miss_text(miss), is_error=True)
        data = entry.data
        if args.start_line is not None:
            start = entry.line_start(args.start_line)
        else:
            start = args.offset or 0
        if start > len(data):
            return ToolOutcome(
                text=f"offset {start} is past the end of the result ({len(data)} bytes)",
                is_error=True,
            )
        if start < len(data) and _is_continuation(data[start]):
            return _bad_arguments(
                f"offset {start} falls inside a character; use an offset from a header"
            )
        end = self._fragment_end(entry, start, args)
        return ToolOutcome(text=_header(args.hash, entry, start, end) + _decode(data[start:end]))

    def _fragment_end(self, entry: _Entry, start: int, args: _ReadArguments) -> int:
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
        end = _boundary_at_or_before(data, end)
        return end if end > start else _boundary_after(data, start)


def _bad_arguments(why: str) -> ToolOutcome:
    return ToolOutcome(text=f"{READ_TOOL_NAME}: {why}", is_error=True, parse_error=True)


def _miss_text(miss: CacheMiss) -> str:
    why = {
        "unknown": "no cached result has this hash (it may have been swept)",
        "expired": "the cached result expired",
        "changed": "the file changed since the result was cached; run the tool again",
    }[miss.reason]
    return f"{READ_TOOL_NAME}: {miss.hash}: {why}"


def _header(hash: str, entry: _Entry, start: int, end: int) -> str:
    total = len(entry.data)
    first = entry.line_of(start)
    last = entry.line_of(end - 1) if end > start else first
    where = f"bytes {start}-{end} of {total}, lines {first}-{last} of {entry.total_lines}"
    if end < total and entry.data[end - 1] != 0x0A:
        where += " (ends mid-line)"
    if end < total:
        rest = f"more remains: call {READ_TOOL_NAME} with {_read_arguments(hash, end)}"
    else:
        rest = "end of result"
    return f"[{READ_TOOL_NAME}: {where}; {rest}]\n"
