"""The ``process`` and ``confined`` levels: one fresh child process per run, and its life.

Theory of operation
-------------------
The child comes from the layer below (:mod:`sandbox._children`: cold, warm, or from a
pool), already in the run's cgroups, in its own session, with a scrubbed environment and a
private working directory, and, for ``confined``, behind its walls. It has run nothing of
the run yet: it waits for its Start. Before sending it, the host sets the run's limits on
its cgroups (which were made with the default budget's: only a budget that differs writes
its own) and, with ``prlimit``, on its process (CPU, file size, open files, no core
dumps).

The run (:meth:`_Run.drive`): the Server answers calls, two tasks drain stdout and stderr
into capped buffers (telling the caller's ``on_output`` what they keep, as it comes), a
watcher ends the run at its CPU limit (all its processes together, read from its cgroups
or, without them, from its process tree: :mod:`sandbox._children._cputime`), and the
Starter waits for the Result, all under the
wall clock. What happened is gathered into an
:class:`~sandbox._result.Ending`, from which :func:`~sandbox._result.run_result` (pure)
makes the :class:`~sandbox.RunResult`.

The end (:meth:`_Run.stop`), however the run ended, shielded from cancellation: with
cgroups (which list every process of the run, whatever it did with its parents and
sessions), every process of the run is sent SIGKILL in passes until a pass finds none it
has not signalled; a process with SIGKILL pending never executes another instruction of
the program. The run's measurements are read from its cgroups then, the output that is in
the pipes is read to its last byte, and the run returns: the kernel's teardown of the
processes, their reaping, and the removal of the cgroups, working directory and uid lease
are the run's *remains*, cleared in the background (:mod:`sandbox._children._remains`),
bounded, and waited for when the host or a pool closes. Only a runner that died without
answering is waited for (briefly), as its exit status is what explains its death.

Without cgroups (a host that cannot make them: an ordinary user's), the runner is the
subreaper that holds every process of the run in its tree: the host kills that tree but
the runner, closes the start channel, stops the runner (SIGTERM, a grace period,
SIGKILL), kills whatever is left, and waits for the zygote's report that it reaped the
runner, before returning. A confined runner is PID 1 of the run's PID namespace: one
SIGKILL to it ends every process of the run, and the report of its reaping comes once
they are all gone. Without cgroups, two rlimits stand in for their limits
(``RLIMIT_DATA``, ``RLIMIT_NPROC``: :func:`_set_rlimits`).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import inspect
import math
import os
import resource
import select
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio
import anyio.abc
import msgspec

from protocol import (
    MAX_FRAME_BYTES,
    VERSION,
    CallStats,
    ChannelClosed,
    FdChannel,
    Kind,
    LocalProtocolError,
    Pumped,
    RemoteProtocolError,
    Result,
    RunnerExit,
    Server,
    Signal,
    Start,
    StarterCore,
)

from .._budget import Budget, given
from .._children import (
    REMAINS,
    Child,
    Pool,
    RunCpu,
    Spawn,
    acquire,
    kill_tree,
    python_stack,
)
from .._errors import SpawnFailed
from .._result import Answer, Cause, Ending, Output, RunResult, Verdict, run_result
from .._text import seconds
from ._levels import Level
from ._tools import Toolset

__all__ = ["OnOutput", "run_process", "watch_cpu"]

#: How long a runner that has sent its Result (or been told to stop) gets to exit by
#: itself, and again after SIGTERM, before SIGKILL, where the host has no cgroups; and how
#: long the host waits for the exit status of a runner that died without answering.
_GRACE: Final = 0.5
#: The longest the end of a run may take (killing, reaping); it is shielded from
#: cancellation, so it needs a deadline of its own.
_CLEANUP_DEADLINE: Final = 10.0
#: CPU time (all CPUs together) the run may use past ``max_cpu`` before it is killed: the
#: CPU watcher's shortest sleep, times the number of CPUs.
_CPU_SLACK: Final = 0.02
_READ_CHUNK: Final = 1 << 16
#: After a short read of a program's output, how long the host lets more gather in the pipe
#: before it reads again. The runner's streams write through, so a program that prints line
#: by line puts each line in the pipe at once; reading each as it came would wake the host
#: for every line, and make a program that prints 100,000 lines about twice as slow again
#: (``benchmarks/bench_output.py``). 5 ms is far below what a person watching the output
#: can notice, and a full read (a pipe filling faster than that) is followed by the next
#: without a pause.
_GATHER: Final = 0.005

#: What ``on_output`` is: called with the stream's name and the text, as it comes; an
#: awaitable it returns (an ``async def``) is awaited.
OnOutput = Callable[[Literal["stdout", "stderr"], str], object]


@dataclass
class _Measured:
    """What the host measured of a run once it was stopped."""

    cpu_time: float | None = None
    peak_memory: int | None = None


class _Listener:
    """The caller's ``on_output``, called from the run's output tasks.

    The first exception it raises stops the run (:attr:`error`; :func:`run_process` raises
    it once the run is cleared); it is not called again after that.
    """

    def __init__(self, callback: OnOutput, abort: Callable[[], object]) -> None:
        self.callback = callback
        self.abort = abort
        self.error: Exception | None = None

    async def tell(self, name: Literal["stdout", "stderr"], text: str) -> None:
        if self.error is not None:
            return
        try:
            answer = self.callback(name, text)
            if inspect.isawaitable(answer):
                await answer
        except Exception as exc:  # the caller's: it ends the run, and run() raises it
            self.error = exc
            self.abort()


class _Output:
    """A capped capture of one output stream, drained from its pipe until its task is
    cancelled, and told to the listener (if any) as it comes.

    Once the run's processes can no longer write, the run cancels the draining task and
    reads what is left in the pipe (:meth:`read_rest`), to its last byte, without waiting
    for the end of file (which comes only once every process holding the pipe has been
    torn down). A listener is never cut short by that cancellation: what it is told, it
    is told whole.

    The listener is told exactly what is kept: the text of the first ``cap`` bytes, decoded
    as they arrive (a character split between two reads is told whole, with the second), so
    that what it was told, put together, is the captured text.
    """

    def __init__(
        self,
        fd: int,
        cap: int | None,
        name: Literal["stdout", "stderr"] = "stdout",
        listener: _Listener | None = None,
    ) -> None:
        self.fd = fd
        self.cap = cap
        self.name: Literal["stdout", "stderr"] = name
        self.data = bytearray()
        self.total = 0
        self._listener = listener
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        os.set_blocking(fd, False)

    async def drain(self) -> None:
        """Read the pipe as it fills, until the end of file or cancellation (then the run
        calls :meth:`read_rest`)."""
        while True:
            try:
                chunk = os.read(self.fd, _READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            except OSError:
                return
            if not chunk:
                return
            await self._keep(chunk)
            if len(chunk) < _READ_CHUNK:
                # Let a program that writes line by line fill the pipe for a moment,
                # rather than wake the host for every line (see _GATHER).
                await anyio.sleep(_GATHER)

    async def _keep(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = len(chunk) if self.cap is None else self.cap - len(self.data)
        if room > 0:
            kept = chunk[:room]
            self.data += kept
            await self._tell(kept)

    async def _tell(self, data: bytes, *, final: bool = False) -> None:
        if self._listener is not None:
            text = self._decoder.decode(data, final)
            if text:
                with anyio.CancelScope(shield=True):  # told whole, or the listener raised
                    await self._listener.tell(self.name, text)

    async def read_rest(self) -> None:
        """Read what is in the pipe now, without waiting, as the last of the stream (its
        writers are gone or cannot run again)."""
        while True:
            try:
                chunk = os.read(self.fd, _READ_CHUNK)
            except OSError:  # BlockingIOError included: nothing more now
                break
            if not chunk:
                break
            await self._keep(chunk)
        await self._tell(b"", final=True)

    def captured(self) -> Output:
        text = self.data.decode("utf-8", "replace")
        return Output(text=text, truncated=self.total > len(self.data), total=self.total)


def _set_rlimits(
    pid: int,
    budget: Budget,
    *,
    in_cgroups: frozenset[str],
    access: Callable[[], contextlib.AbstractContextManager[object]],
) -> None:
    """Set the run's rlimits on its runner ``pid`` (every process it starts inherits them),
    within ``access`` (what lets this thread set them: the run's uid, on a root host),
    which a budget that asks for none (defaults, with cgroups) never enters.

    Where the run's cgroups do not limit memory or processes (``in_cgroups``: the
    controllers they have, of ``memory`` and ``pids``), two rlimits stand in (see
    :func:`sandbox._engine._levels._enforcement`): ``RLIMIT_DATA`` for ``max_memory``, per
    process, above what the runner holds now; ``RLIMIT_NPROC`` for ``max_processes``.
    Neither is raised above the runner's own hard limit (only a privileged host could).

    Raises:
        OSError: a limit could not be set.
    """
    settings: list[Callable[[], object]] = []
    max_memory = given(budget.max_memory)
    if "memory" not in in_cgroups and max_memory is not None:
        settings.append(functools.partial(_lower_data, pid, max_memory))
    if "pids" not in in_cgroups:
        max_processes = given(budget.max_processes)
        if max_processes is not None:
            settings.append(functools.partial(_lower_to, pid, resource.RLIMIT_NPROC, max_processes))
    if budget.max_cpu is not None:
        # Whole seconds, per process: only a backstop, past the point where the host's CPU
        # watcher kills the run (should the host be too starved to read the run's CPU).
        soft = math.ceil(budget.max_cpu) + 1
        settings.append(
            functools.partial(resource.prlimit, pid, resource.RLIMIT_CPU, (soft, soft + 1))
        )
    if budget.max_file_size is not None:
        size = budget.max_file_size
        settings.append(
            functools.partial(resource.prlimit, pid, resource.RLIMIT_FSIZE, (size, size))
        )
    if budget.max_open_files_per_process is not None:
        files = budget.max_open_files_per_process
        settings.append(
            functools.partial(resource.prlimit, pid, resource.RLIMIT_NOFILE, (files, files))
        )
    # (No core dumps: every child inherits RLIMIT_CORE 0 from the zygote's keeper.)
    if settings:
        with access():
            for setting in settings:
                setting()


def _lower_data(pid: int, max_memory: int) -> None:
    """``RLIMIT_DATA`` for ``max_memory`` above what ``pid`` holds now (see
    :func:`_set_rlimits`)."""
    _lower_to(pid, resource.RLIMIT_DATA, _data_held(pid) + max_memory)


def _lower_to(pid: int, which: int, limit: int) -> None:
    """Set ``pid``'s rlimit ``which`` (soft and hard) to ``limit``, or to its hard limit
    now if that is lower."""
    hard = resource.prlimit(pid, which)[1]
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.prlimit(pid, which, (limit, limit))


def _data_held(pid: int) -> int:
    """The bytes of private memory ``pid`` holds (``VmData``: what ``RLIMIT_DATA`` counts).

    Raises:
        OSError: the process is gone, or its status says nothing of it.
    """
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key == "VmData":
                return int(value.split()[0]) * 1024  # in kB
    raise OSError(errno.ESRCH, f"process {pid} has no VmData in its status")


def _too_large(
    program: str, toolset: Toolset, level: Level, argv: tuple[str, ...]
) -> RunResult | None:
    """The refusal of a program (with its bindings and argv) that no Start frame can hold,
    made before a child is: the three as JSON are a lower bound of the frame's size."""
    size = sum(len(msgspec.json.encode(part)) for part in (program, toolset.bindings(), argv))
    if size <= MAX_FRAME_BYTES:
        return None
    verdict = Verdict(
        Kind.INVALID,
        Cause.PROTOCOL,
        f"the program, its bindings and argv are {size / (1 << 20):.1f} MiB as JSON, and a "
        f"Start frame holds at most {MAX_FRAME_BYTES >> 20} MiB (MAX_FRAME_BYTES): nothing "
        "was started",
    )
    return run_result(Ending(level=level.value, wall_time=0.0, verdict=verdict))


