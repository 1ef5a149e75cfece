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
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sandbox import CgroupSettingError, Level, SandboxError
from sandbox._children import CgroupV1, CgroupV2, NoCgroups
from sandbox._children._cgroups import Delegation, delegation, probe
from sandbox._commands import _doctor
from tests.host import AS_ORDINARY_USER, child_levels

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


HOST = "tests.sandbox.cgroup2_host"
#: In the new mount namespace, a host placed in a cgroup of the test's own: the cgroup
#: made (``place``, as root) with the starting shell in it, a companion process started
#: there beside the host, then the host (as ``$SANDBOX_TEST_AS``, where it is set).
PLACE_V2 = (
    "umount -R /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 none /sys/fs/cgroup || exit 1; "
    '"$0" -m tests.sandbox.cgroup2_host place $$ || exit 1; '
    '$SANDBOX_TEST_AS sh -c "$SANDBOX_TEST_COMPANION_CMD" </dev/null >/dev/null 2>&1 & '
    "export SANDBOX_TEST_COMPANION=$!; "
    'exec $SANDBOX_TEST_AS "$0" -m tests.sandbox.cgroup2_host "$@"'
)


@dataclass(frozen=True)
class Place:
    """Where a host stands: in ``/sys/fs/cgroup/<name>``, made for the test, which is
    marked delegated (``marked``), named by ``SANDBOX_CGROUP`` (``env``), owned by an
    ordinary user who runs the host (``owned``), or none of these (``plain``)."""

    mode: str
    name: str
    home: Path | None = None  # the ordinary user's TMPDIR and HOME (``owned``)
    #: What the companion process beside the host runs (a shell command).
    companion: str = "exec sleep 600"

    @property
    def path(self) -> str:
        """The cgroup's path in the hierarchy."""
        return f"/{self.name}"


