"""The execution plane's exceptions.

::

    PlaneError (SandboxError)
    ├── DuplicateTool (ToolError)    two tools of one executor have one name
    ├── UnknownTool (LookupError)    a call of a tool the executor does not have
    ├── FactsUnavailable             a facts reading failed or timed out: the call is blocked
    ├── Refused                      the session's policy refused the call
    ├── ExecutorClosed               the executor was closed
    ├── CallLost                     the connection went while the call was in flight
    ├── Unreachable                  the connection was lost and dialing again failed
    ├── Changed                      a redial reached another executor: every request fails
    └── NotAnExecutor                the server is not one (Remote's checks), with a
        subclass for each reason: NoCapability, UnknownVersion, BadCapability,
        ToolMismatch, ToolNamedTwice, FactsMismatch
"""

from __future__ import annotations

from .._errors import SandboxError, ToolError

__all__ = [
    "BadCapability",
    "CallLost",
    "Changed",
    "DuplicateTool",
    "ExecutorClosed",
    "FactsMismatch",
    "FactsUnavailable",
    "NoCapability",
    "NotAnExecutor",
    "PlaneError",
    "Refused",
    "ToolMismatch",
    "ToolNamedTwice",
    "UnknownTool",
    "UnknownVersion",
    "Unreachable",
]


class PlaneError(SandboxError):
    """Root of the execution plane's errors."""


class DuplicateTool(PlaneError, ToolError):
    """Two tools of one executor have one name: a session could not say which runs."""


class UnknownTool(PlaneError, LookupError):
    """A call names a tool the executor does not have."""


class FactsUnavailable(PlaneError):
    """A call's facts could not be read (the tool failed, the request failed or timed out).

    It blocks the call: a policy never decides on a guess.
    """


class Refused(PlaneError):
    """The session's policy refused the call; it did not run.

    Attributes:
        reason: the policy's reason.
    """

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(f"{tool}: refused by policy: {reason}" if reason else f"{tool}: refused")
        self.reason = reason


class ExecutorClosed(PlaneError):
    """The executor is closed; nothing more runs through it."""


class CallLost(PlaneError):
    """The connection was lost while the call was in flight. It may have run, so it is not
    sent again."""


class Unreachable(PlaneError):
    """The connection was lost and dialing again failed; the next request dials again."""


class Changed(PlaneError):
    """A redial reached an executor that is not the one the session started with (another
    descriptor, other tools or claims). Every request fails from then on."""


class NotAnExecutor(PlaneError):
    """The server at the other end is not an executor this client can trust."""


class NoCapability(NotAnExecutor):
    """The server does not advertise the executor capability (a plain MCP server)."""


class UnknownVersion(NotAnExecutor):
    """The capability is of a version this client does not read."""


class BadCapability(NotAnExecutor):
    """The capability does not decode."""


class ToolMismatch(NotAnExecutor):
    """A tool is listed but not named by the capability, or named but not listed."""


class ToolNamedTwice(NotAnExecutor):
    """The capability or the listing names one tool twice."""


class FactsMismatch(NotAnExecutor):
    """The capability's facts flag for a tool disagrees with the tool's listing."""
