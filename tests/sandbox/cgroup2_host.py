"""A host on a cgroup v2 system: one scenario, run where ``/sys/fs/cgroup`` is a cgroup2 mount.

:mod:`tests.sandbox.test_cgroup2` starts this module in a private mount namespace of its
own (``unshare --mount``), where it has unmounted the machine's cgroup file systems and
mounted the unified hierarchy at ``/sys/fs/cgroup``: what this process (and the zygote
and runners it starts) sees is a cgroup v2 host. The test process's own mounts are never
touched. Usage: ``python -m tests.sandbox.cgroup2_host SCENARIO LEVEL BACKEND``; the last
line of stdout is a JSON object of what the scenario found (``skip``: why it could not run
here), for the test to assert on.
"""

from __future__ import annotations

import contextlib
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
from sandbox import Budget, Level
from sandbox._children import (
    REMAINS,
    CgroupSet,
    CgroupV2,
    cgroup_support,
    hierarchy,
    shutdown,
)
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


def _parent() -> Path:
    h = hierarchy()
    assert isinstance(h, CgroupV2), h.describe()
    return h.parent


def _run_cgroups() -> list[Path]:
    return sorted(_parent().glob(f"{CGROUP_PREFIX}{os.getpid()}-*"))


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


def probe(level: Level) -> Found:
    """What this host says of itself: the hierarchy, its support, the doctor."""
    doctor = subprocess.run(
        [sys.executable, "-m", "sandbox", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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
        (run_cgroup,) = _run_cgroups()
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


SCENARIOS: dict[str, Callable[[Level], Any]] = {
    "probe": probe,
    "no_survivors": no_survivors,
    "freeze_and_kill": freeze_and_kill,
    "cpu_limit": cpu_limit,
    "memory_limit": memory_limit,
    "pids_limit": pids_limit,
}


def main() -> None:
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
