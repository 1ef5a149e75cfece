"""A host on a cgroup v2 system: one scenario, run where ``/sys/fs/cgroup`` is a cgroup2 mount.

:mod:`tests.sandbox.test_cgroup2` starts this module in a private mount namespace of its
own (``unshare --mount``), where it has unmounted the machine's cgroup file systems and
mounted the unified hierarchy at ``/sys/fs/cgroup``: what this process (and the zygote
and runners it starts) sees is a cgroup v2 host. The test process's own mounts are never
touched. Usage: ``python -m tests.sandbox.cgroup2_host SCENARIO LEVEL BACKEND``; the last
line of stdout is a JSON object of what the scenario found (``skip``: why it could not run
here), for the test to assert on.

Where the host stands in the hierarchy is the test's to choose (:data:`PLACE_ENV`): in
the root cgroup (the default: every process of a machine whose controllers are all bound
to v1 is there), or in a cgroup of the test's own below it, which ``place`` (run as root
in the same mount namespace, before the host starts) makes and moves the starting shell
into: marked delegated by systemd's ``trusted.delegate`` (``marked``), named by
``SANDBOX_CGROUP`` (``env``), given to an ordinary user by ownership (``owned``), or
nothing of the kind (``plain``). ``remove`` kills what is left in it and removes it;
``controller`` enables or disables a controller in the root cgroup's
``cgroup.subtree_control``.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import sandbox
from protocol import CGROUP_PREFIX
from sandbox import Budget, CgroupSettingError, Level
from sandbox._children import (
    REMAINS,
    CgroupSet,
    CgroupV2,
    cgroup_support,
    hierarchy,
    shutdown,
)
from sandbox._children._cgroups import probe as probe_hierarchy
from sandbox._children._workspace import SPARES
from tests.sandbox.conftest import cannot_run_program_code

Found = dict[str, Any]

#: A program of several processes: a spinner, a sleeper, and an orphan in a session of
#: its own (double-forked), all alive when the host's tool is called; it never ends.
SPREAD = """
import os, time
def fork(body):
    pid = os.fork()
    if pid == 0:
        body()
        os._exit(0)
def spin():
    while True:
        pass
def orphan():
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(1)
fork(spin)
fork(lambda: time.sleep(600))
fork(orphan)
time.sleep(0.5)
host.started()
time.sleep(600)
"""

#: Three forked workers spinning, and the program waiting for them.
SPINNING_WORKERS = """
import os
for _ in range(3):
    if os.fork() == 0:
        while True:
            pass
os.wait()
"""


#: Where the host stands (``MODE:NAME[:UID]``: see the module docstring; unset: in the
#: root cgroup).
PLACE_ENV = "SANDBOX_TEST_PLACE"
#: The pid of a process that started in the host's cgroup beside it (a ``sleep``).
COMPANION_ENV = "SANDBOX_TEST_COMPANION"
MOUNT = Path("/sys/fs/cgroup")


def _placed() -> tuple[str, Path] | None:
    """The host's placement: its mode and the test's cgroup (None: the root cgroup)."""
    spec = os.environ.get(PLACE_ENV)
    if not spec:
        return None
    mode, name, *_ = spec.split(":")
    return mode, MOUNT / name


def _cgroup_of(pid: int | str) -> str | None:
    """The v2 cgroup path of ``pid`` (from ``/proc/PID/cgroup``)."""
    text = _read_text(Path(f"/proc/{pid}/cgroup"))
    for line in (text or "").splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _procs(path: Path) -> list[int]:
    return sorted(int(x) for x in (_read_text(path / "cgroup.procs") or "").split())


def _runs_path() -> str:
    """The runs' parent as a path of the hierarchy (as ``/proc/PID/cgroup`` shows it)."""
    return "/" + str(_parent().relative_to(MOUNT)).removeprefix(".")


def _parent() -> Path:
    h = hierarchy()
    assert isinstance(h, CgroupV2), h.describe()
    return h.parent


def _run_cgroups() -> list[Path]:
    """This host's runs' cgroups (not those made ahead for runs to come)."""
    ahead = {p for w in SPARES.held() if w.cgroups is not None for p in w.cgroups.dirs.values()}
    return sorted(set(_parent().glob(f"{CGROUP_PREFIX}{os.getpid()}-*")) - ahead)


def _started(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot; None: no such process): with its pid,
    what tells a process from a later one given the same pid (pids wrap around quickly on
    a busy machine)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _existing(members: dict[int, int | None]) -> list[int]:
    """Those of ``members`` (pid: start time) that still exist (zombies included)."""
    return [pid for pid, started in members.items() if _started(pid) == started]


