"""Where a run's child comes from: a cold spawn, the zygote, or a pool of warm children.

Theory of operation
-------------------
Every child-level run gets its child from the zygote (:mod:`runner._zygote`): the host
starts one keeper + zygote pair per process, lazily, and keeps it for every run after.
The zygote forks one child per run, and is the parent and subreaper of every runner, so the
host itself never has to be a subreaper (and orphans of the host's other subprocesses are
none of our business). Three ways to get a child (:class:`Spawn`):

``cold``
    the zygote forks and the child executes a fresh ``python -I -S`` runner: what a run
    costs when every child starts Python from nothing. The reference point.
``zygote``
    the zygote forks, and the child is the runner already: no interpreter start, no imports.
``pool``
    children forked ahead of demand (a :class:`Pool`) and already confined, each waiting
    for its Start; a run takes one, and a replacement is asked for at once. The fork is
    not on the run's path at all.

Whichever way, a child is prepared the same way (:class:`Child`): the host makes the run's
working directory, its cgroups (with the default budget's limits), its pipes and its
report socket, and sends them with a :class:`~protocol.ForkRequest`. The child joins the
cgroups, puts up the confined level's walls if asked, and writes ``ready``; then the host
sets the run's limits (the cgroups' where the run's budget differs from the default, and
rlimits on every process of the run) and only then sends the Start. No
child ever serves two runs: a runner exits after its one Result.

What the host holds of a child is three small handles, each with an end of its own, which
:class:`Child` composes and ends in order (:meth:`Child.clear`, :meth:`Child.discard`):

* the run's :class:`~sandbox._children._workspace.Workspace` (working directory,
  cgroups, uid lease, the run's file system), removed once every process of the run has
  been sent SIGKILL;
* its :class:`~sandbox._children._pipes.Pipes` and
  :class:`~sandbox._children._pipes.ReadyPipe`: the child's ends go with the request, and
  the run takes the host's ends of its channels (closing them is the cancel signal);
* the runner's :class:`~sandbox._children._runner.RunnerProcess` (pid, pidfd, exit
  status), in the shape of ``trio.Process``: every path ends with it reaped.

The child itself is the request: which zygote took it, whether the child is ready, and
what to replace when the zygote never answers.

The zygote reports each child's pid (with a pidfd) and, after reaping it, its exit status
and resource usage, on the run's own report socket. If the zygote dies, its children go on
(they are re-parented to the keeper, which reaps them), their runs end normally, and the
next request starts a new pair; a run whose exit status was lost says so (no exit code).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Final, Self

import anyio
import msgspec

from protocol import (
    MAX_FORK_MESSAGE,
    REPORT_DECODER,
    WORKDIR_PREFIX,
    ConfineRequest,
    Forked,
    ForkRequest,
    RemoteProtocolError,
    decode_fork,
)
from runner import DEFAULT_DISK_BYTES

from .._errors import SpawnFailed
from ._pipes import open_pipes
from ._remains import REMAINS
from ._runner import RunnerProcess
from ._workspace import SPARES, Kind, Workspace, disk_files, kind_of

__all__ = ["WORKDIR_PREFIX", "Child", "Pool", "Spawn", "acquire", "shutdown", "zygote_pid"]

_ROOT: Final = Path(__file__).resolve().parents[2]  # the directory holding sandbox/ and runner/
_MSGSPEC_DIR: Final = Path(msgspec.__file__).resolve().parent.parent
_PATHS: Final = [str(_ROOT), str(_MSGSPEC_DIR)]
#: A fresh runner's, and the zygote's, first code, followed by :data:`_PATHS` as its first
#: arguments (taken off ``sys.argv`` at once: the code, whose frame is below every program,
#: names no host path).
_TAKE_PATHS: Final = (
    f"import sys; sys.path[:0] = sys.argv[1:{1 + len(_PATHS)}]; del sys.argv[1:{1 + len(_PATHS)}]; "
)
_RUNNER_BOOT: Final = (f"{_TAKE_PATHS}from runner import main; main()", *_PATHS)
_ZYGOTE_BOOT: Final = (f"{_TAKE_PATHS}from runner import zygote_main; zygote_main()", *_PATHS)
#: How long a zygote may take to say hello, and to answer a request, before it is
#: considered wedged and replaced.
_ZYGOTE_TIMEOUT: Final = 30.0
#: How long a child may take, once forked, to be ready (a cold child starts Python).
_READY_TIMEOUT: Final = 60.0
#: How long clearing a run's remains waits for the zygote's report that its runner was
#: reaped (a killed process is normally torn down in milliseconds).
_CLEAR_DEADLINE: Final = 10.0

#: For how many runs taking a pool's child of one kind a run with tools to call, or whose
#: program looks as if it awaits (:func:`looks_awaiting`), keeps the pool warming the
#: children it makes for such runs (:attr:`protocol.ForkRequest.warm_calls`,
#: :attr:`~protocol.ForkRequest.warm_await`).
WARM_MEMORY: Final = 100


#: What a child made ahead warms up for besides a plain program: tool calls, awaiting.
Warm = tuple[bool, bool]


def looks_awaiting(program: str) -> bool:
    """Whether ``program`` may await: ``await`` or ``async`` anywhere in its text.

    A guess, made without compiling it: a word in a string or a comment counts too. A
    wrong guess costs a pool one warm-up it did not need, or a program its first event
    loop on its path; never a run.
    """
    return "await" in program or "async" in program


class Spawn(StrEnum):
    """How a run's child process is made (see the module docstring)."""

    COLD = "cold"
    ZYGOTE = "zygote"
    POOL = "pool"


