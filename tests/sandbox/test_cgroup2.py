"""cgroup v2, on a real unified hierarchy mounted for the test.

These machines run cgroup v1, but the kernel mounts its cgroup2 hierarchy wherever asked.
Each test starts a host (:mod:`tests.sandbox.cgroup2_host`) in a private mount namespace
of its own (``unshare --mount``), where the machine's cgroup file systems are unmounted
and the unified hierarchy is mounted at ``/sys/fs/cgroup``: for that host, and the zygote
and runners it starts, this is a cgroup v2 system. The namespace goes with the host; the
test process's mounts, and every other test's, are never touched.

The core interface (``cgroup.procs``, ``cgroup.kill``, ``cgroup.freeze``,
``cgroup.events``, ``cpu.stat``) is always there: the kill, freeze, no-survivor and CPU
paths are tested on it. The ``memory`` and ``pids`` controllers are tested where the
mount offers them to the runs, and skipped with that reason where it does not (on a
machine whose controllers are all bound to v1 hierarchies, it offers neither).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox import Level
from sandbox._children import CgroupV1, CgroupV2, NoCgroups
from sandbox._children._cgroups import probe
from tests.host import child_levels

ROOT = Path(__file__).resolve().parents[2]
#: In the new mount namespace: the machine's cgroup mounts out, the unified hierarchy in.
MOUNT_V2 = 'umount -R /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 none /sys/fs/cgroup && exec "$@"'


@functools.cache
def _cannot_mount() -> str | None:
    """Why a cgroup2 hierarchy cannot be mounted in a private mount namespace here (None:
    it can)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    if os.geteuid() != 0:
        return "mounting a cgroup2 hierarchy needs root"
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", MOUNT_V2, "sh", "cat", "/sys/fs/cgroup/cgroup.procs"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return None if done.returncode == 0 else f"cannot mount cgroup2: {done.stderr.strip()}"


needs_mount = pytest.mark.skipif(
    _cannot_mount() is not None, reason=f"no cgroup2 mount for the test: {_cannot_mount()}"
)


def on_cgroup2(scenario: str, level: Level, backend: str = "asyncio") -> dict[str, Any]:
    """Run ``scenario`` in a host that sees a cgroup v2 system; what it found."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            MOUNT_V2,
            "sh",
            sys.executable,
            "-m",
            "tests.sandbox.cgroup2_host",
            scenario,
            level.value,
            backend,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env=env,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, f"the host failed:\n{done.stdout}\n{done.stderr}"
    assert lines, f"the host said nothing:\n{done.stderr}"
    found: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in found, found["error"]
    if "skip" in found:
        pytest.skip(found["skip"])
    return found


def _backend(anyio_backend: Any) -> str:
    return str(anyio_backend[0])


# -- the probe, on texts: no mount needed -----------------------------------------------

V1_MOUNTINFO = """\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_probe_prefers_v1_where_its_hierarchies_are_mounted() -> None:
    """A hybrid host (v1 controllers, and an empty unified hierarchy beside them) uses v1."""
    found = probe(V1_MOUNTINFO, "4:memory:/a\n8:pids:/\n6:freezer:/\n0::/\n")
    assert isinstance(found, CgroupV1)


def test_probe_uses_v2_on_a_unified_host() -> None:
    """A host with only the unified hierarchy uses v2, under ``sandbox-runtime`` in the
    host's own cgroup (found through the mount's root)."""
    found = probe(V2_MOUNTINFO, "0::/user.slice/session-1.scope\n")
    assert isinstance(found, CgroupV2)
    assert found.parent == Path("/sys/fs/cgroup/user.slice/session-1.scope/sandbox-runtime")


def test_probe_takes_a_delegated_parent() -> None:
    """Given a parent (a delegated subtree), runs are made there, on either host."""
    parent = Path("/sys/fs/cgroup/user.slice/user@1000.service/app.slice/sandbox")
    for mountinfo in (V1_MOUNTINFO, V2_MOUNTINFO):
        found = probe(mountinfo, "0::/user.slice/x\n", parent=parent)
        assert isinstance(found, CgroupV2)
        assert found.parent == parent


def test_probe_says_why_there_are_no_cgroups() -> None:
    """Neither hierarchy: no cgroups, and each controller says why."""
    found = probe("22 1 0:21 / /proc rw - proc proc rw\n", "0::/\n")
    assert isinstance(found, NoCgroups)
    assert all("no cgroup v2 mounted" in (why or "") for why in found.support().values())


# -- on a real cgroup2 mount -----------------------------------------------------------


