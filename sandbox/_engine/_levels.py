"""Isolation levels, and which budget items each can enforce on this host."""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Mapping
from typing import Final

from .._budget import DEFAULTS, Budget
from .._children import cgroup_support, cgroups_available, runs_cpu_share_held
from .._errors import BudgetUnsupported

__all__ = [
    "Level",
    "applied_budget",
    "cgroups_usable",
    "check_budget",
    "confinement_gaps",
    "substitutes",
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


def _program_is_root(level: Level) -> bool:
    """Whether ``level``'s program runs as host root here (it could raise any rlimit)."""
    return level is Level.PROCESS and os.geteuid() == 0


def _nproc_counts_per_namespace() -> bool:
    """Whether ``RLIMIT_NPROC`` counts a confined run's processes only: a root host's run
    has a uid of its own; an unprivileged host's a user namespace of its own, in which
    Linux counts them apart since 5.14 (rlimits on top of the user namespaces' counts)."""
    if os.geteuid() == 0:
        return True
    release = os.uname().release.split("-")[0].split(".")
    try:
        return (int(release[0]), int(release[1])) >= (5, 14)
    except (IndexError, ValueError):
        return False


@functools.cache
def _enforcement(level: Level) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """What child level ``level`` cannot enforce here (its gaps), and what it enforces by
    a substitute weaker than the limit itself (with what differs).

    With the run's cgroups (a run gets every controller, or none), memory and processes
    are limits on the run as a whole. Without them, a program that is not host root
    cannot raise its rlimits, which then stand in: ``RLIMIT_DATA`` for memory, per
    process; and at ``confined``, ``RLIMIT_NPROC`` for processes, which the kernel counts
    per uid in each user namespace: an unprivileged host's run has a user namespace of
    its own, a root host's run a uid of its own, so the count is the run's. (At
    ``process`` it would count every process of the host's uid.)
    """
    gaps: dict[str, str] = {}
    substitutes: dict[str, str] = {}
    if level is Level.PROCESS:
        gaps["max_disk"] = (
            "the working directory is a directory of the host's: only confined gives a run "
            "a file system of its own to bound"
        )
    support = cgroup_support()
    if cgroups_usable():
        # On cgroup v2, the runs may have cgroups without the memory or pids controller.
        lacking = {c for c in ("memory", "pids") if support.get(c) is not None}
        if not lacking:
            return gaps, substitutes
        why = "; ".join(f"{c}: {support[c]}" for c in sorted(lacking))
        no_cgroups = f"the run's cgroups lack that controller here: {why}"
    else:
        lacking = {"memory", "pids"}
        # The first controller that cannot be made says why (`sandbox doctor` lists them).
        why = next((f"{name}: {why}" for name, why in support.items() if why), "")
        no_cgroups = f"no per-run cgroups here: {why}"
    if _program_is_root(level):
        if "memory" in lacking:
            gaps["max_memory"] = (
                "needs a per-run memory cgroup: the program runs as root, which can raise "
                f"any rlimit ({no_cgroups})"
            )
        if "pids" in lacking:
            gaps["max_processes"] = (
                "needs a per-run pids cgroup: the program runs as root, which RLIMIT_NPROC "
                f"does not bind ({no_cgroups})"
            )
        return gaps, substitutes
    total = (
        "the run's processes together may hold max_processes times as much"
        if level is Level.CONFINED
        else "nothing bounds how many processes a run has at this level, so nothing "
        "bounds their total"
    )
    if "memory" in lacking:
        substitutes["max_memory"] = (
            f"per process, not for the run as a whole ({no_cgroups}): each process may hold "
            "max_memory bytes of private memory (heap and anonymous mappings: RLIMIT_DATA) "
            "beyond what the runner held when the run began, and an allocation past that "
            f"fails with MemoryError; {total}. Not counted: shared memory and memfds, the "
            "page cache and the kernel's own memory (at confined, the run's files are bounded "
            "by max_disk). The host cannot see the run's memory: it takes the program's "
            "MemoryError for the limit"
        )
    if "pids" in lacking and level is Level.CONFINED and _nproc_counts_per_namespace():
        substitutes["max_processes"] = (
            f"by RLIMIT_NPROC ({no_cgroups}), which the kernel counts for the run's own "
            "user namespace or uid: the run's processes and threads, as a pids cgroup "
            "counts them, but the host does not see a fork refused (the program gets "
            "EAGAIN)"
        )
    elif "pids" in lacking:
        where = "" if level is Level.PROCESS else ", in every user namespace (Linux < 5.14)"
        gaps["max_processes"] = (
            "needs a per-run pids cgroup: RLIMIT_NPROC would count every process of the "
            f"host's uid{where}, not the run's ({no_cgroups})"
        )
    return gaps, substitutes


# What in_process cannot enforce, whatever the host: worked out once, not per run.
_IN_PROCESS_GAPS: Final[Mapping[str, str]] = dict.fromkeys(
    _PROCESS_ONLY, "in_process runs in a thread of the host: nothing can stop or limit it"
)
_IN_PROCESS_DEFAULTED: Final = frozenset(DEFAULTS) - frozenset(_IN_PROCESS_GAPS)


def unenforceable(level: Level) -> dict[str, str]:
    """Budget items ``level`` cannot enforce on this host, with the reason for each: asking
    for one is refused (:class:`~sandbox.BudgetUnsupported`). Those it enforces only by a
    weaker substitute are :func:`substitutes`'.

    Raises:
        ValueError: ``level`` is not a level.
    """
    return dict(_gaps(Level(level)))


def substitutes(level: Level) -> dict[str, str]:
    """Budget items ``level`` enforces on this host by a substitute weaker than the limit
    itself, each with what differs (without per-run cgroups, memory is limited per
    process, not for the run as a whole). Asking for one is not refused.

    Raises:
        ValueError: ``level`` is not a level.
    """
    level = Level(level)
    if level is Level.IN_PROCESS:
        return {}
    return dict(_enforcement(level)[1])


def _gaps(level: Level) -> Mapping[str, str]:
    """:func:`unenforceable`, not to be changed by the caller (in_process's is shared)."""
    if level is Level.IN_PROCESS:
        return _IN_PROCESS_GAPS
    return _enforcement(level)[0]


def check_budget(level: Level, budget: Budget) -> None:
    """Refuse a budget with an item the level cannot enforce here.

    Raises:
        BudgetUnsupported: naming each such item and why.
    """
    gaps = _gaps(level)
    missing = [item for item in budget.asked() if item in gaps and item not in _CALL_ITEMS]
    if missing:
        raise BudgetUnsupported(level.value, missing, dict(gaps))


#: :func:`applied_budget`'s answers by level and budget, each with the level's gaps and the
#: defaults it was worked out from: an answer stands only while those are still the level's
#: gaps and :data:`DEFAULTS` (which tests change). (Working one out took 0.08 ms of every
#: run's path here; most runs ask with the same few budgets.)
_applied: dict[tuple[Level, Budget], tuple[Mapping[str, str], tuple[int | float, ...], Budget]] = {}
#: The most answers kept (beyond, they are all forgotten and worked out again).
_APPLIED_KEPT: Final = 64


def applied_budget(level: Level, budget: Budget) -> Budget:
    """``budget`` as ``level`` applies it here: refused if it asks for an item the level
    cannot enforce; each item left unset with its default where the level can enforce it.

    Raises:
        BudgetUnsupported: naming each item asked for that the level cannot enforce.
    """
    gaps = _gaps(level)
    defaults = tuple(DEFAULTS.values())
    key = (level, budget)
    kept = _applied.get(key)
    if kept is not None and kept[0] is gaps and kept[1] == defaults:
        return kept[2]
    check_budget(level, budget)
    applied = with_defaults(level, budget)
    if len(_applied) >= _APPLIED_KEPT:
        _applied.clear()
    _applied[key] = (gaps, defaults, applied)
    return applied


def with_defaults(level: Level, budget: Budget) -> Budget:
    """``budget`` with each item left unset at its default where ``level`` can enforce it
    here, and no limit where it cannot (nothing refused: see :func:`applied_budget`)."""
    if level is Level.IN_PROCESS:
        return budget.applied(_IN_PROCESS_DEFAULTED)
    gaps = _gaps(level)
    return budget.applied({name for name in DEFAULTS if name not in gaps})


@functools.cache
def cgroups_usable() -> bool:
    """Whether per-run cgroups can be made here (v1: all three controllers; v2: the core
    interface, kill and freeze, with or without the memory and pids controllers)."""
    return cgroups_available()


@functools.cache
def host_cpu_share_held() -> bool:
    """Whether the runs' processes together weigh on the CPU as one of the host's tasks
    (a cpu cgroup), so that a run keeping every CPU busy cannot delay the host's timers
    (the wall clock, the CPU watcher) by more than a task's share."""
    return runs_cpu_share_held()  # (False where the runs get no cgroups at all)


@functools.cache
def confinement_gaps() -> dict[str, str]:
    """The walls of the confined level this host cannot provide, with the reason for each.

    Empty when the level is available. Probed once per process (namespaces are tried in a
    throwaway child). Cgroups are not among the walls: a confined run's runner is PID 1 of
    the run's own PID namespace, and when it dies the kernel kills every process of the
    namespace, so no process of the run survives it, with cgroups or without.
    """
    from runner import probe_walls

    return probe_walls().gaps()