def scrubbed_env(workdir: str) -> dict[str, str]:
    """The whole environment of a run's child."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }


@functools.cache
def _interpreter_files() -> tuple[str, ...]:
    """The interpreter's executable and its ``libpython``, if it has one.

    Nothing inside a confined child needs them (they are mapped already), but py-spy reads
    them through the child's root to find the interpreter's symbols
    (``stack_on_timeout``). Executing the interpreter inside gives a program nothing it
    does not have: the same Python, under the same walls.
    """
    found = [os.path.realpath(sys.executable)]
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            path = fields[5].strip() if len(fields) == 6 else ""
            if "/libpython" in path and path not in found and os.path.isfile(path):
                found.append(path)
    return tuple(found)


def _confine_request(workdir: str, uid: int | None, disk_bytes: int | None) -> str:
    """The confined level's request: what its view must hold, who the program is.

    Beside what the runner imports, the interpreter's own files (read-only, see
    :func:`_interpreter_files`). ``uid``: the run's leased host id (uid and gid), on a
    root host. ``disk_bytes``: the size of the run's file system (None: no bound).
    """
    request = ConfineRequest(
        workdir=workdir,
        # The runner's own packages are the runner's to bind (at their places in the
        # view, not at their host paths: runner._relocate).
        import_paths=_interpreter_files(),
        disk_bytes=disk_bytes,
        disk_files=disk_files(disk_bytes),
        host_uid=uid,
        host_gid=uid,
    )
    return msgspec.json.encode(request).decode()


class _Zygote:
    """The host's handle on one keeper + zygote pair."""

    def __init__(self) -> None:
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.keeper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", *_ZYGOTE_BOOT, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                env=scrubbed_env("/"),
                start_new_session=True,
            )
        except OSError as exc:
            control.close()
            raise SpawnFailed(f"cannot start the zygote: {exc}") from exc
        finally:
            theirs.close()
        self.control = control
        self.retired = False
        try:
            control.settimeout(_ZYGOTE_TIMEOUT)
            hello = decode_fork(REPORT_DECODER, control.recv(MAX_FORK_MESSAGE))
            if not isinstance(hello, Forked):
                raise ValueError(f"unexpected hello {hello!r}")
            self.pid = hello.pid
            self.pidfd = os.pidfd_open(self.pid)
        except (OSError, ValueError, RemoteProtocolError) as exc:
            self.close()
            raise SpawnFailed(f"the zygote did not start: {exc}") from exc
        control.settimeout(5.0)

    def alive(self) -> bool:
        if self.retired:
            return False
        return not select.select([self.pidfd], [], [], 0)[0]

    def request(self, request: ForkRequest, fds: list[int]) -> None:
        """Send one fork request.

        Raises:
            OSError: the zygote is gone or not reading.
        """
        socket.send_fds(self.control, [msgspec.json.encode(request)], fds)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        """Close the control channel: the zygote ends every run and exits, then the keeper."""
        self.control.close()
        try:
            self.keeper.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            self.keeper.kill()
            self.keeper.wait()
        self.close_pidfd()

    def close_pidfd(self) -> None:
        """Close the zygote's pidfd, once (a number closed twice may be someone else's)."""
        pidfd, self.pidfd = getattr(self, "pidfd", -1), -1
        if pidfd >= 0:
            os.close(pidfd)


