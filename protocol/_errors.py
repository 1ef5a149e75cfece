"""The exceptions of the ``protocol`` package, split by blame.

::

    ProtocolError                  the wire was used wrongly; the channel is finished
    ├── LocalProtocolError         *we* were about to send something illegal
    │   └── LocalFrameTooLarge     a frame over MAX_FRAME_BYTES (nothing was sent)
    ├── RemoteProtocolError        the *peer* sent something illegal
    │   ├── VersionMismatch        a frame whose ``v`` is not ours (invariant 1)
    │   ├── RemoteFrameTooLarge    a length prefix over MAX_FRAME_BYTES (nothing allocated)
    │   └── TruncatedFrame         end of stream inside a prefix or a body
    └── ChannelClosed              the channel is closed (by us, or by the peer's EOF)
    FrameTooLarge                  mixin: catch either *FrameTooLarge at once
    CallError                      one call or run failed with a Kind; not a wire fault

A ``RemoteProtocolError`` means the peer is broken or hostile: the connection is dropped
and the error reported; it never brings the host down. ``CallError`` is ordinary: the
peer spoke correctly and said "this failed, for this reason".
"""

from __future__ import annotations

from ._kinds import Kind

__all__ = [
    "CallError",
    "ChannelClosed",
    "FrameTooLarge",
    "LocalFrameTooLarge",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteFrameTooLarge",
    "RemoteProtocolError",
    "TruncatedFrame",
    "VersionMismatch",
]


class ProtocolError(Exception):
    """Root of the wire's errors: the channel that raised it is no longer usable."""


class LocalProtocolError(ProtocolError):
    """Our side tried to send something the protocol forbids. Nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids: garbage, a bad frame, a bad field."""


class VersionMismatch(RemoteProtocolError):
    """A frame carried a protocol version that is not ours, or none at all."""

    def __init__(self, got: object, expected: int) -> None:
        super().__init__(
            f"protocol version mismatch: got v={_short_repr(got)}, this side speaks v={expected}"
        )
        self.got = got
        self.expected = expected


def _short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a peer chooses what ``v`` holds."""
    try:
        text = repr(value)
    except ValueError:  # an integer too long for str()
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


class FrameTooLarge(ProtocolError):
    """A frame over the size cap, in either direction (mixin of the two concrete errors)."""

    def __init__(self, size: int, limit: int, *, sending: bool) -> None:
        verb = "refusing to send" if sending else "peer announced"
        super().__init__(f"{verb} a frame of {size} bytes; the cap is {limit} bytes")
        self.size = size
        self.limit = limit


class LocalFrameTooLarge(FrameTooLarge, LocalProtocolError):
    """We were about to send a frame over the cap; nothing was sent."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(size, limit, sending=True)


class RemoteFrameTooLarge(FrameTooLarge, RemoteProtocolError):
    """The peer's length prefix is over the cap; the body was never allocated."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(size, limit, sending=False)


class TruncatedFrame(RemoteProtocolError):
    """The stream ended inside a frame's prefix or body."""


class ChannelClosed(ProtocolError):
    """The channel was closed, by this side or by the peer's end of stream."""


class CallError(Exception):
    """A call (or a whole run) failed, classified by a :class:`Kind`.

    Handlers raise it to classify their own failures; the child's client raises it in the
    program when the parent answers a call with a failure.

    Attributes:
        kind: why it failed (the closed set of invariant 2).
        message: the human-readable reason; never used to decide anything.
    """

    def __init__(self, kind: Kind, message: str = "") -> None:
        super().__init__(f"[{kind.value}] {message}" if message else f"[{kind.value}]")
        self.kind = kind
        self.message = message

    def __reduce__(self) -> tuple[type[CallError], tuple[Kind, str]]:
        return (type(self), (self.kind, self.message))
