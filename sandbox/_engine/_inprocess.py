"""The ``in_process`` level: no wall at all, for trusted code and as the overhead baseline.

The program runs in a worker thread of the host process, with the runner's own Python
backend (so its value, its ``host`` object, its failures are exactly the ``process``
level's). Its host calls go through the same pair of roles as at every level, the
parent's :class:`~protocol.Server` and the child's :class:`~protocol.Client`, over a pipe
inside the host process: the call budgets (calls, bytes, in-flight cap, call deadline)
behave exactly as they do across processes. What is left out is the process, and with it
everything only a process boundary can give, so this level refuses those budget items:
the wall clock (a thread cannot be killed), memory, CPU, files and processes. It does not
capture output (the program prints to the host's own stdout and stderr), and cancelling
the host's task waits for the program to finish. The program shares the host's ``sys``:
its ``sys.argv`` is the host's, left alone (a run that set it would change it for the
host and for every run beside it), so a run's ``argv`` only names the program in its
tracebacks.

Theory of operation
-------------------
The host's own work per run is what this level measures, so it is kept to one wake-up
of the event loop and no task spawned. The calling task serves the call channel itself
while a worker thread (:class:`_Workers`, daemon threads reused across runs) runs the
program. The thread records the outcome and *then* closes the program's ends of the
pipes, so the server reads EOF and returns: that EOF is the only signal the event loop
waits for, and the outcome is in place when it arrives. The calling task waits for the
pipe to be readable before it serves at all: if the outcome is in by then and the pipe
holds nothing (a program that made no call), there is nothing to serve, and the server,
its task group and its reads are skipped. (``anyio.to_thread`` would wake
the loop a second time, with its own future, and needs a task beside the server: about
a tenth of a millisecond per run here.) Should the server stop first (the caller
cancels, or the program closed the pipes itself), the host waits for the thread,
shielded from cancellation, as ``anyio.to_thread.run_sync`` does.

A program given no tool can make no call, so it gets no call channel at all: its ``host``
has no tools and needs no client, and the thread says that it is done through an
eventfd, which the calling task waits for instead of the pipe (the two pipes, the server
and the client cost about 26 µs a run, and the run as a whole took 0.13-0.20 ms p50
without them against 0.23-0.26 with them, here).

The worker runs the program in a copy of the caller's context, with no async library
current (as anyio's worker threads do), so a program that starts an event loop of its
own sees none of the host's.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
import queue
import sys
import termios
import threading
import time
from collections.abc import Callable
from typing import Final, final

import anyio
import anyio.to_thread

from protocol import VERSION, CallStats, Client, FdChannel, Server, Start
from runner import Outcome, PythonBackend

from .._budget import Budget
from .._result import Answer, Ending, RunResult, run_result
from ._levels import Level
from ._tools import Toolset

__all__ = ["run_in_process"]

#: Seconds an idle worker thread waits for another program before it ends: long enough
#: that back-to-back runs reuse it, short enough that a burst leaves no threads behind.
#: (anyio's and trio's own worker threads wait 10 s as well.)
_IDLE_SECONDS: Final = 10.0


def _sniffio_library() -> contextvars.ContextVar[str | None] | None:
    """sniffio's "current async library", which anyio's worker threads clear (None when
    sniffio, optional for anyio, is not installed: then nothing reads it either)."""
    try:
        import sniffio
    except ImportError:  # pragma: no cover - installed wherever the tests run
        return None
    return sniffio.current_async_library_cvar


_ASYNC_LIBRARY: Final = _sniffio_library()


@final
class _Workers:
    """Daemon threads that run jobs, reused: a handoff to an idle thread costs a queue put,
    a new thread about ten times as much. A thread idle for :data:`_IDLE_SECONDS` ends.

    Invariant: ``_idle`` counts the threads waiting for a job that no submitter has
    claimed; a submitter claims one (or starts a thread) for each job it queues.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Callable[[], object]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, job: Callable[[], object], last: Callable[[], object]) -> None:
        """Run ``job``, then ``last``, in a worker thread; neither may raise.

        The thread is counted idle (free for the next job) before it runs ``last``: when
        ``last`` is what tells the caller the job is done, the caller's next job finds the
        thread free rather than start another.

        Raises:
            RuntimeError: no thread could be started.
        """
        with self._lock:
            claimed = self._idle > 0
            if claimed:
                self._idle -= 1
        self._jobs.put((job, last))
        if not claimed:
            threading.Thread(target=self._work, name="sandbox in_process", daemon=True).start()

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            try:
                job, last = jobs.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # nobody claimed this thread: end it
                        self._idle -= 1
                        return
                continue  # claimed meanwhile: its job is on its way
            job()
            with self._lock:
                self._idle += 1
            last()
            del job, last


_WORKERS: Final = _Workers()


def _pending(fd: int) -> int:
    """The bytes waiting to be read from the pipe ``fd`` (``FIONREAD``)."""
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)