_lock = threading.Lock()
#: Every pool not yet closed, held until it is (a pool dropped without closing keeps its
#: idle children until exit, when it is closed with the others): none outlives the host.
_pools: set[Pool] = set()
_current: _Zygote | None = None
_retired: list[_Zygote] = []


def _reap_retired() -> None:
    """Reap the keepers of replaced zygotes that have exited (they do once their runs end).

    Call with ``_lock`` held.
    """
    for old in list(_retired):
        if old.keeper.poll() is not None:
            _retired.remove(old)


def needs_start() -> bool:
    """Whether the next request will start a zygote first (which takes a Python start)."""
    with _lock:
        return _current is None or not _current.alive()


def _zygote() -> _Zygote:
    """The live zygote, started (or replaced) on demand."""
    global _current
    with _lock:
        _reap_retired()
        if _current is not None and not _current.alive():
            _retire(_current)
            _current = None
        if _current is None:
            _current = _Zygote()
        return _current


def _retire(old: _Zygote) -> None:
    old.retired = True
    old.kill()
    old.control.close()
    old.close_pidfd()
    _retired.append(old)


def zygote_pid() -> int | None:
    """The pid of the current zygote, if one is running (for diagnosis and tests)."""
    with _lock:
        return None if _current is None else _current.pid


def host_processes() -> set[int]:
    """The processes this host keeps between runs: the zygote and keeper processes, and
    the idle children of every open pool (for diagnosis, and for tests that look for
    leftovers)."""
    with _lock:
        _reap_retired()
        pairs = [*_retired, *([_current] if _current is not None else [])]
        found = {pid for z in pairs for pid in (z.pid, z.keeper.pid)}
    for pool in list(_pools):
        found.update(child.process.pid for child in pool.idle() if child.process.pid is not None)
    return found


def _replace(broken: _Zygote) -> None:
    global _current
    with _lock:
        if _current is broken:
            _retire(broken)
            _current = None