def _wait(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _doctor(*options: str) -> subprocess.CompletedProcess[str]:
    """``sandbox doctor OPTIONS``, run as a new host would run it, here."""
    return subprocess.run(
        [sys.executable, "-m", "sandbox", "doctor", *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def probe(level: Level) -> Found:
    """What this host says of itself: the hierarchy, its support, the doctor."""
    doctor = _doctor("--json")
    parent = _parent()
    return {
        "version": hierarchy().version,
        "describe": hierarchy().describe(),
        "support": cgroup_support(),
        "offered": (parent / "cgroup.controllers").read_text().split(),
        "unenforceable": sandbox.unenforceable(level),
        "doctor": json.loads(doctor.stdout) if doctor.returncode == 0 else doctor.stderr,
    }


async def no_survivors(level: Level) -> Found:
    """A run of several processes, ended at its wall clock: every process of it was in
    the run's v2 cgroup, none runs program code once ``run`` returns, and none, nor the
    cgroup, is left once its remains are cleared."""
    members: dict[int, int | None] = {}
    own_cgroups: list[str] = []

    def started() -> None:
        # (The run's: a workspace made ahead for the next run holds no process.)
        (run_cgroup,) = [c for c in _run_cgroups() if (c / "cgroup.procs").read_text().strip()]
        for pid in map(int, (run_cgroup / "cgroup.procs").read_text().split()):
            members[pid] = _started(pid)
        for pid in members:
            with contextlib.suppress(OSError):
                own_cgroups.append(Path(f"/proc/{pid}/cgroup").read_text().strip())

    result = await sandbox.run(
        SPREAD, tools=[started], budget=Budget(wall_clock=3.0), level=level, spawn="zygote"
    )
    running_after_return = [
        pid
        for pid, started in members.items()
        if not cannot_run_program_code(pid) and _started(pid) == started
    ]
    cleared = REMAINS.wait_empty(30)
    # An emptied cgroup may still leave zombies for the zygote to reap (it reaps what the
    # killed runner left it, as it comes): wait for that, as the sandbox conftest does.
    _wait(lambda: not _existing(members), 10)
    return {
        "kind": result.kind,
        "cause": result.cause,
        "members": len(members),
        "own_cgroups": own_cgroups,
        "running_after_return": running_after_return,
        "cleared": cleared,
        "left": _existing(members),
        "cgroups_left": [str(p) for p in _run_cgroups()],
        "runs_path": _runs_path(),
    }


def freeze_and_kill(level: Level) -> Found:
    """A run's v2 cgroup, driven directly: ``cgroup.freeze`` stops its processes (no CPU
    time while frozen) and thawing resumes them; killing sparing one process kills the
    rest; ``cgroup.kill`` kills the rest, a process forking as fast as it can included;
    ``cgroup.events`` then says empty, and the cgroup is removed."""
    found: Found = {}
    cgroups = CgroupSet.create(
        f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}", memory=None, pids=None
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # Each joins the cgroup before it runs its program (the way a runner does).
        def start(program: str) -> int:
            procs_file = cgroups.procs_files()[0]
            join = f"import os\nopen({procs_file!r}, 'w').write(str(os.getpid()))\n"
            procs.append(subprocess.Popen([sys.executable, "-c", join + program]))
            return procs[-1].pid

        spare = start("import time\ntime.sleep(600)")
        spinner = start("while True: pass")
        churn = start(
            "import os\nwhile True:\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
            "    os.waitpid(pid, 0)"
        )
        found["joined"] = _wait(lambda: {spare, spinner, churn} <= cgroups.pids(), 30)
        cpu = cgroups.cpu_time
        found["ran"] = _wait(lambda: (cpu() or 0) > 0.05, 30)
        cgroups.freeze()
        events = (cgroups.dirs["unified"] / "cgroup.events").read_text().split()
        found["frozen"] = events[events.index("frozen") + 1] == "1"
        before = cpu() or 0.0
        time.sleep(0.5)
        found["cpu_while_frozen"] = (cpu() or 0.0) - before
        cgroups.thaw()
        found["resumed"] = _wait(lambda: (cpu() or 0.0) - before > 0.05, 30)
        killed = cgroups.kill_all(spare=frozenset({spare}))
        found["spared_killed"] = sorted(killed & {spare, spinner, churn})
        found["only_spare_left"] = _wait(lambda: cgroups.pids() == {spare}, 30)
        found["spare_alive"] = procs[0].poll() is None
        cgroups.kill_all()
        found["spare_killed"] = procs[0].wait(30) == -signal.SIGKILL
        h = cgroups.hierarchy
        assert isinstance(h, CgroupV2)
        found["empty"] = h.wait_empty(cgroups.dirs, 30)
        path = cgroups.dirs["unified"]
        cgroups.remove()
        found["removed"] = not path.exists()
    finally:
        for proc in procs:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
        cgroups.kill_all()
        cgroups.remove()
    return found


async def cpu_limit(level: Level) -> Found:
    """Three forked workers under ``max_cpu`` of a second, counted by ``cpu.stat``."""
    result = await sandbox.run(
        SPINNING_WORKERS, budget=Budget(wall_clock=30.0, max_cpu=1.0), level=level, spawn="zygote"
    )
    REMAINS.wait_empty(30)
    return {"kind": result.kind, "cause": result.cause, "cpu_time": result.cpu_time}


def _controller_missing(controller: str) -> str | None:
    h = hierarchy()
    assert isinstance(h, CgroupV2)
    if controller in h.controllers():
        return None
    offered = (h.parent / "cgroup.controllers").read_text().split()
    return (
        f"the cgroup2 mount here offers no {controller} controller to the runs "
        f"(cgroup.controllers: {' '.join(offered) or 'none'}; {cgroup_support()[controller]})"
    )


async def memory_limit(level: Level) -> Found:
    """A program that allocates past ``max_memory``: ``memory.max`` stops it, and
    ``memory.events`` makes it a limit, cause memory; ``memory.peak`` measured it."""
    missing = _controller_missing("memory")
    if missing is not None:
        return {"skip": missing}
    limit = 64 << 20
    result = await sandbox.run(
        "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))",
        budget=Budget(wall_clock=30.0, max_memory=limit),
        level=level,
        spawn="zygote",
    )
    REMAINS.wait_empty(30)
    return {
        "kind": result.kind,
        "cause": result.cause,
        "peak": result.peak_memory,
        "limit": limit,
    }


async def pids_limit(level: Level) -> Found:
    """A program that forks past ``max_processes``: ``pids.max`` refuses the fork, and
    ``pids.events`` makes it a limit, cause processes."""
    missing = _controller_missing("pids")
    if missing is not None:
        return {"skip": missing}
    program = (
        "import os, time\nfor _ in range(64):\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "        os._exit(0)"
    )
    result = await sandbox.run(
        program, budget=Budget(wall_clock=30.0, max_processes=16), level=level, spawn="zygote"
    )
    REMAINS.wait_empty(30)
    return {"kind": result.kind, "cause": result.cause}


def _try_controller(path: Path, change: str) -> str | None:
    """Write ``change`` (``+hugetlb``) to ``path``'s ``cgroup.subtree_control``: None if
    taken, else the errno's name."""
    try:
        (path / "cgroup.subtree_control").write_text(change)
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    return None


def placement(level: Level) -> Found:
    """Where the host stands before and after it probes its hierarchy (which moves it
    when its cgroup is delegated), where a run's cgroup is made, whether a controller
    the delegated cgroup is offered can then be enabled in it (``hugetlb`` stands for
    any: the kernel's rule is the same for all), and what ``doctor`` says (started from
    the host, so from where the host now is)."""
    placed = _placed()
    assert placed is not None
    _mode, top = placed
    companion = os.environ[COMPANION_ENV]
    probe_controller = "hugetlb"
    offered = (_read_text(top / "cgroup.controllers") or "").split()
    found: Found = {
        "pid": os.getpid(),
        "companion": int(companion),
        "before": {"host": _cgroup_of("self"), "companion": _cgroup_of(companion)},
        "procs_before": _procs(top),
        "offered": offered,
    }
    if probe_controller in offered:
        found["enable_before"] = _try_controller(top, f"+{probe_controller}")
        if found["enable_before"] is None:
            _try_controller(top, f"-{probe_controller}")
    h = hierarchy()
    assert isinstance(h, CgroupV2)
    started = time.monotonic()
    found["support"] = cgroup_support()
    found["probe_seconds"] = time.monotonic() - started
    found["describe"] = h.describe()
    found["details"] = h.details()
    found["after"] = {"host": _cgroup_of("self"), "companion": _cgroup_of(companion)}
    found["procs_after"] = _procs(top)
    found["leaf_procs"] = _procs(top / "sandbox-host")
    found["subtree_control"] = (_read_text(top / "cgroup.subtree_control") or "").split()
    if probe_controller in offered:
        found["enable_after"] = _try_controller(top, f"+{probe_controller}")
        if found["enable_after"] is None:
            _try_controller(top, f"-{probe_controller}")
    cgroups = CgroupSet.create(
        f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}", memory=None, pids=None
    )
    try:
        found["run_cgroup"] = str(cgroups.dirs["unified"])
    finally:
        cgroups.remove()
    found["runs_path"] = _runs_path()
    doctor = _doctor("--json")
    found["doctor"] = json.loads(doctor.stdout) if doctor.returncode == 0 else doctor.stderr
    text = _doctor()
    found["doctor_text"] = text.stdout + text.stderr
    return found


def settings(level: Level) -> Found:
    """What ``SANDBOX_CGROUP`` naming each cgroup of a ``nested`` placement gives this
    host (an ordinary user in ``home``): the runs' parent, or the error."""
    placed = _placed()
    assert placed is not None
    top = placed[1]
    mountinfo = Path("/proc/self/mountinfo").read_text()
    proc_cgroup = Path("/proc/self/cgroup").read_text()
    found: Found = {"euid": os.geteuid()}
    for name in ("home", "other", "locked"):
        try:
            h = probe_hierarchy(mountinfo, proc_cgroup, setting=str(top / name))
        except CgroupSettingError as exc:
            found[name] = {"error": str(exc)}
        else:
            assert isinstance(h, CgroupV2)
            found[name] = {"runs_under": str(h.parent)}
    return found


SCENARIOS: dict[str, Callable[[Level], Any]] = {
    "settings": settings,
    "placement": placement,
    "probe": probe,
    "no_survivors": no_survivors,
    "freeze_and_kill": freeze_and_kill,
    "cpu_limit": cpu_limit,
    "memory_limit": memory_limit,
    "pids_limit": pids_limit,
}


def place(shell: int) -> None:
    """As root, before the host starts: make the test's cgroup, mark or give it as the
    placement says, and move ``shell`` (the process that then starts the host) into it."""
    placed = _placed()
    assert placed is not None
    mode, top = placed
    top.mkdir()
    if mode == "nested":
        # The host's own cgroup and a sibling given to the user, one the user is not
        # given, all below a cgroup of root's.
        uid = int(os.environ[PLACE_ENV].split(":")[2])
        for name in ("home", "other", "locked"):
            (top / name).mkdir()
            if name != "locked":
                for path in (top / name, *((top / name / n) for n in ("cgroup.procs",))):
                    os.chown(path, uid, uid)
                os.chown(top / name / "cgroup.subtree_control", uid, uid)
        (top / "home" / "cgroup.procs").write_text(str(shell))
        return
    if mode == "marked":
        os.setxattr(top, "trusted.delegate", b"1")
    elif mode == "owned":
        uid = int(os.environ[PLACE_ENV].split(":")[2])
        for path in (top, *(top / n for n in ("cgroup.procs", "cgroup.subtree_control"))):
            os.chown(path, uid, uid)
        os.chown(top / "cgroup.threads", uid, uid)
    else:
        assert mode in ("env", "plain"), mode
    (top / "cgroup.procs").write_text(str(shell))


def remove(name: str) -> None:
    """Kill whatever is left in the test's cgroup ``name`` and remove it, deepest first."""
    top = MOUNT / name
    if not top.is_dir():
        return
    with contextlib.suppress(OSError):
        (top / "cgroup.kill").write_text("1")
    _wait(lambda: "populated 0" in (_read_text(top / "cgroup.events") or ""), 10)
    below = [p for p in top.rglob("*") if p.is_dir()]
    for path in sorted(below, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            path.rmdir()
    top.rmdir()


def controller(change: str) -> None:
    """Write ``change`` (``+hugetlb``, ``-hugetlb``) to the root's subtree_control, and
    print whether it was taken (``taken``, else the errno's name)."""
    sys.stdout.write((_try_controller(MOUNT, change) or "taken") + "\n")


def main() -> None:
    if sys.argv[1] == "place":
        place(int(sys.argv[2]))
        return
    if sys.argv[1] == "remove":
        remove(sys.argv[2])
        return
    if sys.argv[1] == "controller":
        controller(sys.argv[2])
        return
    name, level, backend = sys.argv[1], Level(sys.argv[2]), sys.argv[3]
    scenario = SCENARIOS[name]
    if hierarchy().version != 2:
        found: Found = {"error": f"not a cgroup v2 host: {hierarchy().describe()}"}
    elif inspect.iscoroutinefunction(scenario):

        async def go() -> Found:
            found: Found = await scenario(level)
            return found

        found = anyio.run(go, backend=backend)
    else:
        found = scenario(level)
    shutdown()
    sys.stdout.write(json.dumps(found, default=str) + "\n")


if __name__ == "__main__":
    main()
