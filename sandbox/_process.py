"""The ``process`` level: one fresh child process per run, and its whole life.

Theory of operation
-------------------
Spawning (synchronous, before anything untrusted runs):

* four pipes for the two channels and two for stdout/stderr; the child inherits exactly
  those (``close_fds``), and ``/dev/null`` as stdin;
* ``python -I -S`` (no site, no environment variables honoured) with an explicit
  ``sys.path``, a scrubbed environment, a private temporary working directory, its own
  session (``start_new_session``);
* the runner sets ``PDEATHSIG`` (it dies with the host) and becomes a subreaper;
* before the Start is sent, the parent puts the child in the run's cgroups (when the host
  allows) and sets its rlimits with ``prlimit``: the runner runs no program code before
  it has its Start, so nothing untrusted ever runs unconfined.

The run: the Server answers calls, two tasks drain stdout and stderr into capped buffers,
and the Starter waits for the Result, all under the wall clock.

The end, however the run ended (see :mod:`sandbox._reaper`), shielded from cancellation
with its own deadline, so that cancelling the host's task always waits for the child to be
reaped: close both channels (the protocol's cancel signal), give the runner a short grace
to exit, SIGTERM, grace, SIGKILL, then kill everything in the run's cgroup (or process
tree), reap it all, remove the cgroups and the working directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio
import anyio.abc
import msgspec
import psutil

from protocol import (
    VERSION,
    ChannelClosed,
    FdChannel,
    Kind,
    RemoteProtocolError,
    Result,
    Server,
    Start,
    StartBudget,
    Starter,
)

from ._budget import Budget
from ._errors import SpawnFailed
from ._reaper import (
    CgroupSet,
    become_subreaper,
    dead_children,
    kill_tree,
    reap,
    session_zombies,
)
from ._result import RunResult
from ._tools import Toolset

__all__ = ["run_process"]

_ROOT: Final = Path(__file__).resolve().parent.parent
_MSGSPEC_DIR: Final = Path(msgspec.__file__).resolve().parent.parent
#: How long a runner that has sent its Result (or been told to stop) gets to exit by
#: itself, and again after SIGTERM, before SIGKILL. Short: a runner that has answered has
#: nothing left to do, and one that has not answered gets no say.
_GRACE: Final = 0.5
#: The longest the end of a run may take (killing, reaping, removing); it is shielded from
#: cancellation, so it needs a deadline of its own.
_CLEANUP_DEADLINE: Final = 10.0
#: The call channel's pipe buffers: large enough for a big result to move in few reads.
_PIPE_BYTES: Final = 1 << 20
#: The runner's exit status when it could not put up the confined level's walls.
_EXIT_NOT_CONFINED: Final = 4
_BOOT: Final = "import sys; sys.path[:0] = {paths!r}; from runner._main import main; main()"


def _scrubbed_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }


@dataclass
class _Output:
    """A capped capture of one output stream."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    async def drain(self, channel: FdChannel) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            while True:
                chunk = await channel.receive()
                if not chunk:
                    return
                self.total += len(chunk)
                room = self.cap - len(self.data)
                if room > 0:
                    self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


def _set_rlimits(pid: int, budget: Budget) -> None:
    if budget.max_cpu is not None:
        soft = math.ceil(budget.max_cpu)
        resource.prlimit(pid, resource.RLIMIT_CPU, (soft, soft + 1))
    if budget.max_file_size is not None:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (budget.max_file_size,) * 2)
    if budget.max_open_files is not None:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (budget.max_open_files,) * 2)
    # A core dump of a killed program is host disk the program did not ask for.
    resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))


def _undo_setup(pipes: list[int], cgroups: CgroupSet | None, workdir: str) -> None:
    """Remove what a run made before its child existed (the spawn failed)."""
    for fd in pipes:
        os.close(fd)
    if cgroups is not None:
        cgroups.remove()
    shutil.rmtree(workdir, ignore_errors=True)


def _confine_argument(workdir: str) -> list[str]:
    """The runner's ``--confine`` option: what the confined level's view must hold."""
    request = {
        "workdir": workdir,
        "import_paths": [
            str(_ROOT / "protocol"),
            str(_ROOT / "runner"),
            str(_MSGSPEC_DIR / "msgspec"),
        ],
    }
    return ["--confine", msgspec.json.encode(request).decode()]