async def run_in_process(
    program: str, toolset: Toolset, budget: Budget, *, argv: tuple[str, ...] = ()
) -> RunResult:
    """Run ``program`` in a thread of this process (see the module docstring).

    ``argv`` gives the program its name (for its tracebacks) and nothing else: the program
    shares this process's ``sys``, whose ``argv`` is left alone.
    """
    t0 = time.perf_counter()
    start = Start(
        v=VERSION,
        program=program,
        bindings=toolset.bindings(),
        budget=budget.start_budget(),
        result_id=os.urandom(16).hex(),
        argv=argv,
    )
    if start.bindings:
        ran, client, stats = await _run_with_tools(start, toolset, budget)
        calls, received = client.calls_made, client.bytes_received
    else:
        ran, calls, received, stats = await _run_without_tools(start), 0, 0, _NO_CALLS
    if isinstance(ran, BaseException):
        raise ran
    outcome, cpu = ran
    if isinstance(outcome, bytes):  # the value's JSON, decoded once, by run_result
        answer = Answer(ok=True, value=outcome, calls=calls, bytes=received)
    else:
        answer = Answer(
            ok=outcome.ok,
            value=outcome.value,
            kind=outcome.kind,
            error=outcome.error,
            calls=calls,
            bytes=received,
        )
    ending = Ending(
        level=Level.IN_PROCESS.value,
        wall_time=time.perf_counter() - t0,
        answer=answer,
        stats=stats,
        cpu_time=cpu,
    )
    return run_result(ending)


#: What a run with no tools to call has served: nothing.
_NO_CALLS: Final = CallStats(calls=0, bytes=0, inflight=0, peak_inflight=0, refused=0, expired=0)

#: What the program's thread leaves: the outcome and its CPU seconds, or what went wrong.
_Ran = tuple[Outcome | bytes, float] | BaseException


def _executor(start: Start, client: Client | None, ran: list[_Ran]) -> Callable[[], None]:
    """The job of the program's thread: run ``start`` and leave what came of it in
    ``ran``, in a copy of the caller's context with no async library current."""
    backend = PythonBackend(as_main=False)

    def execute() -> None:
        try:
            started = time.thread_time()
            outcome = backend.run_json(start, client)
            ran.append((outcome, time.thread_time() - started))
        except BaseException as exc:  # not the program's (backend.run never raises)
            ran.append(exc)

    context = contextvars.copy_context()
    if _ASYNC_LIBRARY is not None:
        context.run(_ASYNC_LIBRARY.set, None)
    return lambda: context.run(execute)


async def _run_without_tools(start: Start) -> _Ran:
    """A program with no tool to call needs no call channel: its thread says that it is
    done through an eventfd, the one wake-up of the event loop (the channel's two pipes,
    server and client cost 26 µs a run more here)."""
    ran: list[_Ran] = []
    # Held until the program's thread is done with the eventfd (a lock costs a tenth of
    # an Event).
    finished = threading.Lock()
    finished.acquire()
    done = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def finish() -> None:
        os.eventfd_write(done, 1)  # the thread's last use of it
        finished.release()

    woke = False
    try:
        _WORKERS.submit(_executor(start, None, ran), finish)
        try:
            await anyio.wait_readable(done)
            woke = True
        finally:
            if not woke:
                # Cancelled: wait for the program, as anyio.to_thread.run_sync would.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(finished.acquire)
    finally:
        os.close(done)
    return ran[0]


async def _run_with_tools(
    start: Start, toolset: Toolset, budget: Budget
) -> tuple[_Ran, Client, CallStats]:
    """The program in a thread, its calls served over a pipe by this task (see the module
    docstring): what came of it, its client and the server's accounting."""
    down, up = os.pipe(), os.pipe()
    channel = FdChannel(up[0], down[1])
    server = Server(channel, toolset.handle, budget.call_limits())
    # Told the in-flight cap by the Start, as a runner is: it queues calls past it.
    client = Client(down[0], up[1], max_inflight=start.budget.max_inflight)
    ran: list[_Ran] = []
    # Held until the program's thread is done (a lock costs a tenth of an Event).
    finished = threading.Lock()
    finished.acquire()

    def finish() -> None:
        client.close()  # the server then reads EOF and returns
        finished.release()

    _WORKERS.submit(_executor(start, client, ran), finish)
    ended = False  # by the EOF that finish() makes, once the program's ends are closed
    try:
        # The program closes its end when it finishes, answers to calls it abandoned
        # still pending: the server ends then, and that is no error.
        with contextlib.suppress(anyio.BrokenResourceError):
            await anyio.wait_readable(up[0])
            if ran and not _pending(up[0]):
                # The program is done (its outcome is recorded before its ends are
                # closed) and nothing came but the end: no call to serve.
                channel.close()
            else:
                await server.serve()
        ended = bool(ran)
    finally:
        if not ended and finished.locked():
            # The server stopped first (cancelled, or the program closed its pipe):
            # wait for the program, as anyio.to_thread.run_sync would.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(finished.acquire)
    return ran[0], client, server.statistics()