async def run_process(
    program: str,
    toolset: Toolset,
    budget: Budget,
    level: Level,
    *,
    use_cgroups: bool,
    spawn: Spawn | Pool = Spawn.ZYGOTE,
    stack_on_timeout: bool = False,
    on_output: OnOutput | None = None,
    argv: tuple[str, ...] = (),
) -> RunResult:
    """Run ``program`` in a fresh child process under ``budget``. See the module docstring.

    ``argv`` is the program's ``sys.argv`` (empty: the runner's placeholder name alone).

    At ``confined``, the child puts up the confined level's walls (namespaces, the
    filesystem view, Landlock, seccomp) before it reads its Start. With
    ``stack_on_timeout``, a run killed at its wall clock carries the program's Python stack
    (see :mod:`sandbox._children._stack`). ``on_output`` is told the program's output as
    it comes (see :class:`_Output`).

    Raises:
        SpawnFailed: the child could not be started (nothing is left behind).
        Exception: whatever ``on_output`` raised; it stopped the run (which left nothing
            behind).
    """
    too_large = _too_large(program, toolset, level, argv)
    if too_large is not None:
        return too_large
    await REMAINS.room()  # a host that outruns its clearing waits here
    t0 = time.perf_counter()
    child = await acquire(
        spawn,
        confined=level is Level.CONFINED,
        use_cgroups=use_cgroups,
        disk_bytes=given(budget.max_disk),
        calls=len(toolset) > 0,
        program=program,
    )
    run = _Run(child, budget, level, t0, stack_wanted=stack_on_timeout, on_output=on_output)
    try:
        ending = await run.go(program, toolset, argv)
        if run.listener is not None and run.listener.error is not None:
            raise run.listener.error
        return run_result(ending)
    finally:
        if not run.finish_now():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_DEADLINE):
                await run.finish()


