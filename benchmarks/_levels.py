"""The ``--level`` option of the benchmarks that run at the child levels."""

from __future__ import annotations

import argparse
import sys

import sandbox
from sandbox import Level

#: The levels that run a child process, in the order the benchmarks measure them.
CHILD_LEVELS = [Level.PROCESS, Level.CONFINED]


def add_level_option(parser: argparse.ArgumentParser) -> None:
    """``--level`` (repeatable): the child levels to measure, both by default."""
    parser.add_argument("--level", action="append", choices=[v.value for v in CHILD_LEVELS])


def levels_here(given: list[str] | None) -> list[Level] | None:
    """The levels asked for (both child levels if none), or None when ``confined`` is among
    them and this host cannot confine (said on stderr)."""
    levels = [Level(v) for v in given] if given else list(CHILD_LEVELS)
    if Level.CONFINED in levels and sandbox.confinement_gaps():
        print(f"confined is unavailable here: {sandbox.confinement_gaps()}", file=sys.stderr)
        return None
    return levels
