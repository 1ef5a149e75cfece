"""What a run may use. The parent enforces every item; the child is told, never trusted."""

from __future__ import annotations

import copy
import math
from collections.abc import Container, Mapping
from typing import Final, TypeVar, final

import msgspec
import msgspec.structs
from msgspec import UNSET, UnsetType

from protocol import DEFAULT_MAX_INFLIGHT, INT64_MAX, CallLimits, StartBudget
from runner import DEFAULT_DISK_BYTES

from ._errors import BudgetError
from ._text import size

_T = TypeVar("_T")

__all__ = ["DEFAULTS", "UNSET", "Budget", "given"]

#: The safe default of each item that has one, and the only place each is written (the
#: API, every command and its help text read them here). An item left :data:`UNSET` takes
#: its default wherever the level can enforce it on this host, and is not applied where it
#: cannot (:meth:`Budget.applied`); ``None`` lifts it explicitly.
DEFAULTS: Final[Mapping[str, int | float]] = {
    # Seconds the whole run may take: a program that runs longer than this has most likely
    # hung (``in_process`` cannot enforce it, and does not apply it). Generated programs
    # that do real work (a few hundred tool calls, a data set of some MiB) take seconds.
    "wall_clock": 30.0,
    # Bytes of memory, all of the run's processes together (page cache and in-memory files
    # included): 512 MiB, Cloud Run's default for a whole service instance; room for a
    # data frame of some million rows, while four runs at once still fit in a small host's
    # 4 GiB. A runner starts in about 10 MiB. ``in_process`` cannot enforce it, and does
    # not apply it; neither does a host without a memory cgroup.
    "max_memory": 512 << 20,
    # Tool calls in flight at once: the protocol's own default (invariant 4). It cannot be
    # lifted, only changed.
    "max_inflight": DEFAULT_MAX_INFLIGHT,
    # Bytes kept of each of stdout and stderr: enough for any log a person reads, small
    # enough that a program printing in a loop costs the host 1 MiB, not gigabytes.
    "max_output": 1 << 20,
    # Processes and threads at once: room for thread pools and a few worker processes,
    # not for a fork bomb.
    "max_processes": 256,
    # Bytes of files (a confined run's working directory and /tmp together): the runner's
    # own default, 64 MiB, room for scratch files and a small data set, a fraction of any
    # memory budget worth the name (the files are in memory); and so 4096 files.
    "max_disk": DEFAULT_DISK_BYTES,
}


# -- validation: every item, once, when a Budget is made (or decoded) --

#: The least ``max_memory``. A Python runner needs about 10 MiB to start (a cold one failed
#: at 8 MiB, the kernel refusing a limit below what the run's cgroup already holds:
#: ``EBUSY``); 16 MiB leaves room for the program's first imports.
MIN_MEMORY: Final = 16 << 20

#: Items every level enforces whatever their value (never "asked for" of a level).
_ALWAYS_ENFORCED: Final = frozenset({"max_inflight", "max_output"})
#: Items in seconds (an int or a float); every other item is a whole number.
_SECONDS: Final = frozenset({"wall_clock", "max_call_deadline", "max_cpu"})
#: The least value of each whole-number item, and why where it is not plain.
_LEAST: Final[Mapping[str, tuple[int, str]]] = {
    "max_calls": (0, ""),
    "max_bytes": (0, ""),
    "max_inflight": (1, ""),
    "max_memory": (MIN_MEMORY, " (a Python runner needs about 10 MiB to start)"),
    "max_output": (0, ""),
    "max_file_size": (1, ""),
    "max_open_files_per_process": (16, " (the runner itself needs a few)"),
    "max_processes": (1, ""),
    "max_disk": (1, ""),
}
#: Whole-number items that count bytes: their bounds are written in binary units.
_BYTES: Final = frozenset({"max_bytes", "max_memory", "max_output", "max_file_size", "max_disk"})
#: Items that ``None`` does not lift, and why.
_NOT_NONE: Final[Mapping[str, str]] = {"max_inflight": "the in-flight cap is always enforced"}


def _nanoseconds(seconds: float) -> int:
    """Seconds as the wire's whole nanoseconds (Go's ``time.Duration``)."""
    return int(seconds * 1e9)