class _Run:
    """One process-level run, from its child's readiness to the hand-over of its remains."""

    def __init__(
        self,
        child: Child,
        budget: Budget,
        level: Level,
        t0: float,
        *,
        stack_wanted: bool,
        on_output: OnOutput | None = None,
    ) -> None:
        self.child = child
        self.process = child.process
        self.budget = budget
        self.level = level
        self.t0 = t0
        self.stack_wanted = stack_wanted
        self.cgroups = child.workspace.cgroups
        self.start_ch = FdChannel(*child.pipes.start_fds)
        self.call_ch = FdChannel(*child.pipes.call_fds)
        #: Cancelled to end the run early: at its CPU limit, when the child breaks the
        #: wire, when ``on_output`` raises.
        self.run_scope = anyio.CancelScope()
        self.listener = None if on_output is None else _Listener(on_output, self.run_scope.cancel)
        cap = given(budget.max_output)
        self.stdout = _Output(child.pipes.out_fd, cap, "stdout", self.listener)
        self.stderr = _Output(child.pipes.err_fd, cap, "stderr", self.listener)
        child.pipes.hand_over()
        self.stopped = False
        self.finished = False
        self.cpu_hit = False  # the CPU watcher ended the run
        self.tasks = False  # a task was started in the run's task group
        self.cpu: RunCpu | None = None  # the run's CPU time, with max_cpu
        self.stack: tuple[str | None, str | None] = (None, None)
        # What the host measured once the run was stopped (see stop()).
        self.measured = _Measured()

    # -- the run ------------------------------------------------------------------------

    async def go(self, program: str, toolset: Toolset, argv: tuple[str, ...]) -> Ending:
        """Make the child ready, set its limits, and run the program (or say why not)."""
        not_ready = await self.child.wait_ready()
        if not_ready is not None:
            return await self._refused(not_ready)
        try:
            self._apply_limits()
        except OSError as exc:
            raise SpawnFailed(f"cannot set the run's limits: {exc}") from exc
        return await self.drive(program, toolset, argv)

    def _apply_limits(self) -> None:
        """Set the run's limits on its cgroups and on its runner process (before Start).

        Raises:
            OSError: a limit could not be set.
        """
        budget = self.budget
        if self.cgroups is not None:
            self.cgroups.set_limits(
                memory=given(budget.max_memory), pids=given(budget.max_processes)
            )
        if self.process.pid is not None:
            held = frozenset() if self.cgroups is None else self.cgroups.controllers()
            _set_rlimits(
                self.process.pid,
                budget,
                in_cgroups=held,
                access=self.child.workspace.limits_access,  # the run's uid, on a root host
            )

    async def _refused(self, reason: str) -> Ending:
        """A child that could not be made ready: no Start was sent; its stderr and exit
        status say why (a runner that could not put up its walls exits NOT_CONFINED)."""
        await self.stop(answered=False)
        await self.process.wait_exit(_GRACE)
        await self.stderr.read_rest()
        confinement = _exit_code(self.child) == RunnerExit.NOT_CONFINED
        verdict = Verdict(
            Kind.DENIED if confinement else Kind.UNKNOWN,
            Cause.CONFINEMENT if confinement else Cause.CRASH,
            reason,
        )
        return self._ending(verdict=verdict)

    async def drive(self, program: str, toolset: Toolset, argv: tuple[str, ...] = ()) -> Ending:
        """Serve the run's calls and capture its output until it answers or is stopped."""
        budget = self.budget
        server = Server(self.call_ch, toolset.handle, budget.call_limits())
        start = Start(
            v=VERSION,
            program=program,
            bindings=toolset.bindings(),
            budget=budget.start_budget(),
            result_id=os.urandom(16).hex(),  # (what uuid4 holds, without its object)
            argv=argv,
        )
        result: Result | None = None
        verdict: Verdict | None = None
        broke_wire: list[str] = []
        run_scope = self.run_scope

        def wire_broken(exc: RemoteProtocolError) -> None:
            broke_wire.append(str(exc))
            run_scope.cancel()  # a child that breaks the wire gets no more say

        async def serve() -> None:
            try:
                await server.serve()
            except RemoteProtocolError as exc:
                wire_broken(exc)
            except anyio.BrokenResourceError:
                pass

        def pump() -> Pumped:
            try:
                return server.pump()
            except RemoteProtocolError as exc:
                wire_broken(exc)
            except anyio.BrokenResourceError:
                pass
            return Pumped.ENDED

        # One task group: the outputs' draining, the calls' serving and the CPU watcher
        # all end together once every process of the run is stopped.
        async with anyio.create_task_group() as tg:
            if budget.max_cpu is not None:
                self.cpu = RunCpu(self.cgroups, self.process.pid)
                tg.start_soon(self._watch_cpu, self.cpu, budget.max_cpu, run_scope)
                self.tasks = True
            wall_clock = given(budget.wall_clock)
            with run_scope, anyio.move_on_after(wall_clock or math.inf) as wall:
                try:
                    result = await self._await_result(start, tg, serve, pump)
                except RemoteProtocolError as exc:
                    broke_wire.append(str(exc))
                except LocalProtocolError as exc:
                    # The Start cannot be sent (larger than a frame): the child got
                    # nothing, and no retry of this run can change that.
                    verdict = Verdict(
                        Kind.INVALID, Cause.PROTOCOL, f"the run cannot be started: {exc}"
                    )
                except (ChannelClosed, anyio.BrokenResourceError):
                    pass  # decided from how the child ended
            if wall.cancelled_caught:
                verdict = Verdict(
                    Kind.LIMIT,
                    Cause.WALL_CLOCK,
                    f"wall-clock limit of {seconds(wall_clock)} reached; the run was killed",
                )
                if self.stack_wanted and self.process.pid is not None:  # before the kill
                    self.stack = await python_stack(self.process.pid)
            elif self.cpu_hit and result is None:
                verdict = Verdict(
                    Kind.LIMIT,
                    Cause.CPU,
                    f"CPU limit of {seconds(budget.max_cpu)} reached; the run was killed",
                )
            # (A listener that failed ended the run: the exit status explains nothing.)
            answered = result is not None or verdict is not None or self._listener_failed()
            if not self.stop_now(answered=answered):
                with anyio.CancelScope(shield=True):
                    await self.stop(answered=answered)
            if self.tasks:
                # (Cancelling the group cancels this task too, and takes it back: 0.1 ms
                # of a trivial run here, which starts no task at all.)
                tg.cancel_scope.cancel()
        server.close()  # (what serve does as it ends, for a server only pumped)
        # Every process of the run is dead or cannot run again: what they wrote is in the
        # pipes; read it to its end.
        await self.stdout.read_rest()
        await self.stderr.read_rest()
        answer = None
        if result is not None:
            answer = Answer(
                ok=result.ok,
                value=result.value,
                kind=result.kind,
                error=result.error,
                calls=result.calls,
                bytes=result.bytes,
            )
        return self._ending(
            answer=answer,
            verdict=verdict,
            broke_wire=broke_wire[0] if broke_wire else None,
            stats=server.statistics(),
        )

    async def _await_result(
        self,
        start: Start,
        tg: anyio.abc.TaskGroup,
        serve: Callable[[], Coroutine[Any, Any, None]],
        pump: Callable[[], Pumped],
    ) -> Result:
        """Send ``start`` and wait for its Result, starting each of the run's other tasks
        (serving calls, draining stdout and stderr) when its descriptor first has
        something to read while the start channel has nothing.

        A run that makes no call and writes nothing (most short ones) starts none of them:
        the run waits on one descriptor, an epoll instance holding all four, where three
        tasks waiting on one each, then cancelled, took 0.45 ms of the host's work per run
        here. A task, once started, reads its descriptor itself until the run ends.

        Calls are answered here as they come (``pump``: :meth:`protocol.Server.pump`),
        until one needs a task of its own: only then does the serving task start, and
        goes on from there. A run whose calls are all answered inline starts none (its
        start, then its cancellation at the run's end, took 0.25 ms of such a run here).

        Raises what :meth:`protocol.Starter.start` raises (the start channel is closed
        then).
        """
        core = StarterCore()
        channel = self.start_ch
        start_fd = self.child.pipes.start_fds[0]  # (what each channel reads from)
        call_fd = self.child.pipes.call_fds[0]
        later: dict[int, Callable[[], Coroutine[Any, Any, None]]] = {
            call_fd: serve,
            self.stdout.fd: self.stdout.drain,
            self.stderr.fd: self.stderr.drain,
        }
        try:
            await channel.send_all(core.send_start(start))
            with select.epoll(len(later) + 1) as ready:
                ready.register(start_fd, select.EPOLLIN)
                for fd in later:
                    ready.register(fd, select.EPOLLIN)
                while True:
                    item = core.next_result()
                    if item is not Signal.NEED_DATA:
                        assert isinstance(item, Result)
                        return item
                    # What is in the pipe now is read now: a trip through the event loop
                    # for each read took twice its time. A large Result is read straight
                    # into a buffer of the decoder's, a pipe-full at a time, not into a
                    # new bytes per 64 KiB. (The channel yields to the loop every few
                    # reads in a row.)
                    if await channel.feed_ready(core):
                        continue
                    await anyio.wait_readable(ready.fileno())
                    events = ready.poll(0)
                    if any(fd == start_fd for fd, _ in events):
                        # The start channel first: a runner closes its call channel
                        # right after its Result, and a task started for that end of
                        # stream would only be cancelled (0.1 ms of the host's work).
                        # The others stay registered, and are seen again if still
                        # readable once the start channel has nothing more.
                        continue
                    for fd, _ in events:
                        # (An output's task starts at once; the calls' only once pump
                        # says it must.)
                        pumped = pump() if fd == call_fd else Pumped.SERVE
                        if pumped is Pumped.WATCH:
                            continue
                        ready.unregister(fd)
                        task = later.pop(fd)
                        if pumped is Pumped.SERVE:
                            tg.start_soon(task)
                            self.tasks = True
        except BaseException:
            channel.close()
            raise

    def _ending(
        self,
        *,
        answer: Answer | None = None,
        verdict: Verdict | None = None,
        broke_wire: str | None = None,
        stats: CallStats | None = None,
    ) -> Ending:
        """Everything the host saw of the run (once it is stopped).

        Whether the run reached its memory, process or disk limit is read only where that
        can change the run's outcome: not for a program that answered it succeeded, of
        its own accord (four reads of the kernel's counters: 6% of the host's own work
        for a trivial confined run, in a sampled profile here).
        """
        stack, stack_error = self.stack
        m = self.measured
        succeeded = answer is not None and answer.ok and verdict is None and broke_wire is None
        disk_hit, memory_hit, pids_hit = (False, False, False) if succeeded else self._limits_hit()
        return Ending(
            level=self.level.value,
            wall_time=time.perf_counter() - self.t0,
            status=None if self.process.exited is None else self.process.exited.status,
            limits={
                "max_memory": given(self.budget.max_memory),
                "max_processes": given(self.budget.max_processes),
                "max_cpu": self.budget.max_cpu,
                "max_disk": given(self.budget.max_disk),
            },
            stdout=self.stdout.captured(),
            stderr=self.stderr.captured(),
            stack=stack,
            stack_error=stack_error,
            answer=answer,
            verdict=verdict,
            broke_wire=broke_wire,
            stats=stats,
            disk_hit=disk_hit,
            memory_hit=memory_hit,
            memory_per_process=self.cgroups is None and given(self.budget.max_memory) is not None,
            pids_hit=pids_hit,
            cpu_time=m.cpu_time,
            peak_memory=m.peak_memory,
        )

    def _limits_hit(self) -> tuple[bool, bool, bool]:
        """Whether the run's file system is full, and its memory and its process limits
        were reached, as its file system and cgroups say (once every process of the run
        is stopped)."""
        disk = self.child.workspace.disk_full()
        cgroups = self.cgroups
        if cgroups is None:
            return disk, False, False
        return disk, cgroups.memory_exceeded(), cgroups.pids_exceeded()

    def _listener_failed(self) -> bool:
        return self.listener is not None and self.listener.error is not None

    # -- limits --------------------------------------------------------------------------

    async def _watch_cpu(self, cpu: RunCpu, limit: float, stop: anyio.CancelScope) -> None:
        """End the run (``stop``) once its processes together have used ``limit`` CPU
        seconds (see :func:`watch_cpu`). The kill is sent here, at once, rather than once
        the run's task notices: every millisecond of a busy run is CPU time."""

        def reached() -> None:
            self.cpu_hit = True
            self._kill_now()
            stop.cancel()

        await watch_cpu(cpu.read, limit, reached)

    def _kill_now(self) -> None:
        """SIGKILL every process of the run, now (the run is over: no grace period).

        Without cgroups: the runner is stopped (it holds the run's processes in its tree,
        and may be running the program itself) and every other process of the tree last
        read is sent SIGKILL, at once; then the rest of the tree (what was forked since),
        a last read of the tree (the killed are zombies: their times are final), and the
        runner is killed.
        """
        if self.cgroups is not None:
            self.cgroups.kill_all()
            return
        pid = self.process.pid
        if pid is None or self.process.exit_seen():
            return
        self._signal_runner(signal.SIGSTOP)  # (from outside, even PID 1 of a namespace)
        for other in [] if self.cpu is None else self.cpu.tree[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(other, signal.SIGKILL)
        kill_tree(pid)  # everything the program started, while the runner holds it
        if self.cpu is not None:
            self.cpu.read()  # the final times of the killed ones, before the runner goes
        self._signal_runner(signal.SIGKILL)

    # -- the end -------------------------------------------------------------------------

    async def stop(self, *, answered: bool) -> None:
        """Make every process of the run unable to run program code again; measure.

        Idempotent. With cgroups, SIGKILL to every process of the run, and the run's
        measurements are read at once; a runner that did not answer and was not stopped
        by the host is waited for briefly, for the exit status that explains it. Without
        cgroups, the slower way of the module docstring.

        Args:
            answered: the runner sent its Result, or the host itself ended the run (its
                exit status explains nothing).
        """
        if self.stop_now(answered=answered):
            return
        self.stopped = True
        self.call_ch.close()
        if self.cgroups is None:
            await self._stop_tree(answered=answered)
        else:
            self._kill_in_cgroups()
            await self.process.wait_exit(_GRACE)
        self._measure()

    def stop_now(self, *, answered: bool) -> bool:
        """:meth:`stop`, where it never waits: with cgroups, for a run that ``answered``.
        True if the run is stopped (now, or before); False if stopping it must wait (the
        caller then awaits :meth:`stop`, shielded), where this did nothing.

        (The end of most runs: no cancel scope entered for it, where the three that
        shielded an await took 4% of the host's own work for a trivial confined run, in a
        sampled profile here.)
        """
        if not self._stops_at_once(answered=answered):
            return False
        if not self.stopped:
            self.stopped = True
            self.call_ch.close()
            self._kill_in_cgroups()
            self._measure()
        return True

    def _stops_at_once(self, *, answered: bool) -> bool:
        """Whether :meth:`stop_now` stops the run (or it is stopped already)."""
        return self.stopped or (answered and self.cgroups is not None)

    def _kill_in_cgroups(self) -> None:
        """SIGKILL to every process of the run, through its cgroups; the Start closed."""
        assert self.cgroups is not None
        # A confined run cannot leave its cgroups: its runner's kill stands in for a
        # listing where the pids controller shows that it is alone (see kill_all).
        confined = self.level is Level.CONFINED
        self.cgroups.kill_all(runner=self.process.kill_unreaped if confined else None)
        self.start_ch.close()

    def _measure(self) -> None:
        """Read what the host measures of a stopped run (its CPU time, its peak memory)."""
        cgroups = self.cgroups
        m = self.measured
        if cgroups is not None:
            m.cpu_time = cgroups.cpu_time()
            m.peak_memory = cgroups.memory_peak()
        elif self.process.exited is not None:
            exited = self.process.exited
            m.cpu_time, m.peak_memory = exited.utime + exited.stime, exited.maxrss
        if m.cpu_time is None or (self.cpu is not None and cgroups is None):
            # Without cgroups, the runner's resource usage counts only what it reaped
            # itself; the process tree's, read as the run was killed, counts the rest.
            most = None if self.cpu is None else self.cpu.most
            if most is not None and (m.cpu_time is None or most > m.cpu_time):
                m.cpu_time = most

    async def _stop_tree(self, *, answered: bool) -> None:
        """The end without cgroups: the runner holds the run's processes in its tree (at
        ``confined``, in its PID namespace)."""
        process = self.process
        pid = process.pid
        if self.level is Level.CONFINED and pid is not None:
            # PID 1 of the run's own PID namespace: when it dies, the kernel kills every
            # process of the namespace, and reaps them before PID 1 can be reaped. One
            # signal, however many processes a fork bomb made, and no tree to walk.
            self.start_ch.close()
            if not process.exit_seen():
                self._signal_runner(signal.SIGKILL)
            await process.wait_exit(_CLEANUP_DEADLINE)
            return
        if pid is not None and not process.exit_seen():
            kill_tree(pid)  # everything the program started, while the runner holds it
        self.start_ch.close()  # the runner may go now
        if pid is not None and not await process.wait_exit(_GRACE if answered else 0):
            # (PID 1 of a namespace takes from outside only the signals it handles: a
            # confined runner goes straight to SIGKILL.)
            if self.level is not Level.CONFINED:
                self._signal_runner(signal.SIGTERM)
            if self.level is Level.CONFINED or not await process.wait_exit(_GRACE):
                self._signal_runner(signal.SIGKILL)
                await process.wait_exit(_CLEANUP_DEADLINE)
        if pid is not None:
            kill_tree(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if process.exited is None and not process.zygote_lost and pid is not None:
            await process.wait_exit(_GRACE)

    def _signal_runner(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    async def finish(self) -> None:
        """Stop the run if it is not yet, close the host's ends, hand the remains over.

        Idempotent; called however the run ended (cancellation and errors included).
        """
        if self.finished:
            return
        self.finished = True
        try:
            await self.stop(answered=True)
        finally:
            self._hand_over()

    def finish_now(self) -> bool:
        """:meth:`finish`, where it never waits (see :meth:`stop_now`): True if the run is
        finished (now, or before); False if finishing must wait (the caller awaits
        :meth:`finish`), where this did nothing."""
        if self.finished:
            return True
        if not self._stops_at_once(answered=True):
            return False
        self.finished = True
        try:
            self.stop_now(answered=True)
        finally:
            self._hand_over()
        return True

    def _hand_over(self) -> None:
        """Close the host's ends of the run (stopped, or failing to be); its remains go
        to be cleared."""
        for channel in (self.start_ch, self.call_ch):
            channel.close()
        for fd in (self.stdout.fd, self.stderr.fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        REMAINS.put(self.child)
        if self.child.refill is not None:
            # The pool's replacement for this child is made now, in the background:
            # neither the fork nor the walls compete with the run.
            self.child.refill()


def _exit_code(child: Child) -> int | None:
    exited = child.process.exited
    status = None if exited is None else exited.status
    if status is None or not os.WIFEXITED(status):
        return None
    return os.WEXITSTATUS(status)


async def watch_cpu(
    read: Callable[[], float | None],
    limit: float,
    reached: Callable[[], None],
    *,
    cpus: int | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> None:
    """Call ``reached`` once ``read`` (the CPU seconds a run's processes have used
    together) is at least ``limit``; return without calling it if the counter cannot be
    read.

    The run cannot use more than one CPU second per CPU per second, so the watcher sleeps
    until the soonest moment the limit could be reached: a handful of reads in all,
    however long the run, and, read on time, the limit is met within :data:`_CPU_SLACK`
    of CPU past it. (Later only if the host itself is not scheduled on time: the runs'
    CPU share keeps them from starving it where cgroups give one, but nothing keeps a
    loaded machine from doing so.)

    ``cpus`` (the host's, by default) and ``sleep`` are there for a simulated run.
    """
    cpus = cpus or os.cpu_count() or 1
    while True:
        began = time.thread_time()
        used = read()
        if used is None:
            return
        if used >= limit:
            reached()
            return
        # A run that idles just short of its limit is read at most every
        # _CPU_SLACK / cpus seconds, and the host spends at most a tenth of its CPU
        # reading (a process tree is a pass over /proc: a millisecond or more).
        cost = time.thread_time() - began
        await sleep(max((limit - used) / cpus, _CPU_SLACK / cpus, 10 * cost))
