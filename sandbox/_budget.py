"""What a run may use. The parent enforces every item; the child is told, never trusted."""

from __future__ import annotations

import math
from typing import Final, final

import msgspec

from protocol import DEFAULT_MAX_INFLIGHT

from ._errors import BudgetError

__all__ = ["DEFAULT_OUTPUT_BYTES", "Budget"]

#: Default cap on each of stdout and stderr kept from a run: enough for any log a person
#: reads, small enough that a program printing in a loop costs the host 1 MiB, not gigabytes.
DEFAULT_OUTPUT_BYTES: Final = 1 << 20


@final
class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Limits for one run. ``None`` (or 0 for counts) means "not asked for".

    An item that is asked for and that the level cannot enforce on this host makes the run
    refuse to start (:class:`~sandbox.BudgetUnsupported`): never silently ignored.

    Attributes:
        wall_clock: seconds the whole run may take; the child is killed at the limit.
        max_calls: tool calls the program may make.
        max_bytes: result bytes the program may receive from tools.
        max_inflight: tool calls in flight at once (always enforced; default 64).
        max_call_deadline: seconds one tool call may take; the program may ask for less.
        max_memory: bytes of memory the program (all its processes) may use.
        max_cpu: seconds of CPU time the program may use.
        max_output: bytes of stdout, and of stderr, kept; the rest is counted and dropped.
        max_file_size: the largest file the program may write, in bytes.
        max_open_files: descriptors the program may hold open.
        max_processes: processes (and threads) the program may run at once.
    """

    wall_clock: float | None = None
    max_calls: int = 0
    max_bytes: int = 0
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    max_call_deadline: float | None = None
    max_memory: int | None = None
    max_cpu: float | None = None
    max_output: int = DEFAULT_OUTPUT_BYTES
    max_file_size: int | None = None
    max_open_files: int | None = None
    max_processes: int | None = None

    def __post_init__(self) -> None:
        for name in ("wall_clock", "max_call_deadline", "max_cpu"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise BudgetError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("max_calls", "max_bytes"):
            if getattr(self, name) < 0:
                raise BudgetError(f"{name} must be >= 0 (0 means no limit)")
        if self.max_inflight < 1:
            raise BudgetError(f"max_inflight must be >= 1, got {self.max_inflight}")
        if self.max_output < 0:
            raise BudgetError(f"max_output must be >= 0, got {self.max_output}")
        for name in ("max_memory", "max_file_size", "max_open_files", "max_processes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BudgetError(f"{name} must be >= 1, got {value}")
        if self.max_open_files is not None and self.max_open_files < 16:
            raise BudgetError("max_open_files must be >= 16: the runner itself needs a few")

    def asked(self) -> list[str]:
        """The items that are asked for, by name (the ones a level must be able to enforce)."""
        items = [
            name
            for name in (
                "wall_clock",
                "max_call_deadline",
                "max_memory",
                "max_cpu",
                "max_file_size",
                "max_open_files",
                "max_processes",
            )
            if getattr(self, name) is not None
        ]
        items.extend(name for name in ("max_calls", "max_bytes") if getattr(self, name))
        return items
