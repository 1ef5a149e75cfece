"""The closed set of failure kinds that cross the wire (the seed's ``toolfail`` classes).

Invariant 2: the ``kind`` of a failed Response or Result is one of these and nothing else,
on both sides, so that a caller can tell "try again" from "this will never work". A kind
outside the set arriving on the wire is a protocol error, not a new kind. The set follows
gRPC status codes, folded to the distinctions a caller acts on.
"""

from __future__ import annotations

import enum

__all__ = ["Kind"]


class Kind(enum.StrEnum):
    """Why a call or a run failed, and whether trying again can help.

    ========== =================================================== ==================
    kind       meaning                                             retry?
    ========== =================================================== ==================
    invalid    bad arguments, unknown tool, malformed program      no: fix the call
    denied     refused by policy (the host will not allow it)      no
    limit      a budget, quota, in-flight cap or size limit        not in this run
    transient  a deadline passed or a temporary failure            yes, as it was
    canceled   the call or the run was canceled                    no
    raised     the tool or the program raised an error             only if changed
    unknown    a failure nobody classified                         unknown
    ========== =================================================== ==================
    """

    INVALID = "invalid"
    DENIED = "denied"
    LIMIT = "limit"
    TRANSIENT = "transient"
    CANCELED = "canceled"
    RAISED = "raised"
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        """True when the same call, made again unchanged, may succeed."""
        return self is Kind.TRANSIENT

    @property
    def permanent(self) -> bool:
        """True when the same call can never succeed, however often it is tried."""
        return self in _PERMANENT


_PERMANENT = frozenset({Kind.INVALID, Kind.DENIED, Kind.CANCELED})
