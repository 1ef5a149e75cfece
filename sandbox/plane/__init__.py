"""The execution plane: tools with claims, the executor that runs them, and a session's view.

A session decides on a tool call (its policy, its record) and an *executor* carries it out,
here (:class:`InProcess`) or in another process or machine over MCP (:class:`Remote`,
served by ``sandbox serve``). Each tool has a definition, behaviour hints, and two optional
claims read per call before it runs: its :class:`Facts` (what the call would touch) and its
:class:`Replay` (whether it may run again). The sandbox itself is a tool
(:class:`ProgramTool`), whose programs call the executor's other tools as ``host.<name>``,
each such call decided by the session's policy as a direct call is (:class:`Set`).

Its exceptions are in :mod:`sandbox.plane.errors` (:class:`PlaneError` is their root); what
builders of tools, executors and servers need beyond this is in :mod:`sandbox.plane.parts`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._model import (
    Annotations,
    Call,
    CallContext,
    Descriptor,
    Facts,
    Replay,
    Result,
    Tool,
    ToolInfo,
)
from . import errors, parts
from ._capability import CAPABILITY_KEY
from ._executor import Executor, InProcess
from ._program import ProgramTool
from ._set import ALLOW, Decision, Policy, Set, deny
from .errors import PlaneError

if TYPE_CHECKING:
    from ._auth import OAuth, read_token
    from ._remote import Remote, http, stdio
    from ._serve import ExecutorServer

# The MCP ends load the MCP SDK (most of a second): only when they are asked for.
_LAZY = {
    "OAuth": "_auth",
    "read_token": "_auth",
    "Remote": "_remote",
    "http": "_remote",
    "stdio": "_remote",
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
    "Annotations",
    "Call",
    "CallContext",
    "Decision",
    "Descriptor",
    "Executor",
    "ExecutorServer",
    "Facts",
    "InProcess",
    "OAuth",
    "PlaneError",
    "Policy",
    "ProgramTool",
    "Remote",
    "Replay",
    "Result",
    "Set",
    "Tool",
    "ToolInfo",
    "deny",
    "errors",
    "http",
    "parts",
    "read_token",
    "stdio",
]
