"""The exceptions of the ``sandbox`` package.

::

    SandboxError                 the host could not do what was asked; nothing ran
    ├── BudgetError (ValueError)       a budget item of a bad type or value, or past the wire
    ├── BudgetUnsupported              a budget item this level cannot enforce on this host
    ├── CgroupSettingError (ValueError) SANDBOX_CGROUP names no cgroup the host can use
    ├── ConfinementUnavailable         the confined level lacks a wall on this host
    ├── ToolError (ValueError)         a tool that cannot be bound (bad name, duplicate)
    └── SpawnFailed (OSError)          the child process could not be started

A run that *started* never raises these for what the program did: its failures come back
as a :class:`~sandbox.RunResult` with a :class:`~protocol.Kind`.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "BudgetError",
    "BudgetUnsupported",
    "CgroupSettingError",
    "ConfinementUnavailable",
    "SandboxError",
    "SpawnFailed",
    "ToolError",
]


class SandboxError(Exception):
    """Root of the host's errors."""


class CgroupSettingError(SandboxError, ValueError):
    """``SANDBOX_CGROUP`` names no cgroup the host can use; the message says why and how to
    fix it. The setting is never ignored or worked around: every run that needs the
    host's cgroups raises this until it is fixed or unset."""


class BudgetError(SandboxError, ValueError):
    """A budget with an impossible value: the message names each bad item.

    Attributes:
        items: each bad item, with what is wrong with it.
    """

    def __init__(self, items: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{item} {problem}" for item, problem in items.items()))
        self.items = dict(items)


class BudgetUnsupported(SandboxError):
    """A budget item the chosen level cannot enforce on this host; refused, never ignored.

    Attributes:
        items: the budget items that cannot be enforced.
        level: the level that was asked for.
    """

    def __init__(self, level: str, items: list[str], why: dict[str, str]) -> None:
        detail = "; ".join(f"{item}: {why.get(item, 'not supported')}" for item in items)
        super().__init__(f"level {level!r} cannot enforce {', '.join(items)} here ({detail})")
        self.level = level
        self.items = items


class ConfinementUnavailable(SandboxError):
    """The confined level was asked for, and this host cannot put up all of its walls.

    Attributes:
        gaps: each missing wall, with the reason.
    """

    def __init__(self, gaps: dict[str, str]) -> None:
        detail = "; ".join(f"{wall}: {why}" for wall, why in gaps.items())
        super().__init__(
            f"the confined level is not available on this host ({detail}); "
            "`sandbox doctor` says how to get what is missing"
        )
        self.gaps = gaps


class ToolError(SandboxError, ValueError):
    """A tool that cannot be bound."""


class SpawnFailed(SandboxError, OSError):
    """The child process could not be started."""
