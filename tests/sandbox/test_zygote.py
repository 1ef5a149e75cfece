"""The zygote and the pool: one child per run, and runs that outlive a dead zygote."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import psutil
import pytest

import sandbox
from sandbox import Budget, Level, Pool, Spawn
from sandbox._children import REMAINS, WORKDIR_PREFIX, Child, _supervisor, hierarchy
from sandbox._children._supervisor import Warm
from sandbox._children._workspace import SPARES, Workspace, confined_base
from sandbox._engine._levels import cgroups_usable
from tests.host import child_levels

from .conftest import cannot_run_program_code, run_processes

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

CHILD_LEVELS = child_levels()

#: A program that tells whether its process ran a program before, and which process it is.
REUSED = (
    "import os, sys, time\n"
    "before = getattr(sys, 'runs_here', 0)\n"
    "sys.runs_here = before + 1\n"
    "(before, os.getpid(), time.time())\n"
)


@pytest.mark.parametrize("level", CHILD_LEVELS)
async def test_no_child_serves_two_runs(level: Level) -> None:
    """Each run is the first program its process ever ran, and the process can run no
    program code once the run is over (it has SIGKILL pending, or is gone)."""
    for _ in range(6):
        result = await sandbox.run(REUSED, level=level)
        assert result.ok, result.error
        before, pid, started = result.value
        assert before == 0
        if level is Level.PROCESS:  # (confined: a pid of the run's own namespace)
            try:
                reused = psutil.Process(pid).create_time() > started
            except psutil.NoSuchProcess:
                continue  # gone (and its pid not taken again)
            assert reused or cannot_run_program_code(pid)


def kill_zygote() -> int:
    pid = _supervisor.zygote_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.parametrize("level", CHILD_LEVELS)
async def test_killing_the_zygote_mid_run_loses_no_result(level: Level) -> None:
    """A run whose zygote is killed under it still returns its value; the next run gets a
    new zygote; nothing is left running or unreaped."""
    assert (await sandbox.run("1", level=level)).ok  # the zygote is up
    killed: list[int] = []

    def started() -> None:
        killed.append(kill_zygote())

    program = "host.started()\nimport time\ntime.sleep(1.0)\n42"
    result = await sandbox.run(program, tools=[started], level=level, budget=Budget(wall_clock=30))
    assert (result.ok, result.value) == (True, 42), result.error
    assert killed
    assert not psutil.pid_exists(killed[0])
    again = await sandbox.run("2", level=level)  # (a pool's idle children outlive it too)
    assert (again.ok, again.value) == (True, 2), again.error
    forked = await sandbox.run("3", level=level, spawn=Spawn.ZYGOTE)
    assert (forked.ok, forked.value) == (True, 3), forked.error
    assert _supervisor.zygote_pid() not in (None, killed[0])


async def test_a_wedged_zygote_is_replaced(monkeypatch: pytest.MonkeyPatch, spawn: Spawn) -> None:
    """A zygote that takes a request and never answers is replaced; the run fails clearly
    and the next one works."""
    mode = Spawn.ZYGOTE if spawn is Spawn.POOL else spawn  # (a pool's children exist already)
    assert (await sandbox.run("1", spawn=mode)).ok
    monkeypatch.setattr(_supervisor, "_ZYGOTE_TIMEOUT", 1.0)
    wedged = _supervisor.zygote_pid()
    assert wedged is not None
    os.kill(wedged, signal.SIGSTOP)
    try:
        with pytest.raises(sandbox.SpawnFailed, match="did not make the child"):
            await sandbox.run("1", spawn=mode)
        assert _supervisor.zygote_pid() != wedged
        result = await sandbox.run("3", spawn=mode)
        assert (result.ok, result.value) == (True, 3), result.error
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(wedged, signal.SIGKILL)
            os.kill(wedged, signal.SIGCONT)


async def test_a_pool_child_that_died_idle_is_not_used() -> None:
    """An idle child killed from outside is discarded; the run takes another."""
    with Pool(size=2) as pool:
        assert (await sandbox.run("1", spawn=pool)).ok
        assert pool.wait_full(30)
        for child in pool.idle():
            assert child.process.pid is not None
            os.kill(child.process.pid, signal.SIGKILL)
        with anyio.fail_after(30):
            while any(child.ready_now() is not False for child in pool.idle()):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        result = await sandbox.run("5", spawn=pool)
        assert (result.ok, result.value) == (True, 5), result.error


async def test_a_run_never_waits_for_a_child_being_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the background makes a child for the pool (here: held up), a run takes an
    idle one at once; a run that finds the pool empty makes its own and no more."""
    made: list[threading.Thread] = []
    held = threading.Event()
    real_make = Pool._make

    def make(
        kind: tuple[bool, bool, int | None], *, ahead: bool, warm: Warm = (False, False)
    ) -> Child:
        made.append(threading.current_thread())
        if threading.current_thread().name == "refill-under-test":
            held.wait(30)
        return real_make(kind, ahead=ahead, warm=warm)

    monkeypatch.setattr(Pool, "_make", staticmethod(make))
    with Pool(size=2) as pool:
        kind = (False, cgroups_usable(), None)
        first = pool.take(confined=False, use_cgroups=kind[1])  # the pool was empty
        assert len(made) == 1
        assert pool.idle() == []
        first.discard()
        pool.refill(*kind)
        assert len(pool.idle()) == 2
        refill = threading.Thread(target=pool.refill, args=kind, name="refill-under-test")
        took: list[Child] = []
        try:
            taken = pool.take(confined=False, use_cgroups=kind[1])
            refill.start()  # the pool has one idle child left: the refill makes another
            with anyio.fail_after(30):
                while len(made) < 4:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            # The refill is held up making a child: the idle one is taken at once.
            took.append(pool.take(confined=False, use_cgroups=kind[1]))
            assert refill.is_alive()  # still held up: the take did not wait for it
            assert len(made) == 4
            for child in (taken, *took):
                child.discard()
        finally:
            held.set()
            refill.join(30)
        assert len(pool.idle()) == 2