class Child:
    """One run's child: what the host holds of it, from the request to its reaping.

    Three handles, each with its own end (see the module docstring): the run's
    :attr:`workspace` on the host, its :attr:`pipes` (and the :attr:`ready` pipe), and
    the runner's :attr:`process`, which always ends reaped. The child itself is the
    request to the zygote, and the order in which they are torn down.
    """

    def __init__(
        self,
        *,
        confined: bool,
        use_cgroups: bool,
        disk_bytes: int | None = DEFAULT_DISK_BYTES,
        workspace: Workspace | None = None,
    ) -> None:
        """Make the run's working directory, cgroups (the default limits) and pipes; for a
        confined run on a root host, lease its uid (:mod:`sandbox._uid`).

        ``disk_bytes``: a confined run's file system (its working directory and ``/tmp``;
        None: no bound but memory); the host's working directory stays empty.
        ``workspace``: one made ahead for a child of this kind, taken instead.

        Raises:
            SpawnFailed: they could not be made (nothing is left behind).
        """
        self.confined = confined
        if workspace is None:
            workspace = Workspace(confined=confined, use_cgroups=use_cgroups, disk_bytes=disk_bytes)
        self.workspace = workspace
        try:
            self.pipes, self.ready, report = open_pipes()
        except OSError as exc:
            self.workspace.remove(runner_gone=True)
            raise SpawnFailed(f"cannot prepare the run: {exc}") from exc
        self.process = RunnerProcess(report)
        self._zygote: _Zygote | None = None  # the one that took the request
        #: A pool's: asks for this child's replacement (without waiting), once the run ends.
        self.refill: Callable[[], None] | None = None

    def request(
        self, *, mode: Spawn, start_timeout: float, ahead: bool, warm: Warm = (False, False)
    ) -> None:
        """Ask the zygote for the child (at most once, retried on a fresh zygote once);
        ``ahead``: the child is forked ahead of its run (a pool's), not for a run waiting;
        ``warm`` (with ``ahead``): it warms up for a program that calls tools, and for one
        that awaits, too.

        Raises:
            SpawnFailed: no zygote would take the request.
        """
        workspace = self.workspace
        request = ForkRequest(
            mode="cold" if mode is Spawn.COLD else "warm",
            workdir=workspace.workdir,
            env=scrubbed_env(workspace.program_dir),
            cgroups=() if workspace.cgroups is None else workspace.cgroups.procs_files(),
            confine=self._confine_request() if self.confined else "",
            start_timeout=start_timeout,
            # With cgroups, every process of the run is found there: the runner need not
            # hold them in its tree after its Result, and exits while the host reads it.
            linger=workspace.cgroups is None,
            argv=(sys.executable, "-I", "-S", "-c", *_RUNNER_BOOT),
            warm_up=ahead,
            warm_calls=ahead and warm[0],
            warm_await=ahead and warm[1],
        )
        for attempt in (1, 2):
            z = _zygote()
            try:
                z.request(request, self.pipes.theirs)
                self._zygote = z
                break
            except OSError as exc:
                _replace(z)
                if attempt == 2:
                    self.discard()
                    raise SpawnFailed(f"the zygote would not take the request: {exc}") from exc
        self.pipes.sent()

    def _confine_request(self) -> str:
        workspace = self.workspace
        uid = None if workspace.lease is None else workspace.lease.id
        return _confine_request(workspace.program_dir, uid, workspace.disk_bytes)

    async def wait_ready(self, seconds: float = _READY_TIMEOUT) -> str | None:
        """Wait until the child waits for its Start. None when it does, else why not.

        Raises:
            SpawnFailed: the zygote never made the child.
        """
        await self._wait_forked(seconds)
        said = await self.ready.wait(seconds)
        if said == b"R":
            return await self._wait_moved(seconds) if self.confined else None
        if said.startswith(b"!"):
            return said[1:].decode("utf-8", "replace")
        return (
            "the child ended before it was ready"
            if said == b""
            else "the child was not ready in time"
        )

    async def _wait_forked(self, seconds: float) -> None:
        """Wait for the zygote's report of the fork; replace a zygote that never answers.

        Raises:
            SpawnFailed: the zygote never made the child.
        """
        process = self.process
        await process.wait_reported(lambda: process.pid is not None, min(seconds, _ZYGOTE_TIMEOUT))
        if process.pid is not None:
            return
        if process.failure is None and not process.zygote_lost:
            # The zygote took the request and never answered: it is wedged.
            with _lock:
                wedged = _current
            if wedged is not None:
                _replace(wedged)
        raise SpawnFailed(f"the zygote did not make the child: {process.failure or 'no answer'}")

    async def _wait_moved(self, seconds: float) -> str | None:
        """A confined child's runner is PID 1 of its namespace, which the zygote reports
        once the child that forked it has exited: wait for it, then hold the run's file
        system. None when both are done, else why not."""
        process = self.process
        await process.wait_reported(
            lambda: process.moved or process.exited is not None, min(seconds, _ZYGOTE_TIMEOUT)
        )
        if process.moved and process.pid is not None:
            return self.workspace.hold_fs(process.pid)
        return "the child's PID 1 was not reported by the zygote"

    def ready_now(self) -> bool | None:
        """Without waiting: True if ready, False if it failed or died, None if not known yet."""
        process = self.process
        process.poll()
        if process.exited is not None or process.failure is not None:
            return False
        if process.pid is None:
            # Not forked yet: lost for good if the zygote that took the request is gone
            # (its descriptors may stay in flight, with no EOF to tell).
            z = self._zygote
            return False if process.zygote_lost or z is None or not z.alive() else None
        if process.exit_on_pidfd():
            return False
        said = self.ready.said_nowait()
        return None if said is None else said == b"R"

    def discard(self) -> None:
        """Tear down a child that will never run (synchronously): close its Start, wait a
        little for it to exit, kill it if it does not, remove what the run made."""
        self.pipes.close()
        process = self.process
        # Requested: the report of the fork may still be on its way.
        process.block_until(lambda: process.pid is not None or process.zygote_lost, 2.0)
        process.wait_reaped(2.0, 5.0)
        self.release()

    def clear(self) -> None:
        """Clear the remains of a run that is over (blocking; the remains thread's work).

        Every process of the run has been sent SIGKILL: wait for the zygote's report that
        the runner was reaped (it reaps the rest in the same pass), then kill whatever the
        cgroups still list and remove what the run made. A runner that is not reported
        within the deadline is sent SIGKILL again; what still will not go keeps its uid
        lease until the host exits, and its cgroups stay until they are empty.
        """
        self.pipes.close()
        self.process.wait_reaped(_CLEAR_DEADLINE, _CLEAR_DEADLINE)
        self.release()

    def release(self) -> None:
        """Remove what the run made, once its processes are gone (idempotent)."""
        process = self.process
        # Read before the report socket and the pidfd are closed: whether the runner is gone.
        runner_gone = process.pid is None or process.exit_seen()
        self.ready.close()
        process.close()
        self.workspace.remove(runner_gone=runner_gone)
        if process.zygote_lost and _retired:
            with _lock:
                _reap_retired()


