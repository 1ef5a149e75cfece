"""The result cache: full tool results by hash, so that nothing is cut without a way back.

Theory of operation
-------------------

A result's key is ``sha256(tool + "\\x00" + text)`` (:func:`result_hash`). The pipeline
(:func:`~sandbox.agent._results.process_result`) stores the full, pre-truncation text
whenever the tool is cacheable, *and* whenever the result was truncated, cacheable or not
(cache-on-truncate). An entry stays servable while it is coherent: an entry stored with a
file's path is dropped once the file's mtime or size changes, and an entry from an MCP
source expires after a TTL (:class:`ResultCache` gives the rules).

An :class:`Entry` also indexes its text for read-back: its UTF-8 bytes and the offset of
every newline, built on first use, so a fragment or a line number is a bisection away.

The cache is plain synchronous state for one agent loop (it is not shared across threads).
Its only I/O is an ``os.stat`` of a cached file's path, to tell whether the file changed.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import time
from collections.abc import Callable
from typing import Final, Literal, final

import msgspec

from ._truncation import encode

__all__ = [
    "CORE_SOURCE",
    "DEFAULT_NON_CACHEABLE",
    "FILE_TOOLS",
    "CacheMiss",
    "Entry",
    "ResultCache",
    "file_path_from_arguments",
    "is_mcp_source",
    "result_hash",
]

#: The source of the loop's own tools (the seed's ``GetToolSource`` value for them).
CORE_SOURCE: Final = "core"

#: Tools whose result reflects a file (seed 004, "File coherence"): store their results
#: with the file's path so that the entry is checked against the file. (Any tool's result
#: stored with a path is checked; without a path there is nothing to check.)
FILE_TOOLS: Final = frozenset({"read_file", "write_file", "edit_file"})

#: Meta-tools whose results are not worth keeping (seed 004, "Non-cacheable tools"): the
#: finish answer, a fragment of something already cached (``tool_result_read``, whose
#: module depends on this one), bookkeeping.
DEFAULT_NON_CACHEABLE: Final = frozenset(
    {"finish", "tool_result_read", "update_checklist", "store_fact"}
)


def result_hash(tool_name: str, content: str) -> str:
    """The cache key of a result: ``sha256(tool_name + "\\x00" + content)``, in hex (seed
    ``ComputeToolResultHash``). The same text from two tools has two keys."""
    return hashlib.sha256(encode(tool_name + "\x00" + content)).hexdigest()


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


class Entry:
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
            self._data = encode(self.content)
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
      (cache-on-truncate, see :func:`~sandbox.agent._results.process_result`).

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
        self._entries: dict[str, Entry] = {}
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
            self._entries[h] = Entry(tool, content, mcp=mcp, stored_at=now, file=file)
        if mcp:
            due = now + self._ttl
            if self._next_expiry is None or due < self._next_expiry:
                self._next_expiry = due
        return h

    def _expired(self, entry: Entry, now: float) -> bool:
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

    def _entry(self, hash: str) -> Entry:
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