@needs_mount
def test_v2_host_reports_its_hierarchy() -> None:
    """On a cgroup v2 host, the hierarchy is v2, ``doctor`` says so, and each of
    ``max_memory`` and ``max_processes`` is enforced or refused as the mount's
    ``cgroup.controllers`` decides, the reason naming cgroup v2."""
    found = on_cgroup2("probe", Level.PROCESS)
    assert found["version"] == 2
    assert found["doctor"]["cgroup_hierarchy"]["version"] == 2
    assert "cgroup v2" in found["doctor"]["cgroup_hierarchy"]["runs"]
    assert found["support"]["freezer"] is None  # the core interface: kill and freeze
    for controller, item in (("memory", "max_memory"), ("pids", "max_processes")):
        why = found["unenforceable"].get(item)
        if found["support"][controller] is None:
            assert why is None
        else:
            assert "cgroup v2" in why
            assert found["doctor"]["cgroups"][controller] == found["support"][controller]


@needs_mount
@pytest.mark.parametrize("level", child_levels())
def test_v2_no_survivors(level: Level, anyio_backend: Any) -> None:
    """A run of several processes (one spinning, one orphaned in a session of its own)
    ended at its wall clock: each was in the run's v2 cgroup; once ``run`` returns none
    can execute program code; once its remains are cleared, none is left, nor the
    cgroup."""
    found = on_cgroup2("no_survivors", level, _backend(anyio_backend))
    assert (found["kind"], found["cause"]) == ("limit", "wall_clock")
    assert found["members"] >= 4  # the runner, the spinner, the sleeper, the orphan
    assert found["own_cgroups"], found
    assert all("0::/sandbox-runtime/run-" in text for text in found["own_cgroups"])
    assert found["running_after_return"] == []
    assert found["cleared"]
    assert found["left"] == []
    assert found["cgroups_left"] == []


@needs_mount
def test_v2_freeze_and_kill() -> None:
    """``cgroup.freeze`` stops every member (no CPU time while frozen) and thawing
    resumes them; killing sparing one kills the others; ``cgroup.kill`` kills the rest,
    a process forking as fast as it can included; ``cgroup.events`` says empty, and the
    cgroup is removed."""
    found = on_cgroup2("freeze_and_kill", Level.PROCESS)
    assert found["joined"]
    assert found["ran"]
    assert found["frozen"]
    assert found["cpu_while_frozen"] < 0.02
    assert found["resumed"]
    assert found["only_spare_left"]
    assert found["spare_alive"]
    assert found["spare_killed"]
    assert found["empty"]
    assert found["removed"]


@needs_mount
@pytest.mark.parametrize("level", child_levels())
def test_v2_cpu_limit_counts_every_process(level: Level, anyio_backend: Any) -> None:
    """``max_cpu`` on v2 (``cpu.stat``): three forked workers are stopped when their sum
    reaches the limit, having used it and at most 0.1 s more."""
    found = on_cgroup2("cpu_limit", level, _backend(anyio_backend))
    assert (found["kind"], found["cause"]) == ("limit", "cpu")
    assert 1.0 <= found["cpu_time"] <= 1.1


@needs_mount
@pytest.mark.parametrize("level", child_levels())
def test_v2_memory_limit(level: Level) -> None:
    """``memory.max`` stops a program that allocates past ``max_memory``;
    ``memory.events`` makes it kind limit, cause memory; ``memory.peak`` measured it."""
    found = on_cgroup2("memory_limit", level)
    assert (found["kind"], found["cause"]) == ("limit", "memory")
    assert 0 < found["peak"] <= found["limit"]


@needs_mount
@pytest.mark.parametrize("level", child_levels())
def test_v2_pids_limit(level: Level) -> None:
    """``pids.max`` refuses forks past ``max_processes``; ``pids.events`` makes it kind
    limit, cause processes."""
    found = on_cgroup2("pids_limit", level)
    assert (found["kind"], found["cause"]) == ("limit", "processes")


def test_v2_controller_files(tmp_path: Path) -> None:
    """The v2 controller files, as the kernel writes them (a directory standing in for a
    run's cgroup): limits go to ``memory.max`` (no swap) and ``pids.max``; an
    ``oom_kill`` in ``memory.events`` is the memory limit reached, as is a ``max`` event;
    ``memory.peak`` is the peak; a ``max`` in ``pids.events`` is a refused fork; CPU is
    ``usage_usec`` of ``cpu.stat``."""
    run = tmp_path / "run-1"
    run.mkdir()
    (run / "memory.swap.max").write_text("max\n")
    h = CgroupV2(tmp_path)
    dirs = {"unified": run}
    h.set_limits(dirs, memory=64 << 20, pids=16)
    assert (run / "memory.max").read_text() == str(64 << 20)
    assert (run / "memory.swap.max").read_text() == "0"
    assert (run / "pids.max").read_text() == "16"
    (run / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    (run / "pids.events").write_text("max 0\n")
    assert not h.memory_exceeded(dirs)
    assert not h.pids_exceeded(dirs)
    (run / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
    assert h.memory_exceeded(dirs)
    (run / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n")
    assert h.memory_exceeded(dirs)
    (run / "pids.events").write_text("max 2\n")
    assert h.pids_exceeded(dirs)
    (run / "memory.peak").write_text("12345678\n")
    assert h.memory_peak(dirs) == 12345678
    (run / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    assert h.cpu_time(dirs) == 1.5
