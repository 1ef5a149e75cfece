"""The agent loop (ReAct) on the execution plane: a model writes programs that run in the
sandbox and call host tools, under the session's policy, until it finishes.

:class:`Agent` is the loop (not to be confused with the execution plane's Executor, which
runs one tool call); :class:`PlaneTools` gives it a session's tools; :class:`OpenAICaller`
talks to any OpenAI-compatible chat endpoint. What builders of callers, context managers
and hooks need beyond this is in :mod:`sandbox.agent.parts`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import parts
from ._acting import wrap_untrusted
from ._callers import DumpCaller, LoggingCaller
from ._context import ContextWindow
from ._hooks import Approval, Breakers, Events, Grant, HumanInTheLoop, Verdict
from ._loop import Agent, TrajectoryStore
from ._tools import PlaneTools
from ._truncation import ResultBudget, TruncationConfig
from ._types import AgentResult, ModelCaller, ModelError, Paused, Step, ToolCall

if TYPE_CHECKING:
    from ._openai import OpenAICaller


def __getattr__(name: str) -> Any:
    # The OpenAI SDK loads in a few hundred milliseconds: only when it is asked for.
    if name == "OpenAICaller":
        from ._openai import OpenAICaller

        globals()[name] = OpenAICaller
        return OpenAICaller
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Agent",
    "AgentResult",
    "Approval",
    "Breakers",
    "ContextWindow",
    "DumpCaller",
    "Events",
    "Grant",
    "HumanInTheLoop",
    "LoggingCaller",
    "ModelCaller",
    "ModelError",
    "OpenAICaller",
    "Paused",
    "PlaneTools",
    "ResultBudget",
    "Step",
    "ToolCall",
    "TrajectoryStore",
    "TruncationConfig",
    "Verdict",
    "parts",
    "wrap_untrusted",
]
