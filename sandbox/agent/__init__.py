"""The agent loop (ReAct) on the execution plane: a model writes programs that run in the
sandbox and call host tools, under the session's policy, until it finishes.

:class:`Agent` is the loop (not to be confused with the execution plane's Executor, which
runs one tool call); :class:`PlaneTools` gives it a session's tools; :class:`OpenAICaller`
talks to any OpenAI-compatible chat endpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._acting import wrap_untrusted
from ._cache import ResultCache
from ._callers import DumpCaller, LoggingCaller
from ._context import ContextWindow, PruneObservations
from ._hooks import Approval, Breakers, Events, Grant, HumanInTheLoop, NoHuman, Verdict
from ._loop import Agent, TrajectoryStore
from ._tools import PlaneTools, ToolExecutor
from ._truncation import ResultBudget, TruncationConfig, default_truncation
from ._types import (
    AgentResult,
    ChatRequest,
    ChatResponse,
    CompactionResult,
    ContextManager,
    ContextOverflow,
    FillCheck,
    FillStatus,
    Message,
    ModelCaller,
    ModelError,
    Paused,
    Step,
    StopReason,
    ToolCall,
    ToolOutcome,
    ToolSpec,
    Usage,
)
from ._verify import VerifyResult

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
    "ChatRequest",
    "ChatResponse",
    "CompactionResult",
    "ContextManager",
    "ContextOverflow",
    "ContextWindow",
    "DumpCaller",
    "Events",
    "FillCheck",
    "FillStatus",
    "Grant",
    "HumanInTheLoop",
    "LoggingCaller",
    "Message",
    "ModelCaller",
    "ModelError",
    "NoHuman",
    "OpenAICaller",
    "Paused",
    "PlaneTools",
    "PruneObservations",
    "ResultBudget",
    "ResultCache",
    "Step",
    "StopReason",
    "ToolCall",
    "ToolExecutor",
    "ToolOutcome",
    "ToolSpec",
    "TrajectoryStore",
    "TruncationConfig",
    "Usage",
    "Verdict",
    "VerifyResult",
    "default_truncation",
    "wrap_untrusted",
]
