"""The run engine: a program, its tools and its budget in, a :class:`~sandbox.RunResult`
out, at a level (:mod:`._levels`), in the host's own process (:mod:`._inprocess`) or in a
child process from the layer below (:mod:`._process`); :func:`run` and :func:`run_sync`
are the entry points (:mod:`._api`), and :mod:`._tools` turns host functions into the
tools a program calls.
"""

from __future__ import annotations

from ._api import run, run_sync
from ._levels import (
    Level,
    applied_budget,
    cgroups_usable,
    check_budget,
    confinement_gaps,
    substitutes,
    unenforceable,
    with_defaults,
)
from ._tools import Tool, Toolset, tool

__all__ = [
    "Level",
    "Tool",
    "Toolset",
    "applied_budget",
    "cgroups_usable",
    "check_budget",
    "confinement_gaps",
    "run",
    "run_sync",
    "substitutes",
    "tool",
    "unenforceable",
    "with_defaults",
]