async def run_process(
    program: str, toolset: Toolset, budget: Budget, *, use_cgroups: bool, confined: bool = False
) -> RunResult:
    """Run ``program`` in a fresh child process under ``budget``. See the module docstring.

    With ``confined``, the runner puts up the confined level's walls (namespaces, the
    filesystem view, Landlock, seccomp) after its Start arrives and before the program runs.

    Raises:
        SpawnFailed: the child could not be started (nothing is left behind).
    """
    become_subreaper()
    t0 = time.perf_counter()
    run_id = uuid.uuid4().hex[:16]
    workdir = tempfile.mkdtemp(prefix="sandbox-run-")
    cgroups: CgroupSet | None = None
    pipes: list[int] = []
    try:
        if use_cgroups:
            cgroups = CgroupSet.create(
                f"run-{run_id}", memory=budget.max_memory, pids=budget.max_processes
            )
        for _ in range(6):
            pipes.extend(os.pipe())
    except OSError as exc:
        _undo_setup(pipes, cgroups, workdir)
        raise SpawnFailed(f"cannot prepare the run: {exc}") from exc
    # (read, write) pairs: start down/up, call down/up, stdout, stderr.
    sd_r, sd_w, su_r, su_w, cd_r, cd_w, cu_r, cu_w, out_r, out_w, err_r, err_w = pipes
    for fd in (cd_w, cu_w):
        # A 1 MiB pipe moves a large result in 16 reads, not 256 (PERF-NOTES: bulk
        # transfer 1.2-1.3x faster); best effort, as pipe-max-size may forbid it.
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    child_fds = (sd_r, su_w, cd_r, cu_w)
    argv = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _BOOT.format(paths=[str(_ROOT), str(_MSGSPEC_DIR)]),
        *map(str, child_fds),
        *(_confine_argument(workdir) if confined else ()),
    ]
    try:
        # Synchronous on purpose: Popen spawns with vfork in well under a millisecond of
        # the event loop's time, where an async spawn would add a thread or a watcher.
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv,
            pass_fds=child_fds,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            cwd=workdir,
            env=_scrubbed_env(workdir),
            start_new_session=True,
        )
    except OSError as exc:
        _undo_setup(pipes, cgroups, workdir)
        raise SpawnFailed(f"cannot start the runner: {exc}") from exc
    for fd in (*child_fds, out_w, err_w):
        os.close(fd)
    start_ch = FdChannel(su_r, sd_w)
    call_ch = FdChannel(cu_r, cd_w)
    out_ch = FdChannel(out_r, out_r)
    err_ch = FdChannel(err_r, err_r)
    run = _Run(proc, cgroups, workdir, budget, t0, start_ch, "confined" if confined else "process")
    try:
        try:
            if cgroups is not None:
                cgroups.add(proc.pid)
            _set_rlimits(proc.pid, budget)
        except OSError as exc:
            raise SpawnFailed(f"cannot confine the runner: {exc}") from exc
        return await run.drive(program, toolset, start_ch, call_ch, out_ch, err_ch)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_DEADLINE):
            call_ch.close()
            await run.end()  # closes the start channel at the right moment
            for ch in (out_ch, err_ch):
                ch.close()