def _mounted(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m tests.sandbox.cgroup2_host ARGV`` as root, where the unified
    hierarchy is mounted at ``/sys/fs/cgroup``."""
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", MOUNT_V2, "sh", sys.executable, "-m", HOST, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def on_cgroup2(
    scenario: str, level: Level, backend: str = "asyncio", place: Place | None = None
) -> dict[str, Any]:
    """Run ``scenario`` in a host that sees a cgroup v2 system (in the root cgroup, or
    where ``place`` says); what it found."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = MOUNT_V2
    if place is not None:
        script = PLACE_V2
        env["SANDBOX_TEST_PLACE"] = f"{place.mode}:{place.name}:{ORDINARY[0]}"
        env["SANDBOX_TEST_COMPANION_CMD"] = place.companion
        if place.mode == "env":
            env["SANDBOX_CGROUP"] = f"/sys/fs/cgroup/{place.name}"
        if place.mode in ("owned", "nested"):
            uid, gid = ORDINARY
            env["SANDBOX_TEST_AS"] = f"setpriv --reuid={uid} --regid={gid} --clear-groups"
            assert place.home is not None
            env.update(HOME=str(place.home), TMPDIR=str(place.home))
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            script,
            sys.executable,
            *([] if place is not None else [sys.executable, "-m", "tests.sandbox.cgroup2_host"]),
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


#: The ordinary user an ``owned`` placement's host runs as (uid, gid).
ORDINARY = (pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)


@pytest.fixture
def test_cgroup(tmp_path: Path) -> Iterator[str]:
    """The name of a cgroup of the test's own, below the root cgroup: whatever is left
    in it afterwards, failure or not, is killed, and it is removed."""
    name = f"sandbox-test-{uuid.uuid4().hex[:12]}"
    yield name
    done = _mounted("remove", name)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def hugetlb() -> Iterator[None]:
    """``hugetlb`` enabled in the root cgroup's ``cgroup.subtree_control`` (where the
    mount offers it and it is not already), so that the tests' own cgroups are offered a
    controller to try enabling; disabled again afterwards."""
    enabled = _mounted("controller", "+hugetlb").stdout.strip() == "taken"
    yield
    if enabled:
        _mounted("controller", "-hugetlb")


@pytest.fixture
def home() -> Iterator[Path]:
    """A home the ordinary user owns (its TMPDIR and HOME, for an ``owned`` host)."""
    path = Path(tempfile.mkdtemp(prefix="sandbox-cgroup2-"))
    os.chown(path, *ORDINARY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


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


def v2_mountinfo(point: Path) -> str:
    """A mountinfo line: the unified hierarchy mounted at ``point``."""
    return f"30 23 0:26 / {point} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def fake_cgroup(path: Path, *, root: bool = False) -> Path:
    """A directory standing in for a cgroup (the files the decisions read; the
    machine's root cgroup, ``root``, has no ``cgroup.type``)."""
    path.mkdir(parents=True, exist_ok=True)
    names = ["cgroup.procs", "cgroup.controllers", "cgroup.subtree_control"]
    for name in names if root else [*names, "cgroup.type"]:
        (path / name).write_text("domain\n" if name == "cgroup.type" else "")
    return path


def mark(path: Path, name: str, value: str) -> None:
    """Set systemd's delegation marker ``name`` on ``path`` (skip where the file system
    keeps no such attribute)."""
    try:
        os.setxattr(path, name, value.encode())
    except OSError as exc:
        pytest.skip(f"no {name} attribute on {path}: {exc.strerror}")


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


def test_probe_takes_a_delegated_cgroup_from_the_setting(tmp_path: Path) -> None:
    """``SANDBOX_CGROUP`` names the delegated cgroup (a symlink to it resolved), on a
    cgroup v2 host and on a v1 host alike: the runs go under its ``sandbox-runtime``."""
    given = fake_cgroup(tmp_path / "cg" / "user.slice" / "app.scope")
    link = tmp_path / "link"
    link.symlink_to(given)
    mountinfo = v2_mountinfo(tmp_path / "cg")
    for text in (mountinfo, V1_MOUNTINFO + mountinfo):
        found = probe(text, "0::/user.slice/app.scope\n", setting=str(link), euid=0)
        assert isinstance(found, CgroupV2)
        assert found.parent == given / "sandbox-runtime"
        assert found.delegation == Delegation(given, True, "SANDBOX_CGROUP names it")


def test_probe_refuses_a_bad_setting(tmp_path: Path) -> None:
    """A ``SANDBOX_CGROUP`` that names no usable cgroup raises a typed error saying why:
    a relative path, a missing path, a file, a directory of another file system, a
    directory of a cgroup2 file system that is no cgroup, the machine's root cgroup."""
    root = fake_cgroup(tmp_path / "cg", root=True)
    elsewhere = tmp_path / "plain"
    elsewhere.mkdir()
    (tmp_path / "file").write_text("")
    not_a_cgroup = root / "stray"
    not_a_cgroup.mkdir()
    mountinfo = f"22 1 8:1 / {tmp_path} rw - ext4 /dev/vda rw\n" + v2_mountinfo(root)
    cases = {
        "cg/x": "not an absolute path",
        str(tmp_path / "missing"): "No such file or directory",
        str(tmp_path / "file"): "not a directory",
        str(elsewhere): (
            f"not a directory of a cgroup2 file system (it is on ext4 mounted at {tmp_path})"
        ),
        str(not_a_cgroup): "not a cgroup (no cgroup.procs, cgroup.subtree_control)",
        str(root): "the machine's root cgroup, which is never delegated",
    }
    for setting, why in cases.items():
        with pytest.raises(CgroupSettingError, match=re.escape(why)) as raised:
            probe(mountinfo, "0::/\n", setting=setting, euid=0)
        assert str(raised.value).startswith(f"SANDBOX_CGROUP={setting!r}: ")
        assert isinstance(raised.value, SandboxError)


def test_a_bad_setting_fails_runs_and_doctor_says_why(tmp_path: Path) -> None:
    """The host reads ``SANDBOX_CGROUP`` from its environment: a bad value fails each run
    that needs the host's cgroups with the typed error (a :class:`SandboxError`, never a
    fallback to no cgroups), while ``in_process`` runs on; ``doctor`` reports it with the
    fix, and exits 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SANDBOX_CGROUP": str(tmp_path)}
    code = (
        "import sandbox\n"
        "try:\n"
        "    sandbox.run_sync('1', level='process')\n"
        "except sandbox.SandboxError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "print(sandbox.run_sync('6 * 7', level='in_process').value)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    refused, value = done.stdout.strip().splitlines()
    assert refused.startswith(f"CgroupSettingError SANDBOX_CGROUP={str(tmp_path)!r}: not a ")
    assert value == "42"
    doctor = subprocess.run(
        [sys.executable, "-m", "sandbox", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert report["cgroup_hierarchy"]["version"] is None
    assert "SANDBOX_CGROUP=" in report["cgroup_hierarchy"]["runs"]
    assert report["missing"]["cgroups"].startswith(f"SANDBOX_CGROUP={str(tmp_path)!r}: not a ")
    assert "every run" in report["levels"]["process"]["unenforceable"]
    assert report["levels"]["in_process"]["unenforceable"]


def test_delegated_by_systemds_marker(tmp_path: Path) -> None:
    """systemd's marker decides: ``user.delegate`` (or ``trusted.delegate``, which wins
    where both are set) ``1`` makes the host's own cgroup delegated, the runs going under
    its ``sandbox-runtime``; ``0`` (a unit without ``Delegate=``) does not, and the runs
    go in the host's own cgroup as on any undelegated host."""
    own = fake_cgroup(tmp_path / "system.slice" / "app.service")
    mountinfo = v2_mountinfo(tmp_path)
    mark(own, "user.delegate", "1")
    found = probe(mountinfo, "0::/system.slice/app.service\n", euid=0)
    assert isinstance(found, CgroupV2)
    assert found.delegation == Delegation(own, True, "systemd marks it delegated (user.delegate=1)")
    assert found.parent == own / "sandbox-runtime"
    assert "delegated to the host" in found.describe()
    mark(own, "user.delegate", "0")
    found = probe(mountinfo, "0::/system.slice/app.service\n", euid=0)
    assert isinstance(found, CgroupV2)
    assert found.delegation is not None
    assert not found.delegation.delegated
    assert "user.delegate=0" in found.delegation.how
    assert "not delegated" in found.describe()
    if os.geteuid() != 0:
        return  # only root reads and writes trusted.* attributes
    mark(own, "trusted.delegate", "0")
    mark(own, "user.delegate", "1")
    assert not delegation(own, "/system.slice/app.service", euid=0).delegated
    mark(own, "trusted.delegate", "1")
    assert delegation(own, "/system.slice/app.service", euid=0).how == (
        "systemd marks it delegated (trusted.delegate=1)"
    )


def test_delegated_as_the_root_of_a_cgroup_namespace(tmp_path: Path) -> None:
    """A host whose own cgroup is ``/`` in ``/proc/self/cgroup`` is at the root of its
    cgroup namespace: a container's cgroup (it has ``cgroup.type``) is delegated to it;
    the machine's root cgroup (no ``cgroup.type``) never is, and the runs go under its
    ``sandbox-runtime`` as before."""
    container = fake_cgroup(tmp_path / "container")
    found = probe(v2_mountinfo(container), "0::/\n", euid=0)
    assert isinstance(found, CgroupV2)
    assert found.delegation is not None
    assert found.delegation.delegated
    assert "root of the host's cgroup namespace" in found.delegation.how
    assert found.parent == container / "sandbox-runtime"
    machine = fake_cgroup(tmp_path / "machine", root=True)
    found = probe(v2_mountinfo(machine), "0::/\n", euid=0)
    assert isinstance(found, CgroupV2)
    assert found.delegation is not None
    assert not found.delegation.delegated
    assert "the machine's root cgroup" in found.delegation.how
    assert found.parent == machine / "sandbox-runtime"


@pytest.mark.skipif(os.geteuid() != 0, reason=f"{AS_ORDINARY_USER}files cannot be given away")
def test_delegated_by_ownership_to_an_ordinary_user(tmp_path: Path) -> None:
    """For a host that is not root, its own cgroup is delegated where it (with its
    ``cgroup.procs`` and ``cgroup.subtree_control``) is the host's uid's and its parent
    is not: the boundary where root handed it over. Below a cgroup the user owns (a user
    service manager's own), ownership says nothing; a cgroup of another uid is not
    delegated; and for root, owning it never says anything."""
    uid = 54321
    scope = fake_cgroup(tmp_path / "user.slice" / "user@54321.service" / "app.scope")
    own_path = "/user.slice/user@54321.service/app.scope"
    for path in (scope, scope / "cgroup.procs", scope / "cgroup.subtree_control"):
        os.chown(path, uid, uid)
    given = delegation(scope, own_path, euid=uid)
    assert given.delegated
    assert "owned by uid 54321" in given.how
    assert "while its parent is not" in given.how
    assert not delegation(scope, own_path, euid=uid + 1).delegated
    assert not delegation(scope, own_path, euid=0).delegated
    os.chown(scope.parent, uid, uid)
    given = delegation(scope, own_path, euid=uid)
    assert not given.delegated
    assert "service manager" in given.how
    mark(scope, "user.delegate", "1")
    assert delegation(scope, own_path, euid=uid).delegated


def test_a_host_in_the_leaf_uses_the_delegated_cgroup(tmp_path: Path) -> None:
    """A host started from a host that moved into the leaf (``sandbox-host``) of its
    delegated cgroup finds itself in that leaf: it uses the delegated cgroup above it
    (the runs beside it, in ``sandbox-runtime``), not the leaf."""
    top = fake_cgroup(tmp_path / "system.slice" / "app.service")
    fake_cgroup(top / "sandbox-host")
    mark(top, "user.delegate", "1")
    found = probe(v2_mountinfo(tmp_path), "0::/system.slice/app.service/sandbox-host\n", euid=0)
    assert isinstance(found, CgroupV2)
    assert found.delegation is not None
    assert found.delegation.cgroup == top
    assert found.delegation.how.endswith("the host is in its leaf already")
    assert found.parent == top / "sandbox-runtime"
    # A leaf of an undelegated cgroup is only a cgroup of that name.
    mark(top, "user.delegate", "0")
    found = probe(v2_mountinfo(tmp_path), "0::/system.slice/app.service/sandbox-host\n", euid=0)
    assert isinstance(found, CgroupV2)
    assert found.parent == top / "sandbox-host" / "sandbox-runtime"


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
    # No cpu controller for the runs on v2: the host says its timers compete with them.
    share = found["doctor"]["cgroup_hierarchy"]["host_cpu_share"]
    assert isinstance(share, str), share
    assert share.startswith("cgroup v2: "), share
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
    assert found["runs_path"] == "/sandbox-runtime"
    no_survivor_found(found)


def no_survivor_found(found: dict[str, Any]) -> None:
    """What :func:`test_v2_no_survivors` asserts of the ``no_survivors`` scenario."""
    assert (found["kind"], found["cause"]) == ("limit", "wall_clock")
    assert found["members"] >= 4  # the runner, the spinner, the sleeper, the orphan
    assert found["own_cgroups"], found
    runs = f"0::{found['runs_path']}/run-"
    assert all(runs in text for text in found["own_cgroups"]), found["own_cgroups"]
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
    reaches the limit, having used it and at most a second more (the watcher's own 0.1 s
    is held over simulated runs in ``test_cpu_limit.py``: a real run adds how late a
    shared machine schedules the host; three workers each held to the limit would use
    three)."""
    found = on_cgroup2("cpu_limit", level, _backend(anyio_backend))
    assert (found["kind"], found["cause"]) == ("limit", "cpu")
    assert 1.0 <= found["cpu_time"] <= 2.0


@needs_mount
@pytest.mark.parametrize("level", child_levels())
@pytest.mark.parametrize("mode", ["root", "marked"])
def test_v2_memory_limit(level: Level, mode: str, test_cgroup: str, home: Path) -> None:
    """``memory.max`` stops a program that allocates past ``max_memory``;
    ``memory.events`` makes it kind limit, cause memory; ``memory.peak`` measured it. The
    same for a host in the root cgroup and one moved into its delegated cgroup's leaf."""
    place = None if mode == "root" else Place(mode, test_cgroup, home)
    found = on_cgroup2("memory_limit", level, place=place)
    assert (found["kind"], found["cause"]) == ("limit", "memory")
    assert 0 < found["peak"] <= found["limit"]


@needs_mount
@pytest.mark.parametrize("level", child_levels())
@pytest.mark.parametrize("mode", ["root", "marked"])
def test_v2_pids_limit(level: Level, mode: str, test_cgroup: str, home: Path) -> None:
    """``pids.max`` refuses forks past ``max_processes``; ``pids.events`` makes it kind
    limit, cause processes. The same for a host in the root cgroup and one moved into
    its delegated cgroup's leaf."""
    place = None if mode == "root" else Place(mode, test_cgroup, home)
    found = on_cgroup2("pids_limit", level, place=place)
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


# -- a host given a delegated cgroup, on a real cgroup2 mount -----------------------------


def moved_found(found: dict[str, Any], place: Place, how: str) -> None:
    """What a host whose cgroup is delegated did: it (and the companion that started
    beside it) moved into the leaf ``sandbox-host``, nothing is left in the delegated
    cgroup, a run's cgroup is made in ``sandbox-runtime`` beside the leaf, ``doctor``
    (started from the leaf) names the same cgroup as delegated, and a controller the
    cgroup is offered, refused while it held processes, is now taken."""
    top = f"/sys/fs/cgroup/{place.name}"
    assert found["before"] == {"host": place.path, "companion": place.path}
    assert sorted(found["procs_before"]) == sorted([found["pid"], found["companion"]])
    leaf = f"{place.path}/sandbox-host"
    assert found["after"] == {"host": leaf, "companion": leaf}
    assert found["procs_after"] == []
    assert found["leaf_procs"] == sorted([found["pid"], found["companion"]])
    details = found["details"]
    assert details["delegated"] is True
    assert details["cgroup"] == top
    assert how in details["decided_by"]
    assert details["host_moved"] == (
        f"moved 2 process(es) of {top} into {top}/sandbox-host (the host among them)"
    )
    assert found["support"]["freezer"] is None
    assert found["runs_path"] == f"{place.path}/sandbox-runtime"
    assert found["run_cgroup"].startswith(f"{top}/sandbox-runtime/run-")
    doctor = found["doctor"]["cgroup_hierarchy"]
    assert doctor["delegated"] is True, doctor
    assert doctor["cgroup"] == top
    assert doctor["runs_under"] == f"{top}/sandbox-runtime"
    assert f"{top} is delegated to the host" in found["doctor_text"]
    if "hugetlb" in found["offered"]:
        assert found["enable_before"] == "EBUSY"
        assert found["enable_after"] is None
    # Where the delegated cgroup is offered memory and pids, the runs now get them.
    for controller in ("memory", "pids"):
        if controller in found["offered"]:
            assert found["support"][controller] is None
            assert controller in found["subtree_control"]


@needs_mount
@pytest.mark.usefixtures("hugetlb")
@pytest.mark.parametrize(
    ("mode", "how"),
    [
        ("marked", "systemd marks it delegated (trusted.delegate=1)"),
        ("env", "SANDBOX_CGROUP names it"),
        ("owned", "owned by uid"),
    ],
)
def test_v2_delegated_host_moves_into_a_leaf(
    mode: str, how: str, test_cgroup: str, home: Path
) -> None:
    """A host in a cgroup delegated to it (marked by systemd's ``trusted.delegate``,
    named by ``SANDBOX_CGROUP``, or owned by the ordinary user who runs the host while
    its parent is not) moves every process of it into ``sandbox-host`` and makes the
    runs' cgroups in ``sandbox-runtime`` beside it."""
    place = Place(mode, test_cgroup, home)
    moved_found(on_cgroup2("placement", Level.PROCESS, place=place), place, how)


@needs_mount
def test_v2_move_outlasts_a_forking_companion(test_cgroup: str, home: Path) -> None:
    """Beside the host, a companion forks and reaps a subshell as fast as it can while
    the host moves: a child forked before its parent moved lands in the delegated
    cgroup, to be moved by a later pass or found gone. The move ends with the host and
    the companion in the leaf and nothing left in the delegated cgroup."""
    place = Place("marked", test_cgroup, home, companion="while :; do (:); done")
    found = on_cgroup2("placement", Level.PROCESS, place=place)
    leaf = f"{place.path}/sandbox-host"
    assert found["after"] == {"host": leaf, "companion": leaf}
    assert found["procs_after"] == []
    assert found["pid"] in found["leaf_procs"]
    assert found["companion"] in found["leaf_procs"]
    assert found["details"]["host_moved"].startswith("moved ")
    assert found["run_cgroup"].startswith(f"/sys/fs/cgroup/{test_cgroup}/sandbox-runtime/")


@needs_mount
@pytest.mark.usefixtures("hugetlb")
def test_v2_undelegated_host_stays(test_cgroup: str, home: Path) -> None:
    """A root host in a cgroup that is not delegated to it (no marker, no setting; root
    can write it, which says nothing) moves nothing: it stays, the runs' cgroups are
    made in its own cgroup, and a controller stays refused there while it holds the
    host (the kernel's rule), which ``doctor`` explains with the fix."""
    place = Place("plain", test_cgroup, home)
    found = on_cgroup2("placement", Level.PROCESS, place=place)
    assert found["after"] == found["before"] == {"host": place.path, "companion": place.path}
    assert found["leaf_procs"] == []
    details = found["details"]
    assert details["delegated"] is False
    assert "no sign of delegation" in details["decided_by"]
    assert details["host_moved"] is None
    assert found["runs_path"] == f"{place.path}/sandbox-runtime"
    assert found["doctor"]["cgroup_hierarchy"]["delegated"] is False
    assert "SANDBOX_CGROUP" in found["doctor_text"]
    if "hugetlb" in found["offered"]:
        assert found["enable_before"] == found["enable_after"] == "EBUSY"


@needs_mount
@pytest.mark.parametrize("level", child_levels())
@pytest.mark.parametrize("mode", ["marked", "owned"])
def test_v2_delegated_no_survivors(
    level: Level, mode: str, anyio_backend: Any, test_cgroup: str, home: Path
) -> None:
    """A host moved into the leaf of its delegated cgroup (root, or an ordinary user):
    a run of several processes is in its cgroup under ``sandbox-runtime`` of the
    delegated cgroup, and none survives its end."""
    place = Place(mode, test_cgroup, home)
    found = on_cgroup2("no_survivors", level, _backend(anyio_backend), place=place)
    assert found["runs_path"] == f"{place.path}/sandbox-runtime"
    no_survivor_found(found)


@needs_mount
def test_v2_setting_checked_for_an_ordinary_user(test_cgroup: str, home: Path) -> None:
    """For a host that is not root, ``SANDBOX_CGROUP`` names a cgroup it may write and
    that holds its own: a cgroup given to its user but beside the host's (the common
    ancestor is root's, so no process of the host could join a run's cgroup there) and a
    cgroup of root's are refused, each saying why and what to do; its own is taken."""
    found = on_cgroup2("settings", Level.PROCESS, place=Place("nested", test_cgroup, home))
    assert found["euid"] == ORDINARY[0]
    top = f"/sys/fs/cgroup/{test_cgroup}"
    assert found["home"] == {"runs_under": f"{top}/home/sandbox-runtime"}
    other = found["other"]["error"]
    assert f"the host's own cgroup ({top}/home) is not inside it" in other
    assert f"common ancestor ({top})" in other
    assert f"echo $$ > {top}/other/cgroup.procs" in other
    locked = found["locked"]["error"]
    assert f"{top}/locked is not writable by uid {ORDINARY[0]}" in locked
    assert "chown" in locked


@needs_mount
def test_v2_delegated_freeze_and_kill(test_cgroup: str, home: Path) -> None:
    """Freezing, killing sparing one, and ``cgroup.kill`` work as in the root cgroup for
    a host moved into the leaf of its delegated cgroup."""
    found = on_cgroup2("freeze_and_kill", Level.PROCESS, place=Place("marked", test_cgroup, home))
    for key in ("joined", "ran", "frozen", "resumed", "only_spare_left", "spare_alive"):
        assert found[key], key
    assert found["cpu_while_frozen"] < 0.02
    assert found["spare_killed"]
    assert found["empty"]
    assert found["removed"]


def test_doctor_gives_the_fix_for_each_v2_case(tmp_path: Path) -> None:
    """Where the runs lack memory and pids on v2, ``doctor``'s remedy fits the case: an
    undelegated cgroup that holds the host is told how to get a delegated one (systemd's
    ``Delegate=yes``, or ``SANDBOX_CGROUP`` naming it), and that its parent offers it
    nothing either where that is so; a failed move, how to move by hand; a delegated
    cgroup offered them that could not enable them, what must be writable; one whose
    parent gives it no such controller, how to delegate them; the machine's root cgroup,
    the boot parameters."""
    lacking = {"pids": "no", "freezer": None, "memory": "no"}
    own = fake_cgroup(tmp_path / "system.slice" / "app.service")
    undelegated = CgroupV2(own / "sandbox-runtime", Delegation(own, False, "no sign"))
    how = _doctor.remedies({}, 7, None, lacking, None, undelegated)["cgroups"]
    assert "Delegate=yes" in how
    assert f"SANDBOX_CGROUP={own}" in how
    assert f"not in {own}/cgroup.controllers" in how
    (own / "cgroup.controllers").write_text("memory pids\n")
    how = _doctor.remedies({}, 7, None, lacking, None, undelegated)["cgroups"]
    assert "cgroup.controllers" not in how
    delegated = CgroupV2(own / "sandbox-runtime", Delegation(own, True, "marked"))
    how = _doctor.remedies({}, 7, None, lacking, None, delegated)["cgroups"]
    assert f"for p in $(cat {own}/cgroup.procs)" in how  # not moved
    delegated.moved = "moved 1 process(es)"
    how = _doctor.remedies({}, 7, None, lacking, None, delegated)["cgroups"]
    assert "could not be enabled for the runs (memory: no; pids: no)" in how
    (own / "cgroup.controllers").write_text("")
    how = _doctor.remedies({}, 7, None, lacking, None, delegated)["cgroups"]
    assert "`Delegate=memory pids`" in how
    assert "user@.service.d/delegate.conf" in how
    machine = fake_cgroup(tmp_path / "root", root=True)
    root = CgroupV2(machine / "sandbox-runtime", delegation(machine, "/", euid=0))
    how = _doctor.remedies({}, 7, None, lacking, None, root)["cgroups"]
    assert "cgroup_no_v1=memory,pids" in how