def _problem(name: str, value: object) -> str | None:
    """What is wrong with ``value`` for item ``name``, or None if nothing is.

    Every bound the wire has is checked here, so that nothing made from a Budget (the
    Start frame, the call server's limits, rlimits, cgroup limits) can be refused later:
    integers on the wire are Go's int64, seconds go as int64 nanoseconds.
    """
    if value is UNSET and name in DEFAULTS:
        return None
    if value is None:
        return f"cannot be None: {_NOT_NONE[name]}" if name in _NOT_NONE else None
    got = f"got {value!r} ({type(value).__name__})"
    lift = "" if name in _NOT_NONE else " (None means no limit)"
    if name in _SECONDS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number of seconds (an int or a float), {got}"
        try:
            seconds = float(value)
        except OverflowError:  # an int past every float
            seconds = math.inf if value > 0 else -math.inf
        if not (seconds > 0 and math.isfinite(seconds)):
            # Zero means zero here as for every item; a run (or a call) given no time at
            # all could only fail, so it is refused with the way to ask for no limit.
            return f"must be a positive, finite number of seconds, got {value!r}{lift}"
        if not 1 <= seconds * 1e9 < 2.0**63:  # so that 1 <= _nanoseconds(value) <= INT64_MAX
            return (
                "must be from a nanosecond to 292 years (the wire's int64 nanoseconds), "
                f"got {value!r}"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        # A float is refused even when it is whole (1e9): the item is a count, and a float
        # that stands for one past 2**53 is not the count that was written.
        hint = f": int({value!r}) if that is meant" if _whole_float(value) else ""
        return f"must be a whole number (an int), {got}{hint}"
    least, why = _LEAST[name]
    if value < least:
        bound = size(least) if name in _BYTES and least else str(least)
        return f"must be at least {bound}{why}, got {value!r}"
    if value > INT64_MAX:
        return f"must be at most {INT64_MAX} (Go's int64, as on the wire), got {value!r}"
    return None


def _whole_float(value: object) -> bool:
    return isinstance(value, float) and value.is_integer()


def given(value: _T | UnsetType | None) -> _T | None:
    """An applied item's limit: ``None`` for no limit (an item never left unset)."""
    return None if value is UNSET else value


@final
class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Limits for one run. ``None`` means no limit, for every item; 0 means zero.

    An item is a value, ``None`` (no limit), or, for an item with a safe default
    (:data:`DEFAULTS`), :data:`UNSET` until given: it then has its default where the level
    can enforce it, and ``None`` lifts it. An item that is asked for and that the level
    cannot enforce on this host makes the run refuse to start
    (:class:`~sandbox.BudgetUnsupported`): never silently ignored.

    Every item is checked once, when the budget is made (or decoded): its type, its value,
    and that the wire can carry it (Go's int64). Items in seconds are an ``int`` or a
    ``float``; every other item is an ``int``: a float is refused even when it is whole
    (write ``int(1e9)``), and a ``bool`` is never a number. Zero means zero for every item
    (``max_calls=0``: no call); an item in seconds must be positive, since no time at all
    could only fail. Every bad item is named in one :class:`~sandbox.BudgetError`
    (``.items``: each with what is wrong with it).

    Attributes:
        wall_clock: seconds the whole run may take; the child is killed at the limit. By
            default 30 where the level can enforce it (not ``in_process``).
        max_calls: tool calls the program may make (0: none at all).
        max_bytes: result bytes the program may receive from tools.
        max_inflight: tool calls in flight at once: by default 64, always enforced (it
            cannot be ``None``).
        max_call_deadline: seconds one tool call may take; the program may ask for less.
        max_memory: bytes of memory the program (all its processes) may use: by default
            512 MiB where the level can enforce it (not ``in_process``, nor a host without
            a memory cgroup).
        max_cpu: seconds of CPU time the program may use.
        max_output: bytes of stdout, and of stderr, kept (by default 1 MiB); the rest is
            counted and dropped.
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

    wall_clock: float | UnsetType | None = UNSET
    max_calls: int | None = None
    max_bytes: int | None = None
    max_inflight: int | UnsetType = UNSET
    max_call_deadline: float | None = None
    max_memory: int | UnsetType | None = UNSET
    max_cpu: float | None = None
    max_output: int | UnsetType | None = UNSET
    max_file_size: int | None = None
    max_open_files_per_process: int | None = None
    max_processes: int | UnsetType | None = UNSET
    max_disk: int | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        problems = {
            name: problem
            for name in self.__struct_fields__
            if (problem := _problem(name, getattr(self, name))) is not None
        }
        if problems:
            raise BudgetError(problems)

    def asked(self) -> list[str]:
        """The items that are asked for, by name (the ones a level must be able to enforce)."""
        return [
            name
            for name in self.__struct_fields__
            if name not in _ALWAYS_ENFORCED
            and (value := getattr(self, name)) is not None
            and value is not UNSET
        ]

    def call_limits(self) -> CallLimits:
        """The limits the parent's call server enforces (:class:`protocol.Server`), from
        this budget as a level applies it (an item still unset has its default: every
        level enforces them)."""
        b = self.applied(DEFAULTS)
        assert not isinstance(b.max_inflight, UnsetType)
        return CallLimits(
            max_calls=b.max_calls,
            max_bytes=b.max_bytes,
            max_inflight=b.max_inflight,
            max_call_deadline=b.max_call_deadline,
        )

    def start_budget(self) -> StartBudget:
        """What the Start frame tells the child of this budget as a level applies it: the
        one place where seconds become the wire's nanoseconds.

        The wire writes "not asked for" as 0 (the seed's encoding), so it cannot tell a
        budget of no calls (``max_calls=0``) from no limit: the child is told 0 either
        way. That costs nothing: the parent counts and refuses the calls (invariant 3), and
        the child is never trusted with its budget.
        """
        b = self.applied(DEFAULTS)
        assert not isinstance(b.wall_clock, UnsetType)
        return StartBudget(
            wall_clock=0 if b.wall_clock is None else _nanoseconds(b.wall_clock),
            max_calls=b.max_calls or 0,
            max_bytes=b.max_bytes or 0,
            max_memory=given(b.max_memory) or 0,
            max_inflight=self.call_limits().max_inflight,
        )

    def applied(self, enforceable: Container[str]) -> Budget:
        """This budget as a level applies it: each item left unset takes its default if the
        level can enforce that item here (``enforceable``), and no limit otherwise."""
        changes = {
            name: default if name in enforceable else None
            for name, default in DEFAULTS.items()
            if getattr(self, name) is UNSET
        }
        if not changes:
            return self
        # Every default, and None, passes validation: the copy skips it (replace() would
        # check all twelve items again, on every run's path).
        applied = copy.copy(self)
        for name, value in changes.items():
            msgspec.structs.force_setattr(applied, name, value)
        return applied
