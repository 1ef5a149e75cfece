"""What the suite needs of the host, and the skips that say the host lacks it.

A test that needs the confined level (or one of its walls: namespaces, Landlock, seccomp)
or cgroups skips, where the host lacks them, with a reason that starts with
:data:`HOST_CANNOT`. Where ``SANDBOX_REQUIRE_CONFINED=1`` (CI, whose host has them all:
``.ci/run``), ``tests/conftest.py`` turns each such skip into a failure: a green CI run has
run every confinement and limit test, and a host that lost a wall says so.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

import sandbox
from sandbox import Level

__all__ = [
    "HOST_CANNOT",
    "REQUIRE_CONFINED",
    "child_levels",
    "needs_confinement",
    "needs_enforcing",
    "skip_because_host_cannot",
    "skipif_host_cannot",
]

#: How the reason of a skip for a missing wall or cgroup starts.
HOST_CANNOT = "this host cannot "
#: Whether such skips are failures here (``.ci/run`` sets it).
REQUIRE_CONFINED = os.environ.get("SANDBOX_REQUIRE_CONFINED") == "1"


def skip_because_host_cannot(what: str) -> NoReturn:
    """Skip the test: this host cannot do ``what`` (a failure where it must)."""
    pytest.skip(HOST_CANNOT + what)


def skipif_host_cannot(condition: bool, what: str) -> pytest.MarkDecorator:
    """A mark that skips the test where ``condition`` holds: this host cannot do ``what``
    (a failure where it must)."""
    return pytest.mark.skipif(condition, reason=HOST_CANNOT + what)


def needs_confinement() -> pytest.MarkDecorator:
    """Skip where the confined level is unavailable, saying which walls are missing."""
    gaps = sandbox.confinement_gaps()
    return skipif_host_cannot(bool(gaps), f"confine: {gaps}")


def needs_enforcing(item: str, level: Level = Level.PROCESS) -> pytest.MarkDecorator:
    """Skip where ``level`` cannot enforce budget item ``item`` here, saying why."""
    why = sandbox.unenforceable(level).get(item)
    return skipif_host_cannot(why is not None, f"enforce {item}: {why}")


def child_levels() -> list[object]:
    """The levels that run a program in a child process, for ``parametrize``: confined
    skipped (not left out) where the host cannot confine."""
    return [Level.PROCESS, pytest.param(Level.CONFINED, marks=needs_confinement())]
