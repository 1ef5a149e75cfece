"""The rest of the agent loop's public pieces, for those who build on it: the chat
messages and responses a model caller exchanges, the context manager's protocol and
reports, the result cache, the pieces of a step, and the default truncation.

Everyday use needs only :mod:`sandbox.agent`.
"""

from __future__ import annotations

from ._cache import ResultCache
from ._context import PruneObservations
from ._hooks import NoHuman
from ._tools import ToolExecutor
from ._truncation import default_truncation
from ._types import (
    ChatRequest,
    ChatResponse,
    CompactionResult,
    ContextManager,
    ContextOverflow,
    FillCheck,
    FillStatus,
    Message,
    StopReason,
    ToolOutcome,
    ToolSpec,
    Usage,
)
from ._verify import VerifyResult

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "CompactionResult",
    "ContextManager",
    "ContextOverflow",
    "FillCheck",
    "FillStatus",
    "Message",
    "NoHuman",
    "PruneObservations",
    "ResultCache",
    "StopReason",
    "ToolExecutor",
    "ToolOutcome",
    "ToolSpec",
    "Usage",
    "VerifyResult",
    "default_truncation",
]
