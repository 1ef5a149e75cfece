"""The ``process`` and ``confined`` levels: one fresh child process per run, and its life.

Theory of operation
-------------------
The child comes from the zygote (:mod:`sandbox._supervisor`: cold, warm, or from a pool),
already in the run's cgroups, in its own session, with a scrubbed environment and a private
working directory, and, for ``confined``, behind its walls. It has run nothing of the run
yet: it waits for its Start. Before sending it, the host sets the run's limits on its
cgroups and, with ``prlimit``, on its process (CPU, file size, open files, no core dumps).

The run: the Server answers calls, two tasks drain stdout and stderr into capped buffers,
and the Starter waits for the Result, all under the wall clock.

The end, however the run ended (see :mod:`sandbox._reaper`), shielded from cancellation
with its own deadline, so that cancelling the host's task always waits for the child to be
gone: kill everything in the run's cgroup (or the runner's process tree) but the runner,
close the start channel (after a Result the runner then exits by itself), SIGTERM, a grace
period, SIGKILL (a confined runner, PID 1 of its namespace, straight to SIGKILL), kill
whatever is left, and wait for the zygote's report that it has reaped the runner (it reaps
everything the run left under it in the same pass); then remove the cgroups and the
working directory.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import Final

import anyio
import anyio.abc
import msgspec

from protocol import (
    MAX_FRAME_BYTES,
    VERSION,
    ChannelClosed,
    FdChannel,
    Kind,
    LocalProtocolError,
    RemoteProtocolError,
    Result,
    RunnerExit,
    Server,
    Start,
    Starter,
)

from .._budget import Budget, given
from .._children import CgroupSet, Child, Pool, Spawn, acquire, kill_tree, python_stack
from .._errors import SpawnFailed
from .._result import RunResult, program_failure
from ._levels import Level
from ._tools import Toolset

__all__ = ["run_process"]

#: How long a runner that has sent its Result (or been told to stop) gets to exit by
#: itself, and again after SIGTERM, before SIGKILL. Short: a runner that has answered has
#: nothing left to do, and one that has not answered gets no say.
_GRACE: Final = 0.5
#: The longest the end of a run may take (killing, reaping, removing); it is shielded from
#: cancellation, so it needs a deadline of its own.
_CLEANUP_DEADLINE: Final = 10.0
#: CPU time (all CPUs together) the run may use past ``max_cpu`` before it is killed: the
#: CPU watcher's shortest sleep, times the number of CPUs.
_CPU_SLACK: Final = 0.02


@dataclass
class _Output:
    """A capped capture of one output stream (``cap`` None: all of it)."""

    cap: int | None
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    async def drain(self, channel: FdChannel) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            while True:
                chunk = await channel.receive()
                if not chunk:
                    return
                self.total += len(chunk)
                room = len(chunk) if self.cap is None else self.cap - len(self.data)
                if room > 0:
                    self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


def _set_rlimits(pid: int, budget: Budget, *, cpu_watched: bool) -> None:
    if budget.max_cpu is not None:
        # Whole seconds, per process: the limit itself where the run's CPU time cannot be
        # watched; else only a backstop, past the point where the watcher kills the run.
        soft = math.ceil(budget.max_cpu) + (1 if cpu_watched else 0)
        resource.prlimit(pid, resource.RLIMIT_CPU, (soft, soft + 1))
    if budget.max_file_size is not None:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (budget.max_file_size,) * 2)
    if budget.max_open_files_per_process is not None:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (budget.max_open_files_per_process,) * 2)
    # A core dump of a killed program is host disk the program did not ask for.
    resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))


def _too_large(program: str, toolset: Toolset, level: Level) -> RunResult | None:
    """The refusal of a program (with its bindings) that no Start frame can hold, made
    before a child is: the program as JSON is a lower bound of the frame's size."""
    size = len(msgspec.json.encode(program)) + len(msgspec.json.encode(toolset.bindings()))
    if size <= MAX_FRAME_BYTES:
        return None
    return RunResult(
        ok=False,
        kind=Kind.INVALID,
        cause="protocol",
        error=f"the program and its bindings are {size / (1 << 20):.1f} MiB as JSON, and a "
        f"Start frame holds at most {MAX_FRAME_BYTES >> 20} MiB (MAX_FRAME_BYTES): nothing "
        "was started",
        level=level.value,
    )


