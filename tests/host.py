"""What the suite needs of the host, and the skips that say the host lacks it.

A test that needs the confined level (or one of its walls: namespaces, Landlock, seccomp)
or cgroups skips, where the host lacks them, with a reason that starts with
:data:`HOST_CANNOT`. Where ``SANDBOX_REQUIRE_CONFINED=1`` (CI, whose host has them all:
``.ci/run``), ``tests/conftest.py`` turns each such skip into a failure: a green CI run has
run every confinement and limit test, and a host that lost a wall says so.

CI runs the confined, budget and hostile tests a second time as an ordinary user
(``make test-nonroot``), with the same setting: there, a test of what only root has here
(the run's cgroups, a uid of its own per run, a program that runs as root at ``process``)
skips with a reason that starts with :data:`AS_ORDINARY_USER`, which is never a failure.
As root, the same test runs, or skips as the host's lack (:data:`HOST_CANNOT`).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

import sandbox
from sandbox import Level

__all__ = [
    "AS_ORDINARY_USER",
    "HOST_CANNOT",
    "ORDINARY_USER",
    "REQUIRE_CONFINED",
    "child_levels",
    "late_allowed",
    "needs_confinement",
    "needs_enforcing",
    "needs_run_cgroups",
    "require_enforcing",
    "skip_as_ordinary_user",
    "skip_because_host_cannot",
    "skipif_host_cannot",
]

#: How the reason of a skip for a missing wall or cgroup starts.
HOST_CANNOT = "this host cannot "
#: Whether such skips are failures here (``.ci/run`` sets it).
REQUIRE_CONFINED = os.environ.get("SANDBOX_REQUIRE_CONFINED") == "1"
#: How the reason of a skip for what only root has here starts (never a failure).
AS_ORDINARY_USER = "as an ordinary user, "
#: Whether the suite runs as an ordinary user (not root).
ORDINARY_USER = os.geteuid() != 0


def skip_because_host_cannot(what: str) -> NoReturn:
    """Skip the test: this host cannot do ``what`` (a failure where it must)."""
    pytest.skip(HOST_CANNOT + what)


def skip_as_ordinary_user(why: str) -> NoReturn:
    """Skip the test: it tests what only root has (``why`` says what), and the suite runs
    as an ordinary user. Call it only where :data:`ORDINARY_USER` holds."""
    pytest.skip(AS_ORDINARY_USER + why)


def skipif_host_cannot(condition: bool, what: str) -> pytest.MarkDecorator:
    """A mark that skips the test where ``condition`` holds: this host cannot do ``what``
    (a failure where it must)."""
    return pytest.mark.skipif(condition, reason=HOST_CANNOT + what)


def needs_confinement() -> pytest.MarkDecorator:
    """Skip where the confined level is unavailable, saying which walls are missing."""
    gaps = sandbox.confinement_gaps()
    return skipif_host_cannot(bool(gaps), f"confine: {gaps}")


def needs_enforcing(item: str, level: Level = Level.PROCESS) -> pytest.MarkDecorator:
    """Skip where ``level`` cannot enforce budget item ``item`` here, saying why: as the
    host's lack, or, for an ordinary user, as what only root has here (its cgroups)."""
    why = sandbox.unenforceable(level).get(item)
    if why is not None and ORDINARY_USER:
        return pytest.mark.skip(reason=f"{AS_ORDINARY_USER}{level} cannot enforce {item}: {why}")
    return skipif_host_cannot(why is not None, f"enforce {item}: {why}")


def needs_run_cgroups(what: str) -> pytest.MarkDecorator:
    """Skip where a run gets no cgroups here (the test is of ``what`` they do): as the
    host's lack, or, for an ordinary user, as what only root has here."""
    from sandbox._engine._levels import cgroups_usable

    if cgroups_usable():
        return pytest.mark.skipif(False, reason="")
    if ORDINARY_USER:
        return pytest.mark.skip(reason=f"{AS_ORDINARY_USER}a run gets no cgroups here: {what}")
    return skipif_host_cannot(True, f"give a run its cgroups: {what}")


def child_levels() -> list[object]:
    """The levels that run a program in a child process, for ``parametrize``: confined
    skipped (not left out) where the host cannot confine."""
    return [Level.PROCESS, pytest.param(Level.CONFINED, marks=needs_confinement())]


def require_enforcing(item: str, level: Level) -> None:
    """In a test: skip unless ``level`` can enforce budget item ``item`` here (as
    :func:`needs_enforcing` does, for a level known only once the test runs)."""
    why = sandbox.unenforceable(level).get(item)
    if why is None:
        return
    if ORDINARY_USER:
        skip_as_ordinary_user(f"{level} cannot enforce {item}: {why}")
    skip_because_host_cannot(f"enforce {item} at {level}: {why}")


#: How much later than its wall clock a run may end in the suite's timed tests: the kill
#: and the reaping take milliseconds, a child's start tens of them, and the rest is for a
#: loaded two-core machine. A wall clock that fires 1.5 s late fails them (one that fires
#: at 8x a 1 s limit is 7 s late).
LATE = 1.5
#: The same, where no cpu cgroup keeps the host's share of the CPU (an ordinary user's
#: runs; cgroup v2, where the runs get no cpu controller): a spinning program, and the
#: suite's other workers' programs, compete with the host and a cold child's start as
#: equals, and a run ended 3 s late once on two loaded cores (1.6 s once on cgroup v2).
#: Its end is still bounded, loosely.
LATE_UNSHARED = 10.0


def late_allowed() -> float:
    """:data:`LATE` where the runs' cpu cgroup keeps the host's share of the CPU, else
    :data:`LATE_UNSHARED`."""
    from sandbox._engine._levels import host_cpu_share_held

    return LATE if host_cpu_share_held() else LATE_UNSHARED
