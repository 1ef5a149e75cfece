"""The protocol's constants, under the seed's names, each with the reason for its value."""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_MAX_INFLIGHT",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_FRAME_BYTES",
    "MAX_NESTING",
    "VERSION",
]

#: Protocol version carried in every frame as ``v``. A frame whose ``v`` is not this is
#: refused outright, never half-read (invariant 1): a silent mismatch shows up as "a field
#: read with another meaning", the hardest kind of bug to trace, so there is no attempt at
#: compatibility across versions. Within one version the wire only grows by appending
#: fields with defaults, which old readers ignore.
VERSION: Final = 1

#: Largest payload of one frame, in bytes. The prefix is 4 bytes, so a peer could announce
#: 4 GiB; honouring that would let one bad prefix make the receiver allocate gigabytes. A
#: length over this cap is refused *before* anything is allocated. 16 MiB covers a tool
#: returning a large result (a file, a page of search results); the parent's MaxBytes
#: budget bounds the total across calls separately (invariant 3).
MAX_FRAME_BYTES: Final = 16 << 20

#: Default hard cap on calls in flight at once on one call channel (invariant 4). A total
#: quota (MaxCalls) cannot stop a program that fires a hundred thousand calls at once: none
#: has returned yet, so none has been refused, and the parent drowns in handlers. 64 covers
#: the common shape of a program gathering a few dozen calls, while one runaway program
#: cannot pile up unbounded work in the host. Hosts can change it.
DEFAULT_MAX_INFLIGHT: Final = 64

#: Nesting every frame may have and still be read: arrays and objects open at once, the
#: frame's own object included. The frames of this version nest at most 3 deep (a Start's
#: bindings); the rest is room for fields a later revision of the version adds, which this
#: side skips. The decoder (msgspec, in C) recurses once per level on the interpreter's
#: stack, which ``sys.getrecursionlimit()`` bounds (1,000 by default, less the caller's own
#: frames), so it cannot promise Go's 10,000. A frame nested deeper than it can read is
#: refused with a :class:`~protocol.RemoteProtocolError`, never a ``RecursionError`` (a
#: :class:`~protocol.LocalProtocolError` when the caller's own stack left the decoder fewer
#: levels than this: the frame may be legal). Checking every frame against this number
#: would cost a scan of each frame on the hot path, so a deeper frame that the decoder can
#: follow is read.
MAX_NESTING: Final = 256

#: Integers on the wire are Go's ``int64``, as in the seed: a counter, duration or version
#: outside it is refused on receipt, and never sent.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