class Pool:
    """Warm children forked ahead of demand, ``size`` per level, each for one run only.

    Use as ``spawn=`` in :func:`sandbox.run`. The pool is kept full without a task: once a
    run that took a child is over, one background thread asks the zygote for the
    replacement, so that neither its fork nor its walls compete with a run. Close the
    pool (or use it as a context manager) to end the idle children and remove their
    working directories and cgroups; every pool still open is closed at exit.

    Idle children hold memory (:mod:`benchmarks` measures it) and, with cgroups, a set of
    empty cgroups each; an idle confined child on a root host holds its uid. They run
    nothing until a Start arrives. A confined child's file system has its size from birth:
    the pool keeps ``size`` children for each size runs have asked for.

    Each child takes a small program through the runner before it says ready, so that a
    run's first compile and Result do not copy pages on its path. Once a run with tools
    to call has taken one, the children the pool makes next take a program that calls a
    tool too (about 0.15 MB more per idle child and 0.5 ms of its CPU here, against
    0.2-0.4 ms off a first call's path); once a program that looks as if it awaits
    (:func:`looks_awaiting`) has, one that awaits calls (an event loop run once: about
    0.8 MB and 1.5 ms, against 1 ms off the path of each program that awaits); each until
    :data:`WARM_MEMORY` runs in a row of that kind of child have not been so.
    """

    def __init__(self, size: int = 2) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"a pool's size must be a positive integer, not {size!r}")
        self.size = size
        self._idle: dict[Kind, deque[Child]] = {}
        self._lock = threading.Lock()
        # Children being made for the pool, outside the lock; close() waits for them.
        self._making = 0
        self._made = threading.Condition(self._lock)
        self._closed = False
        # Runs that took a child, by kind; and how many had, at the last run with tools,
        # and at the last one whose program looked as if it awaits.
        self._taken: dict[Kind, int] = {}
        self._called_at: dict[Kind, int] = {}
        self._awaited_at: dict[Kind, int] = {}
        _pools.add(self)

    @staticmethod
    def _make(kind: Kind, *, ahead: bool, warm: Warm = (False, False)) -> Child:
        """One child for the pool (``ahead``), or for the run that found it empty (which
        waits for it: the child does not warm up first, see :attr:`ForkRequest.warm_up`).

        Raises:
            SpawnFailed: the zygote would not take the request.
        """
        confined, use_cgroups, disk_bytes = kind
        child = Child(confined=confined, use_cgroups=use_cgroups, disk_bytes=disk_bytes)
        child.request(mode=Spawn.POOL, start_timeout=0, ahead=ahead, warm=warm)
        return child

    def warms(
        self, *, confined: bool, use_cgroups: bool, disk_bytes: int | None = DEFAULT_DISK_BYTES
    ) -> Warm:
        """Whether the children made now of this kind are warmed up for programs that
        call tools, and for programs that await (see the class docstring)."""
        kind = kind_of(confined, use_cgroups, disk_bytes)
        with self._lock:
            return self._warms(kind)

    def _warms(self, kind: Kind) -> Warm:
        taken = self._taken.get(kind, 0)

        def recent(at: int | None) -> bool:
            return at is not None and taken - at < WARM_MEMORY

        return recent(self._called_at.get(kind)), recent(self._awaited_at.get(kind))

    def take(
        self,
        *,
        confined: bool,
        use_cgroups: bool,
        disk_bytes: int | None = DEFAULT_DISK_BYTES,
        calls: bool = False,
        program: str = "",
    ) -> Child:
        """A child for one run: an idle one, or, if the pool is empty, one made for it.

        The child's :attr:`Child.refill` tops the pool up again in the background; the run
        calls it once it is over, so that making the replacement is not on its path. A run
        that finds the pool empty makes its own child and no more: filling the pool is the
        background's work. ``calls``: the run has tools to call; ``program``: its program,
        which may look as if it awaits (the children made next are warmed up for such
        runs: see the class docstring).

        Raises:
            SpawnFailed: no child could be made.
        """
        kind = kind_of(confined, use_cgroups, disk_bytes)
        awaits = looks_awaiting(program)
        with self._lock:
            taken = self._taken[kind] = self._taken.get(kind, 0) + 1
            if calls:
                self._called_at[kind] = taken
            if awaits:
                self._awaited_at[kind] = taken
        dead: list[Child] = []
        try:
            while True:
                with self._lock:
                    if self._closed:
                        raise SpawnFailed("the pool is closed")
                    idle = self._idle.setdefault(kind, deque())
                    child = idle.popleft() if idle else None
                if child is None:
                    child = self._make(kind, ahead=False)
                elif child.ready_now() is False:  # died while idle: not for a run
                    dead.append(child)
                    continue
                child.refill = functools.partial(
                    _background.submit, functools.partial(self.refill, *kind)
                )
                return child
        finally:
            for child in dead:
                child.discard()

    def refill(
        self, confined: bool, use_cgroups: bool, disk_bytes: int | None = DEFAULT_DISK_BYTES
    ) -> None:
        """Ask for children until the pool is full again (quietly: a failure to fork now
        shows up, with its reason, when a run next takes a child).

        Each child is made without the pool's lock held, so that a run taking an idle
        child never waits for one being made.
        """
        kind = kind_of(confined, use_cgroups, disk_bytes)
        while True:
            with self._lock:
                idle = self._idle.setdefault(kind, deque())
                if self._closed or len(idle) >= self.size:
                    return
                self._making += 1
            try:
                if not self._make_one(kind, idle):
                    return
            finally:
                with self._lock:
                    self._making -= 1
                    self._made.notify_all()

    def _make_one(self, kind: Kind, idle: deque[Child]) -> bool:
        """Make a child and add it to ``idle``; False if it could not be made, or if the
        pool closed meanwhile (the child is then discarded, before :meth:`close` is told
        it may go on)."""
        with self._lock:
            warm = self._warms(kind)
        try:
            child = self._make(kind, ahead=True, warm=warm)
        except SpawnFailed:
            return False
        with self._lock:
            kept = not self._closed
            if kept:
                idle.append(child)
        if not kept:
            child.discard()
        return kept

    def idle(self) -> list[Child]:
        """The idle children (for measurements and tests)."""
        with self._lock:
            return [child for idle in self._idle.values() for child in idle]

    def wait_full(self, timeout: float = 30.0) -> bool:
        """Block until the pool is full and every idle child is ready; False on timeout.

        For measurements that must not include the fork (the pool refills in the
        background, and a burst of runs can drain it).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                full = all(len(idle) >= self.size for idle in self._idle.values())
            if full and all(child.ready_now() for child in self.idle()):
                return True
            time.sleep(0.001)
        return False

    def close(self) -> None:
        """End every idle child and remove what it holds. Idempotent."""
        with self._lock:
            self._closed = True
            children = [child for idle in self._idle.values() for child in idle]
            self._idle.clear()
            # A child being made now is discarded by its maker once made: wait for that.
            self._made.wait_for(lambda: self._making == 0, _CLEAR_DEADLINE)
        _pools.discard(self)
        for child in children:
            child.discard()
        REMAINS.wait_empty(_CLEAR_DEADLINE * 2)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await anyio.to_thread.run_sync(self.close)


class _Background:
    """One background thread that makes what runs will need (a pool's children, the
    workspaces of runs forked on demand), so that no run waits for it."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def submit(self, work: Callable[[], object]) -> None:
        with self._start:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name="sandbox-ahead", daemon=True
                )
                self._thread.start()
        self._queue.put(work)

    def _work(self) -> None:
        while True:
            self._queue.get()()