def test_closing_a_pool_waits_for_the_child_being_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child the background is making when the pool closes is discarded, and close()
    returns only once it is: nothing of it is left for the host to find."""
    held = threading.Event()
    making = threading.Event()
    made: list[Child] = []
    real_make = Pool._make

    def make(
        kind: tuple[bool, bool, int | None], *, ahead: bool, warm: Warm = (False, False)
    ) -> Child:
        making.set()
        held.wait(30)
        child = real_make(kind, ahead=ahead, warm=warm)
        made.append(child)
        return child

    monkeypatch.setattr(Pool, "_make", staticmethod(make))
    pool = Pool(size=1)
    kind = (False, cgroups_usable(), None)
    refill = threading.Thread(target=pool.refill, args=kind)
    closer = threading.Thread(target=pool.close)
    try:
        refill.start()
        assert making.wait(30)
        closer.start()
        closer.join(1.0)
        assert closer.is_alive()  # waits for the child being made
    finally:
        held.set()
        refill.join(30)
        closer.join(30)
    assert not closer.is_alive()
    assert pool.idle() == []
    (child,) = made
    assert child.process.pid is not None
    with contextlib.suppress(psutil.NoSuchProcess):
        assert not still_running(psutil.Process(child.process.pid))


async def test_pool_and_spawn_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        Pool(size=0)
    with pytest.raises(ValueError):
        await sandbox.run("1", spawn="fork")
    pool = Pool(size=1)
    pool.close()
    with pytest.raises(sandbox.SpawnFailed, match="closed"):
        await sandbox.run("1", spawn=pool)


HOST = textwrap.dedent(
    """
    import os, sys, tempfile, anyio, sandbox
    from sandbox._engine._levels import cgroups_usable
    from sandbox._children._reaper import CgroupSet
    from sandbox._children._workspace import confined_base
    async def main():
        pool = sandbox.Pool(size=2)
        assert (await sandbox.run("1", spawn=pool)).ok
        pool.wait_full(30)
        # What the host makes for a child just before it asks the zygote for it.
        confined = sys.argv[1] == "confined"
        where = confined_base() if confined else None
        tempfile.mkdtemp(prefix=f"sandbox-run-{os.getpid()}-", dir=where)
        if cgroups_usable():
            CgroupSet.create(f"run-{os.getpid()}-never-sent", memory=None, pids=None)
        def started():
            print(os.getpid(), flush=True)
        await sandbox.run("host.started()\\nimport time\\ntime.sleep(600)", tools=[started],
                          level=sys.argv[1], spawn=sys.argv[2])
    anyio.run(main)
    """
)


def still_running(proc: psutil.Process) -> bool:
    """Whether ``proc`` is alive and not a zombie (gone while this looks: not running)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("level", CHILD_LEVELS)
