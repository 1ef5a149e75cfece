"""The host side: run untrusted programs in isolated children that call back into host tools.

>>> import sandbox
>>> result = sandbox.run_sync("1 + 1")
>>> result.value
2
"""

from __future__ import annotations

from protocol import CallError, Kind

from ._budget import DEFAULTS, Budget
from ._children import Pool, Spawn
from ._engine import (
    Level,
    Tool,
    Toolset,
    confinement_gaps,
    run,
    run_sync,
    substitutes,
    tool,
    unenforceable,
)
from ._errors import (
    BudgetError,
    BudgetUnsupported,
    CgroupSettingError,
    ConfinementUnavailable,
    SandboxError,
    SpawnFailed,
    ToolError,
)
from ._result import RunResult

__all__ = [
    "DEFAULTS",
    "Budget",
    "BudgetError",
    "BudgetUnsupported",
    "CallError",
    "CgroupSettingError",
    "ConfinementUnavailable",
    "Kind",
    "Level",
    "Pool",
    "RunResult",
    "SandboxError",
    "Spawn",
    "SpawnFailed",
    "Tool",
    "ToolError",
    "Toolset",
    "run",
    "run_sync",
    "tool",
    "confinement_gaps",
    "substitutes",
    "unenforceable",
]
