"""What a run may use. The parent enforces every item; the child is told, never trusted."""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from typing import Final, final

import msgspec
from msgspec import UNSET, UnsetType

from protocol import DEFAULT_MAX_INFLIGHT, CallLimits, StartBudget
from runner import DEFAULT_DISK_BYTES

from ._errors import BudgetError

__all__ = ["DEFAULTS", "DEFAULT_OUTPUT_BYTES", "UNSET", "Budget", "given"]

#: Default cap on each of stdout and stderr kept from a run: enough for any log a person
#: reads, small enough that a program printing in a loop costs the host 1 MiB, not gigabytes.
DEFAULT_OUTPUT_BYTES: Final = 1 << 20

#: The safe default of each item that has one. An item left :data:`UNSET` takes its
#: default wherever the level can enforce it on this host, and is not applied where it
#: cannot (:meth:`Budget.applied`); ``None`` lifts it explicitly.
DEFAULTS: Final[Mapping[str, int | float]] = {
    # Processes and threads at once: room for thread pools and a few worker processes,
    # not for a fork bomb.
    "max_processes": 256,
    # Bytes of files (a confined run's working directory and /tmp together): the runner's
    # own default, 64 MiB, room for scratch files and a small data set, a fraction of any
    # memory budget worth the name (the files are in memory); and so 4096 files.
    "max_disk": DEFAULT_DISK_BYTES,
}


def given(value: int | UnsetType | None) -> int | None:
    """An applied item's limit: ``None`` for no limit (an item never left unset)."""
    return None if value is UNSET else value


@final
class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Limits for one run. ``None`` (or 0 for counts) means "not asked for".

    An item that is asked for and that the level cannot enforce on this host makes the run
    refuse to start (:class:`~sandbox.BudgetUnsupported`): never silently ignored. An item
    with a safe default (:data:`DEFAULTS`) is :data:`UNSET` until given: it then has its
    default where the level can enforce it, and ``None`` lifts it.

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
        max_open_files_per_process: descriptors each process of the program may hold open
            (an rlimit: the kernel has no count of descriptors for a whole run, so a run of
            N processes may hold N times as many).
        max_processes: processes (and threads) the program may run at once; by default
            256 where the level can enforce it; ``None`` for no limit.
        max_disk: bytes the program may keep in files. At ``confined`` its working
            directory and ``/tmp`` are one file system of the run's own, of this size, which
            holds one file (or directory) per 16 KiB of it, at least 64: by default 64 MiB
            and 4096 files; ``None`` for no bound but memory (the files are in memory,
            charged to the run's memory cgroup and ``max_memory``). A program that fails
            while that file system is full ends with kind ``limit``, cause ``disk``.
            ``process`` cannot enforce it (the working directory is the host's).
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
    max_open_files_per_process: int | None = None
    max_processes: int | UnsetType | None = UNSET
    max_disk: int | UnsetType | None = UNSET

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
        for name in (
            "max_memory",
            "max_file_size",
            "max_open_files_per_process",
            "max_processes",
            "max_disk",
        ):
            value = getattr(self, name)
            if value is not None and value is not UNSET and value < 1:
                raise BudgetError(f"{name} must be >= 1, got {value}")
        files = self.max_open_files_per_process
        if files is not None and files < 16:
            raise BudgetError(
                "max_open_files_per_process must be >= 16: the runner itself needs a few"
            )

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
                "max_open_files_per_process",
                "max_processes",
                "max_disk",
            )
            if getattr(self, name) not in (None, UNSET)
        ]
        items.extend(name for name in ("max_calls", "max_bytes") if getattr(self, name))
        return items

    def call_limits(self) -> CallLimits:
        """The limits the parent's call server enforces (:class:`protocol.Server`)."""
        return CallLimits(
            max_calls=self.max_calls or None,
            max_bytes=self.max_bytes or None,
            max_inflight=self.max_inflight,
            max_call_deadline=self.max_call_deadline,
        )

    def start_budget(self) -> StartBudget:
        """What the Start frame tells the child of this budget: the one place where seconds
        become the wire's nanoseconds. The wire writes "not asked for" as 0."""
        return StartBudget(
            wall_clock=0 if self.wall_clock is None else int(self.wall_clock * 1e9),
            max_calls=self.max_calls,
            max_bytes=self.max_bytes,
            max_memory=self.max_memory or 0,
        )

    def applied(self, enforceable: Container[str]) -> Budget:
        """This budget as a level applies it: each item left unset takes its default if the
        level can enforce that item here (``enforceable``), and no limit otherwise."""
        changes = {
            name: default if name in enforceable else None
            for name, default in DEFAULTS.items()
            if getattr(self, name) is UNSET
        }
        return msgspec.structs.replace(self, **changes) if changes else self