def test_a_host_killed_outright_leaves_nothing(level: Level, spawn: Spawn) -> None:
    """SIGKILL the host mid-run: its zygote ends the run and the idle children, removes
    their directories and cgroups (and those the host made for a request it never sent),
    and its keeper exits."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TMPDIR": tmp}
        root = Path(__file__).resolve().parents[2]
        host = subprocess.Popen(
            [sys.executable, "-c", HOST, str(level), str(spawn)],
            stdout=subprocess.PIPE,
            cwd=root,
            env=env,
        )
        try:
            assert host.stdout is not None
            line = host.stdout.readline()  # the run is under way
            assert line.strip(), "the host did not get as far as its run"
            tree = psutil.Process(host.pid).children(recursive=True)
            assert tree
            host.kill()
            host.wait()
            deadline = time.monotonic() + 20
            alive = tree
            while alive and time.monotonic() < deadline:
                alive = [p for p in tree if still_running(p)]
                time.sleep(0.05)
            assert alive == []

            def left() -> list[Path]:
                """What is left in the host's temporary directory, and of its runs'
                directories wherever they are made."""
                mine = f"{WORKDIR_PREFIX}{host.pid}-*"
                return [*Path(tmp).iterdir(), *Path(confined_base()).glob(mine)]

            deadline = time.monotonic() + 10
            while left() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert left() == []
            cgroups = [
                path
                for base in hierarchy().bases()
                if base.is_dir()
                for path in base.glob(f"run-{host.pid}-*")
            ]
            assert cgroups == []
        finally:
            if host.poll() is None:
                host.kill()
                host.wait()
            if host.stdout is not None:
                host.stdout.close()
    assert run_processes() == []


async def test_a_child_that_cannot_start_says_why(
    monkeypatch: pytest.MonkeyPatch, spawn: Spawn
) -> None:
    """A forked child that fails before its stderr is in place (here: its cgroup cannot be
    joined) tells the host why on its ready pipe, instead of ending silently."""
    from protocol import ForkRequest as real

    def unjoinable(**fields: object) -> object:
        fields["cgroups"] = ("/nonexistent-cgroup-of-this-test/cgroup.procs",)
        return real(**fields)  # type: ignore[arg-type]

    monkeypatch.setattr(_supervisor, "ForkRequest", unjoinable)
    if spawn is Spawn.POOL:  # (the fixture's pool made its children before the change)
        with Pool(size=1) as pool:
            result = await sandbox.run("1", spawn=pool, budget=Budget(wall_clock=30))
    else:
        result = await sandbox.run("1", budget=Budget(wall_clock=30))
    assert (result.ok, result.cause) == (False, "crash")
    assert "could not start" in result.error
    assert "FileNotFoundError" in result.error
    assert "nonexistent-cgroup-of-this-test" in result.error


#: A program that asks for the current loop outside one (it never awaits), and expects a
#: new one, as a fresh interpreter gives it; then runs one with ``asyncio.run``.
LOOP_OUTSIDE = (
    "import asyncio, warnings\n"
    "warnings.simplefilter('ignore')  # (get_event_loop outside a loop is deprecated)\n"
    "loop = asyncio.get_event_loop()\n"
    "got = loop.run_until_complete(asyncio.sleep(0, 'slept'))\n"
    "loop.close()\n"
    "[got, asyncio.run(asyncio.sleep(0, 'ran'))]"
)


@pytest.mark.parametrize("level", child_levels())
async def test_asyncio_in_a_child_is_as_new_after_the_warm_ups(level: Level) -> None:
    """The zygote runs an event loop once before it forks (its pages, not each child's,
    take the first run's writes), and a pool's child once more before it is ready; each
    leaves a policy that has made no loop: a program that asks for the current loop
    outside one still gets a new one, as in a fresh interpreter."""
    result = await sandbox.run(LOOP_OUTSIDE, level=level)
    assert result.ok, result.error
    assert result.value == ["slept", "ran"]


async def test_only_a_child_forked_ahead_warms_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's child, forked ahead of its run, warms its path before it says ready; a
    child forked for a run that waits for it does not (that run would wait for it too),
    on demand or from a pool found empty."""
    from protocol import ForkRequest as real

    asked: list[bool] = []

    def recorded(**fields: object) -> object:
        request = real(**fields)  # type: ignore[arg-type]
        asked.append(request.warm_up)
        return request

    monkeypatch.setattr(_supervisor, "ForkRequest", recorded)
    result = await sandbox.run("1", spawn=Spawn.ZYGOTE)
    assert (result.ok, asked) == (True, [False])
    with Pool(size=1) as pool:
        result = await sandbox.run("1", spawn=pool)  # finds the pool empty
        assert result.ok, result.error
        assert pool.wait_full()
        result = await sandbox.run("1", spawn=pool)  # takes the child made ahead
        assert result.ok, result.error
    # The run's own child, then the ones made ahead to take its place (and the second's).
    assert len(asked) >= 3, asked
    assert asked[:2] == [False, False], asked
    assert all(asked[2:]), asked


async def test_a_pool_warms_up_for_calls_and_awaits_while_it_sees_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool warms its children up for a program that calls tools, and for one that
    awaits (a first call, an event loop run once: memory and CPU that other programs do
    not repay), only once a run with tools, or a program that looks as if it awaits, has
    taken one, and stops once ``WARM_MEMORY`` runs in a row have not been so; a child so
    warmed runs such a program as a fresh interpreter would."""
    from protocol import ForkRequest as real

    warmed: list[tuple[bool, bool]] = []  # (warm_calls, warm_await) of each made ahead

    def recorded(**fields: object) -> object:
        request = real(**fields)  # type: ignore[arg-type]
        if request.warm_up:
            warmed.append((request.warm_calls, request.warm_await))
        return request

    def echo(value: object) -> object:
        return value

    monkeypatch.setattr(_supervisor, "ForkRequest", recorded)
    monkeypatch.setattr(_supervisor, "WARM_MEMORY", 2)
    awaiting = "import asyncio\nawait asyncio.sleep(0, 'awaited')"
    runs: list[tuple[str, object, list[Callable[..., object]]]] = [
        ("1", 1, []),
        ("host.echo(2)", 2, [echo]),
        (awaiting, "awaited", []),
        (LOOP_OUTSIDE, ["slept", "ran"], []),
        ("await host.echo(5)", 5, [echo]),
        ("6", 6, []),
        ("7", 7, []),
    ]
    with Pool(size=1) as pool:
        for program, value, tools in runs:
            result = await sandbox.run(
                program, tools=tools, spawn=pool, budget=Budget(wall_clock=30)
            )
            assert result.ok, (program, result.error)
            assert result.value == value
            assert pool.wait_full()
    # The first run found the pool empty; after each run, the child made to take its
    # place: warmed once a run was so, until two runs in a row were not.
    assert warmed == [
        (False, False),
        (True, False),
        (True, True),
        (False, True),
        (True, True),
        (True, True),
        (False, False),
    ]
    assert _supervisor.looks_awaiting(awaiting)
    assert not _supervisor.looks_awaiting("sum(range(10))")


#: The program's signal dispositions, and the wakeup descriptor it found set.
SIGNALS_PROGRAM = (
    "import signal\n"
    "wakeup = signal.set_wakeup_fd(-1)\n"
    "[wakeup, {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()\n"
    "          if isinstance(s, signal.Signals)}]"
)


@pytest.mark.parametrize("level", CHILD_LEVELS)
async def test_a_child_has_a_fresh_runners_signals(level: Level) -> None:
    """A child the zygote forked handles signals as a runner executed afresh does: none
    of the zygote's (its SIGCHLD handler, its wakeup descriptor) is left to the program."""
    fresh = await sandbox.run(SIGNALS_PROGRAM, level=level, spawn=Spawn.COLD)
    forked = await sandbox.run(SIGNALS_PROGRAM, level=level)
    assert fresh.ok, fresh.error
    assert forked.ok, forked.error
    assert forked.value == fresh.value
    wakeup, handlers = forked.value
    assert wakeup == -1
    assert handlers["SIGCHLD"] == repr(signal.SIG_DFL)


@pytest.mark.parametrize("level", CHILD_LEVELS)
async def test_a_child_has_exactly_the_runs_environment(level: Level) -> None:
    """The zygote sets each child's environment before the fork: the program sees its
    run's, whole, in ``os.environ`` and in the C library's, and nothing of the run forked
    before it (each run's own working directory is its home)."""
    program = (
        "import ctypes, os\n"
        "getenv = ctypes.CDLL(None).getenv\n"
        "getenv.restype = ctypes.c_char_p\n"
        "c_level = {name: getenv(name.encode()).decode() for name in os.environ}\n"
        "[dict(os.environ), c_level, os.getcwd()]"
    )
    homes = []
    for _ in range(3):  # (each spawn mode: the module's fixture)
        result = await sandbox.run(program, level=level)
        assert result.ok, result.error
        environ, c_level, cwd = result.value
        assert environ == c_level
        assert environ == {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": cwd,
            "TMPDIR": cwd,
            "LANG": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
        }
        homes.append(environ["HOME"])
    if level is Level.PROCESS:  # (a confined run's working directory is the same path)
        assert len(set(homes)) == len(homes), homes


@pytest.mark.parametrize("level", CHILD_LEVELS)
async def test_the_programs_main_thread_is_its_own(level: Level) -> None:
    """:mod:`threading`, imported by the zygote, names the program's own main thread: its
    native id is the program's thread id (the zygote's would be another process's, from
    outside a confined run's PID namespace)."""
    program = (
        "import threading\n"
        "[threading.main_thread().native_id, threading.get_native_id(),"
        " threading.current_thread() is threading.main_thread()]"
    )
    result = await sandbox.run(program, level=level)
    assert result.ok, result.error
    native_id, thread_id, is_main = result.value
    assert native_id == thread_id
    assert is_main


def _made_ahead(seconds: float = 10.0) -> list[Workspace]:
    """The workspaces made ahead for runs forked on demand, once there is one."""
    deadline = time.monotonic() + seconds
    while not SPARES.held() and time.monotonic() < deadline:
        time.sleep(0.005)
    return SPARES.held()


async def test_a_run_forked_on_demand_takes_the_workspace_made_ahead() -> None:
    """Each run forked on demand leaves the next one's workspace made in the background;
    the next run of that kind works in it, and leaves another."""
    SPARES.close()
    first = await sandbox.run("1", spawn=Spawn.ZYGOTE)
    assert first.ok, first.error
    (ahead,) = _made_ahead()
    assert await anyio.Path(ahead.workdir).is_dir()
    second = await sandbox.run("import os\nos.getcwd()", spawn=Spawn.ZYGOTE)
    assert (second.ok, second.value) == (True, ahead.workdir), second.error
    (after,) = _made_ahead()
    assert after is not ahead
    assert REMAINS.wait_empty(30.0)
    assert not await anyio.Path(ahead.workdir).exists()  # (the run's, with its remains)


async def test_closing_the_host_removes_the_workspaces_made_ahead() -> None:
    SPARES.close()  # (an earlier test of this worker may have left one of another kind)
    result = await sandbox.run("1", spawn=Spawn.ZYGOTE, level=Level.PROCESS)
    assert result.ok, result.error
    (ahead,) = _made_ahead()
    cgroups = [] if ahead.cgroups is None else list(ahead.cgroups.dirs.values())
    SPARES.close()
    assert SPARES.held() == []
    assert not await anyio.Path(ahead.workdir).exists()
    assert [path for path in cgroups if await anyio.Path(path).exists()] == []
