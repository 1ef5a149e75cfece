"""The execution plane: tools with claims, the executor that runs them, and a session's view.

A session decides on a tool call (its policy, its record) and an *executor* carries it out,
here (:class:`InProcess`) or in another process or machine over MCP (:class:`Remote`,
served by ``sandbox serve``). Each tool has a definition, behaviour hints, and two optional
claims read per call before it runs: its :class:`Facts` (what the call would touch) and its
:class:`Replay` (whether it may run again). The sandbox itself is a tool
(:class:`ProgramTool`), whose programs call the executor's other tools as ``host.<name>``,
each such call decided by the session's policy as a direct call is (:class:`Set`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._model import (
    Annotations,
    Call,
    CallContext,
    Closeable,
    Descriptor,
    Facts,
    Factual,
    Invoke,
    NeedsPeers,
    Replay,
    Replayable,
    Result,
    Tool,
    ToolInfo,
)
from ._capability import CAPABILITY_KEY, CAPABILITY_VERSION, Capability
from ._errors import (
    BadCapability,
    CallLost,
    Changed,
    DuplicateTool,
    ExecutorClosed,
    FactsMismatch,
    FactsUnavailable,
    NoCapability,
    NotAnExecutor,
    PlaneError,
    Refused,
    ToolMismatch,
    ToolNamedTwice,
    UnknownTool,
    UnknownVersion,
    Unreachable,
)
from ._executor import FACTS_TIMEOUT, Batcher, Executor, InProcess
from ._program import ProgramTool
from ._set import ALLOW, Batch, Decision, Policy, Set, deny

if TYPE_CHECKING:
    from ._auth import BearerToken, JwtVerifier, OAuth, read_token
    from ._remote import KEEPALIVE, Dialer, Remote, http, stdio
    from ._serve import SESSION_IDLE, ExecutorServer

# The MCP ends load the MCP SDK (most of a second): only when they are asked for.
_LAZY = {
    "BearerToken": "_auth",
    "JwtVerifier": "_auth",
    "OAuth": "_auth",
    "read_token": "_auth",
    "KEEPALIVE": "_remote",
    "Dialer": "_remote",
    "Remote": "_remote",
    "http": "_remote",
    "stdio": "_remote",
    "SESSION_IDLE": "_serve",
    "ExecutorServer": "_serve",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ALLOW",
    "CAPABILITY_KEY",
    "CAPABILITY_VERSION",
    "FACTS_TIMEOUT",
    "KEEPALIVE",
    "SESSION_IDLE",
    "Annotations",
    "BadCapability",
    "Batch",
    "Batcher",
    "BearerToken",
    "Call",
    "CallContext",
    "Capability",
    "CallLost",
    "Changed",
    "Closeable",
    "Decision",
    "Descriptor",
    "Dialer",
    "DuplicateTool",
    "Executor",
    "ExecutorClosed",
    "ExecutorServer",
    "Factual",
    "Facts",
    "FactsMismatch",
    "FactsUnavailable",
    "InProcess",
    "Invoke",
    "JwtVerifier",
    "NeedsPeers",
    "NoCapability",
    "NotAnExecutor",
    "OAuth",
    "PlaneError",
    "Policy",
    "ProgramTool",
    "Refused",
    "Remote",
    "Replay",
    "Replayable",
    "Result",
    "Set",
    "Tool",
    "ToolInfo",
    "ToolMismatch",
    "ToolNamedTwice",
    "UnknownTool",
    "UnknownVersion",
    "Unreachable",
    "deny",
    "http",
    "read_token",
    "stdio",
]