_background = _Background()
_default_pool: Pool | None = None


def default_pool() -> Pool:
    """The process-wide pool behind ``spawn="pool"``: one warm child per CPU and level."""
    global _default_pool
    with _lock:
        if _default_pool is None:
            _default_pool = Pool(size=os.cpu_count() or 2)
        return _default_pool


async def acquire(
    spawn: Spawn | Pool,
    *,
    confined: bool,
    use_cgroups: bool,
    disk_bytes: int | None = DEFAULT_DISK_BYTES,
    calls: bool = False,
    program: str = "",
) -> Child:
    """A child for one run, requested the way ``spawn`` says; not yet known to be ready.

    ``disk_bytes``: the size of a confined run's file system (None: no bound).
    ``calls``, ``program``: whether the run has tools to call, and its program (a pool
    learns from them; only a pool reads the program's text).

    Raises:
        SpawnFailed: the child could not be requested.
    """
    get: Callable[[], Child]
    if isinstance(spawn, Pool) or spawn is Spawn.POOL:
        pool = spawn if isinstance(spawn, Pool) else default_pool()
        get = functools.partial(
            pool.take,
            confined=confined,
            use_cgroups=use_cgroups,
            disk_bytes=disk_bytes,
            calls=calls,
            program=program,
        )
    else:
        get = functools.partial(
            _requested, spawn, confined=confined, use_cgroups=use_cgroups, disk_bytes=disk_bytes
        )
    if needs_start():  # starting the zygote takes a Python start-up: not on the loop
        return await anyio.to_thread.run_sync(get)
    return get()


def _requested(spawn: Spawn, *, confined: bool, use_cgroups: bool, disk_bytes: int | None) -> Child:
    """A new child, requested from the zygote (a cold or a warm one), in the workspace made
    ahead for its kind if there is one; the next run's is made in the background."""
    kind = kind_of(confined, use_cgroups, disk_bytes)
    child = Child(
        confined=confined,
        use_cgroups=use_cgroups,
        disk_bytes=disk_bytes,
        workspace=SPARES.take(kind),
    )
    child.request(mode=spawn, start_timeout=60.0, ahead=False)
    _background.submit(functools.partial(SPARES.make, kind))
    return child


@atexit.register
def shutdown() -> None:
    """Close every pool and the zygote (at exit; tests call it too)."""
    global _current, _default_pool
    _default_pool = None
    for pool in list(_pools):
        pool.close()
    SPARES.close()
    REMAINS.wait_empty(_CLEAR_DEADLINE * 2)  # the zygote must report the runs' reaping
    with _lock:
        pairs = [*_retired, *([_current] if _current is not None else [])]
        _current = None
        _retired.clear()
    for z in pairs:
        z.close()