class _Run:
    """The state of one process-level run, from spawn to reaping."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        cgroups: CgroupSet | None,
        workdir: str,
        budget: Budget,
        t0: float,
        start_ch: FdChannel,
        level: str,
    ) -> None:
        self.level = level
        self.proc = proc
        self.start_ch = start_ch
        self.cgroups = cgroups
        self.workdir = workdir
        self.budget = budget
        self.t0 = t0
        self.pidfd = os.pidfd_open(proc.pid)
        self.status: int | None = None
        self.rusage: resource.struct_rusage | None = None
        self.ended = False
        self.memory_hit = False
        self.pids_hit = False
        self.peak_memory: int | None = None

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
        server = Server(
            call_ch,
            toolset.handle,
            max_calls=budget.max_calls,
            max_bytes=budget.max_bytes,
            max_inflight=budget.max_inflight,
            max_call_deadline=budget.max_call_deadline,
        )
        stdout = _Output(budget.max_output)
        stderr = _Output(budget.max_output)
        start = Start(
            v=VERSION,
            program=program,
            bindings=toolset.bindings(),
            budget=StartBudget(
                wall_clock=0 if budget.wall_clock is None else int(budget.wall_clock * 1e9),
                max_calls=budget.max_calls,
                max_bytes=budget.max_bytes,
                max_memory=budget.max_memory or 0,
            ),
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
            with run_scope, anyio.move_on_after(budget.wall_clock or math.inf) as wall:
                try:
                    result = await Starter(start_ch).start(start)
                except RemoteProtocolError as exc:
                    failure = (Kind.UNKNOWN, "protocol", f"the child broke the protocol: {exc}")
                except (ChannelClosed, anyio.BrokenResourceError):
                    failure = None  # decided below, once we know how the child ended
            if wall.cancelled_caught:
                failure = (
                    Kind.LIMIT,
                    "wall_clock",
                    f"wall-clock limit of {budget.wall_clock} s reached; the run was killed",
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
            level=self.level,
        )
        replace = msgspec.structs.replace
        if failure is not None:
            kind, cause, error = failure
            return replace(base, kind=kind, cause=cause, error=error)
        assert result is not None
        if not result.ok:
            kind = result.kind or Kind.UNKNOWN
            cause = "memory" if kind is Kind.LIMIT and self.memory_hit else "program"
            if self._exit_code() == _EXIT_NOT_CONFINED:
                cause = "confinement"
            return replace(base, kind=kind, cause=cause, error=result.error)
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

    def _kill_all(self, spare: frozenset[int]) -> set[int]:
        if self.cgroups is not None:
            return self.cgroups.kill_all(spare=spare)
        found = kill_tree(self.proc.pid) if self.status is None else set()
        if not spare:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return found

    def _runner_pids(self) -> frozenset[int]:
        """The runner's own processes: its pid, and when confined, PID 1 of its namespace.

        A confined runner forks once as it enters its namespaces; the process the host
        started waits outside for PID 1, and PID 1 is what runs the program.
        """
        pid = self.proc.pid
        if self.level != "confined":
            return frozenset({pid})
        try:
            return frozenset({pid, *(kid.pid for kid in psutil.Process(pid).children())})
        except psutil.Error:
            return frozenset({pid})

    def _exit_code(self) -> int | None:
        if self.status is None or not os.WIFEXITED(self.status):
            return None
        return os.WEXITSTATUS(self.status)

    def _signal(self) -> int | None:
        if self.status is None or not os.WIFSIGNALED(self.status):
            return None
        return os.WTERMSIG(self.status)

    def _cpu_time(self) -> float | None:
        if self.rusage is None:
            return None
        return self.rusage.ru_utime + self.rusage.ru_stime

    async def _wait_exit(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the runner to exit; reap it. Returns whether it did."""
        if self.status is not None:
            return True
        with anyio.move_on_after(seconds):
            await anyio.wait_readable(self.pidfd)  # readable once the process has exited
        pid, status, rusage = os.wait4(self.proc.pid, os.WNOHANG)  # noqa: ASYNC222 (never blocks)
        if pid == 0:
            return False
        self.status = status
        self.rusage = rusage
        self.proc.returncode = (
            -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        )
        return True

    async def end(self, *, answered: bool = False) -> None:
        """Kill and reap everything the run started; remove what it made. Idempotent.

        Args:
            answered: the runner sent its Result, so it is given a grace period to exit by
                itself; otherwise it is sent SIGTERM at once.
        """
        if self.ended:
            return
        self.ended = True
        pid = self.proc.pid
        try:
            # 1. Everything the program started dies at once, counted while the runner
            #    (a subreaper) still holds the tree together.
            found = self._kill_all(spare=self._runner_pids())
            if self.status is None and self.level != "confined":
                # (In a PID namespace, PID 1 inherits the orphans and the kernel reaps
                # them all when it exits.)
                found |= dead_children(pid)
            self.start_ch.close()  # the runner may go now
            # 2. The runner: after a Result it exits by itself once it reads EOF on the
            #    start channel (closed just now); otherwise, or if something holds it up
            #    (threads the program left running), SIGTERM, a grace period, SIGKILL.
            if not await self._wait_exit(_GRACE if answered else 0):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                if not await self._wait_exit(_GRACE):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    await self._wait_exit(_CLEANUP_DEADLINE)
            # 3. Anything started while the runner was being stopped, then reap it all.
            found |= self._kill_all(spare=frozenset())
            found |= session_zombies(pid)
            found.discard(pid)
            reap(found)
        finally:
            os.close(self.pidfd)
            if self.cgroups is not None:
                self.memory_hit = self.cgroups.memory_exceeded()
                self.pids_hit = self.cgroups.pids_exceeded()
                self.peak_memory = self.cgroups.memory_peak()
                self.cgroups.remove()
            elif self.rusage is not None:
                self.peak_memory = self.rusage.ru_maxrss * 1024
            shutil.rmtree(self.workdir, ignore_errors=True)
