"""Isolation levels, and which budget items each can enforce on this host."""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from typing import Final

from .._budget import DEFAULTS, Budget
from .._children import cgroup_support
from .._errors import BudgetUnsupported

__all__ = [
    "Level",
    "applied_budget",
    "cgroups_usable",
    "check_budget",
    "confinement_gaps",
    "unenforceable",
    "with_defaults",
]


class Level(enum.StrEnum):
    """How strong the wall between the program and the host is.

    * ``in_process``: no wall; trusted code only. The program runs in a thread of the host
      process with the same call semantics and call budgets; the baseline for measuring
      what isolation costs.
    * ``process``: a fresh child process per run: own session, scrubbed environment,
      private working directory, only its channels and stdio inherited, rlimits, a per-run
      cgroup where the host allows one, death with the host, no survivors.
    * ``confined``: ``process``, plus user, PID, network, mount, IPC, UTS and cgroup
      namespaces, a read-only filesystem view holding only what the runner needs, Landlock,
      a seccomp filter, no capabilities and ``no_new_privs``. Refused where the host cannot
      provide every one of these walls (see :func:`confinement_gaps`).
    """

    IN_PROCESS = "in_process"
    PROCESS = "process"
    CONFINED = "confined"


# Items every level enforces: the parent's Server counts and times every call.
_CALL_ITEMS = frozenset({"max_calls", "max_bytes", "max_call_deadline"})
# Items only a process boundary can enforce.
_PROCESS_ONLY = (
    "wall_clock",
    "max_memory",
    "max_cpu",
    "max_file_size",
    "max_open_files_per_process",
    "max_processes",
    "max_disk",
)


@functools.cache
def _process_gaps() -> dict[str, str]:
    support = cgroup_support()
    gaps: dict[str, str] = {}
    if support["memory"] is not None:
        gaps["max_memory"] = (
            f"needs a per-run memory cgroup to cap every process of the run ({support['memory']})"
        )
    if support["pids"] is not None:
        gaps["max_processes"] = (
            f"needs a per-run pids cgroup (rlimits do not bind root) ({support['pids']})"
        )
    return gaps


# What in_process cannot enforce, whatever the host: worked out once, not per run.
_IN_PROCESS_GAPS: Final[Mapping[str, str]] = dict.fromkeys(
    _PROCESS_ONLY, "in_process runs in a thread of the host: nothing can stop or limit it"
)
_IN_PROCESS_DEFAULTED: Final = frozenset(DEFAULTS) - frozenset(_IN_PROCESS_GAPS)


def unenforceable(level: Level) -> dict[str, str]:
    """Budget items ``level`` cannot enforce on this host, with the reason for each."""
    return dict(_gaps(level))


def _gaps(level: Level) -> Mapping[str, str]:
    """:func:`unenforceable`, not to be changed by the caller (in_process's is shared)."""
    if level is Level.CONFINED:
        return _process_gaps()
    if level is Level.PROCESS:
        gaps = dict(_process_gaps())
        gaps["max_disk"] = (
            "the working directory is a directory of the host's: only confined gives a run "
            "a file system of its own to bound"
        )
        return gaps
    return _IN_PROCESS_GAPS


def check_budget(level: Level, budget: Budget) -> None:
    """Refuse a budget with an item the level cannot enforce here.

    Raises:
        BudgetUnsupported: naming each such item and why.
    """
    gaps = _gaps(level)
    missing = [item for item in budget.asked() if item in gaps and item not in _CALL_ITEMS]
    if missing:
        raise BudgetUnsupported(level.value, missing, dict(gaps))


def applied_budget(level: Level, budget: Budget) -> Budget:
    """``budget`` as ``level`` applies it here: refused if it asks for an item the level
    cannot enforce; each item left unset with its default where the level can enforce it.

    Raises:
        BudgetUnsupported: naming each item asked for that the level cannot enforce.
    """
    check_budget(level, budget)
    return with_defaults(level, budget)


def with_defaults(level: Level, budget: Budget) -> Budget:
    """``budget`` with each item left unset at its default where ``level`` can enforce it
    here, and no limit where it cannot (nothing refused: see :func:`applied_budget`)."""
    if level is Level.IN_PROCESS:
        return budget.applied(_IN_PROCESS_DEFAULTED)
    gaps = _gaps(level)
    return budget.applied({name for name in DEFAULTS if name not in gaps})


@functools.cache
def cgroups_usable() -> bool:
    """Whether per-run cgroups can be made here (all three controllers)."""
    return all(reason is None for reason in cgroup_support().values())


@functools.cache
def confinement_gaps() -> dict[str, str]:
    """The walls of the confined level this host cannot provide, with the reason for each.

    Empty when the level is available. Probed once per process (namespaces are tried in a
    throwaway child).
    """
    from runner import probe_walls

    gaps = probe_walls().gaps()
    if not cgroups_usable():
        gaps["cgroups"] = "per-run cgroups cannot be made: no survivors cannot be guaranteed"
    return gaps