async def run_process(
    program: str,
    toolset: Toolset,
    budget: Budget,
    level: Level,
    *,
    use_cgroups: bool,
    spawn: Spawn | Pool = Spawn.ZYGOTE,
    stack_on_timeout: bool = False,
) -> RunResult:
    """Run ``program`` in a fresh child process under ``budget``. See the module docstring.

    At ``confined``, the child puts up the confined level's walls (namespaces, the
    filesystem view, Landlock, seccomp) before it reads its Start. With
    ``stack_on_timeout``, a run killed at its wall clock carries the program's Python stack
    (see :mod:`sandbox._stack`).

    Raises:
        SpawnFailed: the child could not be started (nothing is left behind).
    """
    too_large = _too_large(program, toolset, level)
    if too_large is not None:
        return too_large
    t0 = time.perf_counter()
    child = await acquire(
        spawn,
        confined=level is Level.CONFINED,
        use_cgroups=use_cgroups,
        disk_bytes=given(budget.max_disk),
    )
    start_ch = FdChannel(*child.start_fds)
    call_ch = FdChannel(*child.call_fds)
    out_ch = FdChannel(child.out_fd, child.out_fd)
    err_ch = FdChannel(child.err_fd, child.err_fd)
    child.hand_over()
    run = _Run(child, budget, t0, start_ch, level)
    run.stack_wanted = stack_on_timeout
    try:
        not_ready = await child.wait_ready()
        if not_ready is not None:
            return await run.refused(not_ready, out_ch, err_ch)
        try:
            with child.limits_access():  # the run's own uid, on a root host
                run.apply_limits()
        except OSError as exc:
            raise SpawnFailed(f"cannot set the run's limits: {exc}") from exc
        return await run.drive(program, toolset, start_ch, call_ch, out_ch, err_ch)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_DEADLINE):
            call_ch.close()
            await run.end()  # closes the start channel at the right moment
            for ch in (out_ch, err_ch):
                ch.close()
        if child.refill is not None:
            # The pool's replacement for this child is made once the run is over, in the
            # background: neither the fork nor the walls compete with the run.
            child.refill()


