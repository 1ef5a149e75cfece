"""Where a run's processes come from and how they end: the zygote and pools of children
(:mod:`._supervisor`), and the handles a child is made of: the run's place on the host
(:mod:`._workspace`), its pipes (:mod:`._pipes`) and its runner process (:mod:`._runner`);
the run's cgroups on either hierarchy (:mod:`._cgroups`), the CPU time of a whole run
(:mod:`._cputime`), the end of every process a run started (:mod:`._reaper`), a
confined run's own host uid (:mod:`._uid`), and the stack of a program killed at its wall
clock (:mod:`._stack`).

The layer below the run engine: it knows processes, not programs or budgets.
"""

from __future__ import annotations

from ._cgroups import (
    CgroupSet,
    CgroupV1,
    CgroupV2,
    Hierarchy,
    NoCgroups,
    cgroup_support,
    cgroups_available,
    hierarchy,
    runs_cpu_share_held,
)
from ._cputime import RunCpu
from ._reaper import kill_tree
from ._remains import REMAINS
from ._stack import python_stack
from ._supervisor import (
    WORKDIR_PREFIX,
    Child,
    Pool,
    Spawn,
    acquire,
    host_processes,
    looks_awaiting,
    needs_start,
    shutdown,
    zygote_pid,
)
from ._uid import usable as uid_usable
from ._workspace import workdir_bases

__all__ = [
    "REMAINS",
    "WORKDIR_PREFIX",
    "CgroupSet",
    "CgroupV1",
    "CgroupV2",
    "Child",
    "Hierarchy",
    "NoCgroups",
    "Pool",
    "RunCpu",
    "Spawn",
    "acquire",
    "cgroup_support",
    "cgroups_available",
    "hierarchy",
    "host_processes",
    "kill_tree",
    "looks_awaiting",
    "needs_start",
    "python_stack",
    "runs_cpu_share_held",
    "shutdown",
    "uid_usable",
    "workdir_bases",
    "zygote_pid",
]