async def _until_empty(cgroups: CgroupSet, seconds: float) -> None:
    """Poll (there is nothing to wait on in cgroup v1) until ``cgroups`` hold no process."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not cgroups.pids():
            return
        await anyio.sleep(0.001)


class _Run:
    """The state of one process-level run, from its child's request to its reaping."""

    def __init__(
        self, child: Child, budget: Budget, t0: float, start_ch: FdChannel, level: Level
    ) -> None:
        self.level = level
        self.child = child
        self.start_ch = start_ch
        self.cgroups = child.cgroups
        self.budget = budget
        self.t0 = t0
        self.ended = False
        self.memory_hit = False
        self.pids_hit = False
        self.disk_hit = False  # the run's own file system was full when it ended
        self.peak_memory: int | None = None
        self.stack_wanted = False
        self.cpu_hit = False  # the CPU watcher ended the run
        self.cpu_used: float | None = None  # the run's CPU time, from its cgroup
        self.stack: str | None = None
        self.stack_error: str | None = None

    @property
    def status(self) -> int | None:
        exited = self.child.exited
        return None if exited is None else exited.status

    def apply_limits(self) -> None:
        """Set the run's limits on its cgroups and on every process it has (before Start).

        Raises:
            OSError: a limit could not be set.
        """
        budget = self.budget
        if self.cgroups is not None:
            self.cgroups.set_limits(memory=budget.max_memory, pids=given(budget.max_processes))
        for pid in self._runner_pids():
            _set_rlimits(pid, budget, cpu_watched=self._cpu_watched())

    async def refused(self, reason: str, out_ch: FdChannel, err_ch: FdChannel) -> RunResult:
        """The result of a run whose child could not be made ready (no Start was sent)."""
        await self.end()
        stderr = _Output(given(self.budget.max_output))
        with anyio.move_on_after(_GRACE):
            await stderr.drain(err_ch)
        confinement = self._exit_code() == RunnerExit.NOT_CONFINED
        return RunResult(
            ok=False,
            kind=Kind.DENIED if confinement else Kind.UNKNOWN,
            cause="confinement" if confinement else "crash",
            error=reason,
            stderr=stderr.text(),
            stderr_truncated=stderr.truncated,
            stderr_bytes=stderr.total,
            wall_time=time.perf_counter() - self.t0,
            exit_code=self._exit_code(),
            signal=self._signal(),
            level=self.level.value,
        )

    async def drive(
        self,
        program: str,
        toolset: Toolset,
        start_ch: FdChannel,
        call_ch: FdChannel,
        out_ch: FdChannel,
        err_ch: FdChannel,
    ) -> RunResult:
        budget = self.budget
        server = Server(call_ch, toolset.handle, budget.call_limits())
        stdout = _Output(given(budget.max_output))
        stderr = _Output(given(budget.max_output))
        start = Start(
            v=VERSION,
            program=program,
            bindings=toolset.bindings(),
            budget=budget.start_budget(),
            result_id=uuid.uuid4().hex,
        )
        result: Result | None = None
        failure: tuple[Kind, str, str] | None = None  # kind, cause, error
        server_error: Exception | None = None

        run_scope = anyio.CancelScope()

        async def serve() -> None:
            nonlocal server_error
            try:
                await server.serve()
            except RemoteProtocolError as exc:
                server_error = exc
                run_scope.cancel()  # a child that breaks the wire gets no more say
            except anyio.BrokenResourceError as exc:
                server_error = exc

        drained = anyio.Event()
        pending_drains = 2

        async def drain(output: _Output, channel: FdChannel) -> None:
            nonlocal pending_drains
            await output.drain(channel)
            pending_drains -= 1
            if not pending_drains:
                drained.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, stdout, out_ch)
            tg.start_soon(drain, stderr, err_ch)
            tg.start_soon(serve)
            if budget.max_cpu is not None and self._cpu_watched():
                tg.start_soon(self.watch_cpu, budget.max_cpu, run_scope)
            wall_clock = given(budget.wall_clock)
            with run_scope, anyio.move_on_after(wall_clock or math.inf) as wall:
                try:
                    result = await Starter(start_ch).start(start)
                except RemoteProtocolError as exc:
                    failure = (Kind.UNKNOWN, "protocol", f"the child broke the protocol: {exc}")
                except LocalProtocolError as exc:
                    # The Start cannot be sent (larger than a frame; a Budget never holds
                    # what the wire cannot carry): the child got nothing, and no retry of
                    # this run can change that.
                    failure = (Kind.INVALID, "protocol", f"the run cannot be started: {exc}")
                except (ChannelClosed, anyio.BrokenResourceError):
                    failure = None  # decided below, once we know how the child ended
            if wall.cancelled_caught:
                failure = (
                    Kind.LIMIT,
                    "wall_clock",
                    f"wall-clock limit of {wall_clock} s reached; the run was killed",
                )
                if self.stack_wanted:
                    self.stack, self.stack_error = await python_stack(self._program_pid())
            elif self.cpu_hit and result is None:
                failure = (
                    Kind.LIMIT,
                    "cpu",
                    f"CPU limit of {budget.max_cpu} s reached; the run was killed",
                )
            # The run is over: stop everything, then let the drains see EOF.
            call_ch.close()
            with anyio.CancelScope(shield=True):
                await self.end(answered=result is not None)
            # Every process of the run is dead, so the output pipes are at EOF unless
            # something outside the run holds them; do not wait on that for long.
            with anyio.move_on_after(_GRACE):
                await drained.wait()
            tg.cancel_scope.cancel()

        stats = server.statistics()
        if failure is None and isinstance(server_error, RemoteProtocolError):
            failure = (Kind.UNKNOWN, "protocol", f"the child broke the protocol: {server_error}")
        if failure is None and result is None:
            failure = self._explain_death()
        base = RunResult(
            ok=False,
            stdout=stdout.text(),
            stderr=stderr.text(),
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr.truncated,
            stdout_bytes=stdout.total,
            stderr_bytes=stderr.total,
            calls=stats.calls,
            bytes=stats.bytes,
            reported_calls=None if result is None else result.calls,
            reported_bytes=None if result is None else result.bytes,
            wall_time=time.perf_counter() - self.t0,
            cpu_time=self._cpu_time(),
            peak_memory=self.peak_memory,
            exit_code=self._exit_code(),
            signal=self._signal(),
            level=self.level.value,
            stack=self.stack,
            stack_error=self.stack_error,
        )
        replace = msgspec.structs.replace
        if failure is not None:
            kind, cause, error = failure
            return replace(base, kind=kind, cause=cause, error=error)
        assert result is not None
        if not result.ok:
            limit_seen = stats.limited > 0 or self.memory_hit or self.pids_hit
            fields = program_failure(result.kind, result.error, result.value, limit_seen=limit_seen)
            if fields["kind"] is Kind.LIMIT and self.memory_hit:
                fields["cause"] = "memory"
            if self._exit_code() == RunnerExit.NOT_CONFINED:
                fields["cause"] = "confinement"
            if self.disk_hit and fields["kind"] in (Kind.RAISED, Kind.UNKNOWN):
                # Decided here, from the host's own look at the run's file system (what
                # the program raised, ENOSPC or any other, is only its word).
                fields.update(
                    kind=Kind.LIMIT,
                    cause="disk",
                    error=f"the run's file system (max_disk: {self.budget.max_disk} bytes) "
                    f"was full when the program failed:\n{fields['error']}",
                )
            return replace(base, **fields)
        try:
            value = msgspec.json.decode(result.value) if result.value else None
        except msgspec.DecodeError:
            return replace(
                base,
                kind=Kind.UNKNOWN,
                cause="protocol",
                error="the child's Result value is not JSON",
            )
        return replace(base, ok=True, value=value)

    def _explain_death(self) -> tuple[Kind, str, str]:
        sig = self._signal()
        code = self._exit_code()
        how = f"signal {signal.Signals(sig).name}" if sig else f"exit code {code}"
        if self.memory_hit:
            return (
                Kind.LIMIT,
                "memory",
                f"memory limit of {self.budget.max_memory} bytes reached; the run was killed",
            )
        if self.pids_hit:
            return (
                Kind.LIMIT,
                "processes",
                f"process limit of {self.budget.max_processes} reached, and the runner ended "
                f"({how}) without sending a Result",
            )
        if sig in (signal.SIGXCPU, signal.SIGKILL) and self.budget.max_cpu is not None:
            cpu = self._cpu_time()
            if sig == signal.SIGXCPU or (cpu is not None and cpu >= self.budget.max_cpu):
                return (
                    Kind.LIMIT,
                    "cpu",
                    f"CPU limit of {self.budget.max_cpu} s reached; the run was killed",
                )
        return (Kind.UNKNOWN, "crash", f"the runner ended ({how}) without sending a Result")

    def _kill_all(self, spare: frozenset[int]) -> None:
        if self.cgroups is not None:
            self.cgroups.kill_all(spare=spare)
            return
        pid = self.child.pid
        if pid is not None and not self.child.exit_seen():
            kill_tree(pid)
        if not spare and pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def _runner_pids(self) -> frozenset[int]:
        """The runner's own process (for a confined run: PID 1 of its namespace)."""
        pid = self.child.pid
        return frozenset() if pid is None else frozenset({pid})

    def _program_pid(self) -> int:
        """The process that runs the program."""
        pid = self.child.pid
        assert pid is not None  # the run has started
        return pid

    def _exit_code(self) -> int | None:
        if self.status is None or not os.WIFEXITED(self.status):
            return None
        return os.WEXITSTATUS(self.status)

    def _signal(self) -> int | None:
        if self.status is None or not os.WIFSIGNALED(self.status):
            return None
        return os.WTERMSIG(self.status)

    def _cpu_watched(self) -> bool:
        """Whether the run's CPU time, all its processes together, can be read as it runs."""
        return self.cgroups is not None and "cpuacct" in self.cgroups.dirs

    def _cpu_time(self) -> float | None:
        if self.cpu_used is not None:
            return self.cpu_used
        exited = self.child.exited
        return None if exited is None else exited.utime + exited.stime

    async def watch_cpu(self, limit: float, stop: anyio.CancelScope) -> None:
        """End the run (``stop``) once its processes together have used ``limit`` CPU
        seconds.

        The run cannot use more than one CPU second per CPU per second, so the watcher
        sleeps until the soonest moment the limit could be reached: a handful of reads of
        the cgroup's counter in all, however long the run, and the kill lands within
        :data:`_CPU_SLACK` of CPU time past the limit (more only if the host itself is
        starved: the runs' CPU share keeps it from being).
        """
        assert self.cgroups is not None
        cpus = os.cpu_count() or 1
        while True:
            used = self.cgroups.cpu_time()
            if used is None:
                return
            if used >= limit:
                self.cpu_hit = True
                stop.cancel()
                return
            await anyio.sleep(max((limit - used) / cpus, _CPU_SLACK / cpus))

    def _signal_runner(self, sig: signal.Signals) -> None:
        if self.child.pidfd is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self.child.pidfd, sig)

    async def end(self, *, answered: bool = False) -> None:
        """Kill everything the run started, wait for the runner; remove what it made.

        Idempotent. The zygote reaps the runner and whatever the run left under it.

        Args:
            answered: the runner sent its Result, so it is given a grace period to exit by
                itself; otherwise it is sent SIGTERM at once.
        """
        if self.ended:
            return
        self.ended = True
        child = self.child
        try:
            # 1. Everything the program started dies at once, while the runner (their
            #    subreaper) still holds the tree together. A run that did not answer gets
            #    no more say: with cgroups, which find every process of the run whatever
            #    its parent, the runner goes in the same pass.
            spare = frozenset() if not answered and self.cgroups else self._runner_pids()
            self._kill_all(spare=spare)
            self.start_ch.close()  # the runner may go now
            # 2. The runner: after a Result it exits by itself once it reads EOF on the
            #    start channel (closed just now); otherwise, or if something holds it up
            #    (threads the program left running), SIGTERM, a grace period, SIGKILL.
            if child.pid is not None and not await child.wait_exit(_GRACE if answered else 0):
                # (PID 1 of a namespace takes from outside only the signals it handles:
                # a confined runner goes straight to SIGKILL.)
                if self.level is not Level.CONFINED:
                    self._signal_runner(signal.SIGTERM)
                if self.level is Level.CONFINED or not await child.wait_exit(_GRACE):
                    self._signal_runner(signal.SIGKILL)
                    await child.wait_exit(_CLEANUP_DEADLINE)
            # 3. Anything started while the runner was being stopped.
            self._kill_all(spare=frozenset())
            if child.exited is None and not child.zygote_lost and child.pid is not None:
                # The zygote reports the status right after it reaps: worth a short wait.
                await child.wait_exit(_GRACE)
            # 4. With cgroups, every process of the run is listed until it is reaped: the
            #    run is over once none is (a process that outlived the runner by a moment,
            #    killed in the same pass, is reaped by the zygote a moment later).
            if self.cgroups is not None:
                await _until_empty(self.cgroups, _CLEANUP_DEADLINE)
        finally:
            if self.cgroups is not None:
                self.cpu_used = self.cgroups.cpu_time()
                self.memory_hit = self.cgroups.memory_exceeded()
                self.pids_hit = self.cgroups.pids_exceeded()
                self.peak_memory = self.cgroups.memory_peak()
            elif child.exited is not None:
                self.peak_memory = child.exited.maxrss
            self.disk_hit = child.disk_full()
            child.release()
