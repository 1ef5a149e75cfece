"""What a run returns, and the one place that decides it from what the host saw.

Every level ends a run the same way: it gathers what it saw into an :class:`Ending` (the
child's answer if one came, the host's own verdict if it stopped or refused the run, and
the facts it measured itself: its call accounting, its cgroups' limits, the exit status),
and :func:`run_result`, a pure function, turns that into the :class:`RunResult`. The order
of precedence is the parent's authority (DESIGN, invariant 3): the host's own verdict
first, then a child that broke the wire, then a child that died without answering
(explained by what the host measured), and only then the child's answer, whose claim of a
limit stands only if the host saw one.
"""

from __future__ import annotations

import enum
import os
import signal as signals
from dataclasses import dataclass, field
from typing import Any, final

import msgspec

from protocol import CallStats, Kind, RunnerExit

from ._text import seconds, size

__all__ = ["Answer", "Cause", "Ending", "Output", "RunResult", "Verdict", "run_result"]


class Cause(enum.StrEnum):
    """What exactly ended a run that failed (:attr:`RunResult.cause`)."""

    WALL_CLOCK = "wall_clock"
    MEMORY = "memory"
    CPU = "cpu"
    PROCESSES = "processes"
    DISK = "disk"
    PROTOCOL = "protocol"
    CRASH = "crash"
    CONFINEMENT = "confinement"
    EXIT = "exit"
    PROGRAM = "program"


@final
class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """How one run ended. Built by the library only.

    ``stdout``, ``stderr``, ``error`` and ``value`` hold the program's text as it was,
    control and bidirectional characters included: it is the program's, and not trusted.
    Escape it before it reaches a terminal or a log (the command line does).

    Attributes:
        ok: whether the program ran to the end and produced a value.
        value: the program's value (its last expression), decoded from JSON; for a program
            that exited (cause ``exit``), the code it gave ``sys.exit`` or ``SystemExit``.
        kind: on failure, why (:class:`~protocol.Kind`); ``limit`` for any budget.
        error: on failure, a reason for people (a traceback, the limit that was hit).
        cause: on failure, what exactly: ``wall_clock``, ``memory``, ``cpu``,
            ``processes``, ``disk`` (the program failed while its file system was full),
            ``protocol`` (the child broke the wire), ``crash`` (the child
            died without a Result), ``exit`` (the program called ``sys.exit``, ``exit`` or
            ``quit``, or raised ``SystemExit``, whatever the code: it produced no value), or
            ``program`` (the program itself failed).
        stdout, stderr: what the program printed, up to the budget's ``max_output``.
        stdout_truncated, stderr_truncated: whether more was printed than kept.
        stdout_bytes, stderr_bytes: how much was printed in all.
        calls, bytes: tool calls and result bytes, as the parent counted them (authoritative).
        reported_calls, reported_bytes: what the child claimed in its Result, if it sent one.
        wall_time: seconds from spawn to the end of the run, cleanup included.
        cpu_time: CPU seconds used by the run's processes, where known.
        peak_memory: the most memory the run used at once, in bytes, where known.
        exit_code: the runner's exit status, if the host saw it before returning. A run
            that answered returns once its processes are killed, without waiting for the
            runner's exit (the remains are cleared afterwards): None there.
        signal: the signal that ended the runner, if the host saw one before returning.
        level: the isolation level the run used.
        stack: with ``stack_on_timeout``, for a run killed at its wall clock: the Python
            stack of every thread of the program at that moment (py-spy's dump).
        stack_error: with ``stack_on_timeout``, why no stack could be taken (py-spy is not
            installed, could not attach, or took too long).
    """

    ok: bool
    value: Any = None
    kind: Kind | None = None
    error: str = ""
    cause: Cause | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    calls: int = 0
    bytes: int = 0
    reported_calls: int | None = None
    reported_bytes: int | None = None
    wall_time: float = 0.0
    cpu_time: float | None = None
    peak_memory: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    level: str = "process"
    stack: str | None = None
    stack_error: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The child's answer: its Result (or the in-process backend's outcome, whose value
    comes as JSON bytes: see :meth:`runner.PythonBackend.run_json`)."""

    ok: bool
    value: str | bytes = ""
    kind: Kind | None = None
    error: str = ""
    calls: int | None = None  # what the child claims it made (reconciliation only)
    bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The host's own ending of a run: it stopped it (a limit), or refused it."""

    kind: Kind
    cause: Cause
    error: str


@dataclass(frozen=True, slots=True)
class Output:
    """One captured output stream."""

    text: str = ""
    truncated: bool = False
    total: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    """What the host saw of one run: everything :func:`run_result` decides from.

    Attributes:
        level: the run's level.
        wall_time: seconds from the run's start to its end, on the host.
        answer: the child's answer, if one came.
        verdict: the host's own verdict, if it stopped or refused the run.
        broke_wire: the child broke the protocol (the error), if it did.
        stats: the parent's call accounting (the authority).
        status: the runner's wait status, if the host knows it.
        memory_hit, pids_hit, disk_hit: the run's memory, process or file system limit was
            reached, as its cgroups and file system say.
        memory_per_process: ``max_memory`` was an rlimit on each process (no cgroups):
            the host cannot see it reached, and the program's ``MemoryError`` is the sign.
        limits: the run's limits, for the messages (``max_memory`` and the like).
        stdout, stderr: the captured output.
        cpu_time, peak_memory: measured by the host, where known.
        stack, stack_error: the program's stack at its wall clock, if asked for.
    """

    level: str
    wall_time: float
    answer: Answer | None = None
    verdict: Verdict | None = None
    broke_wire: str | None = None
    stats: CallStats | None = None
    status: int | None = None
    memory_hit: bool = False
    memory_per_process: bool = False
    pids_hit: bool = False
    disk_hit: bool = False
    limits: dict[str, Any] = field(default_factory=dict)
    stdout: Output = Output()
    stderr: Output = Output()
    cpu_time: float | None = None
    peak_memory: int | None = None
    stack: str | None = None
    stack_error: str | None = None


def run_result(ending: Ending) -> RunResult:
    """The :class:`RunResult` of a run, from what the host saw (see the module docstring)."""
    e = ending
    status = e.status
    exit_code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
    stats = e.stats
    base = RunResult(
        ok=False,
        stdout=e.stdout.text,
        stderr=e.stderr.text,
        stdout_truncated=e.stdout.truncated,
        stderr_truncated=e.stderr.truncated,
        stdout_bytes=e.stdout.total,
        stderr_bytes=e.stderr.total,
        calls=0 if stats is None else stats.calls,
        bytes=0 if stats is None else stats.bytes,
        reported_calls=None if e.answer is None else e.answer.calls,
        reported_bytes=None if e.answer is None else e.answer.bytes,
        wall_time=e.wall_time,
        cpu_time=e.cpu_time,
        peak_memory=e.peak_memory,
        exit_code=exit_code,
        signal=sig,
        level=e.level,
        stack=e.stack,
        stack_error=e.stack_error,
    )
    replace = msgspec.structs.replace
    verdict = e.verdict
    if verdict is None and e.broke_wire is not None:
        verdict = Verdict(
            Kind.UNKNOWN, Cause.PROTOCOL, f"the child broke the protocol: {e.broke_wire}"
        )
    if verdict is None and e.answer is None:
        verdict = _death(e, exit_code, sig)
    if verdict is not None:
        return replace(base, kind=verdict.kind, cause=verdict.cause, error=verdict.error)
    answer = e.answer
    assert answer is not None
    if not answer.ok:
        return replace(base, **_failure(e, answer, exit_code))
    try:
        value = msgspec.json.decode(answer.value) if answer.value else None
    except (msgspec.DecodeError, RecursionError):
        return replace(
            base,
            kind=Kind.UNKNOWN,
            cause=Cause.PROTOCOL,
            error="the child's Result value is not JSON",
        )
    return replace(base, ok=True, value=value)


def _size_of(limit: float | None) -> str:
    """A byte limit as the messages show it (``512 MiB``)."""
    return "no limit" if limit is None else size(int(limit))


def _death(e: Ending, exit_code: int | None, sig: int | None) -> Verdict:
    """Why a runner ended without answering, from what the host measured."""
    how = f"signal {signals.Signals(sig).name}" if sig else f"exit code {exit_code}"
    if e.memory_hit:
        return Verdict(
            Kind.LIMIT,
            Cause.MEMORY,
            f"memory limit of {_size_of(e.limits.get('max_memory'))} reached; the run was killed",
        )
    if e.pids_hit:
        return Verdict(
            Kind.LIMIT,
            Cause.PROCESSES,
            f"process limit of {e.limits.get('max_processes')} reached, and the runner ended "
            f"({how}) without sending a Result",
        )
    max_cpu = e.limits.get("max_cpu")
    cpu_spent = max_cpu is not None and e.cpu_time is not None and e.cpu_time >= max_cpu
    if max_cpu is not None and (sig == signals.SIGXCPU or (sig == signals.SIGKILL and cpu_spent)):
        return Verdict(
            Kind.LIMIT, Cause.CPU, f"CPU limit of {seconds(max_cpu)} reached; the run was killed"
        )
    return Verdict(Kind.UNKNOWN, Cause.CRASH, f"the runner ended ({how}) without sending a Result")


def _failure(e: Ending, answer: Answer, exit_code: int | None) -> dict[str, Any]:
    """The fields of a run whose program failed by itself (its answer said so).

    The parent decides what was a limit, from what it saw itself (a call it answered
    ``limit``, its memory or process cgroup at its limit), never from the child's word: a
    child that reports ``limit`` otherwise (a program that raised ``MemoryError`` with
    memory to spare) failed by itself, kind ``raised``. A failed answer with a value is a
    program that exited (the Python backend sends its ``SystemExit`` code).
    """
    kind, error = answer.kind or Kind.UNKNOWN, answer.error
    # Without cgroups, max_memory is an rlimit on each process (RLIMIT_DATA): an allocation
    # past it fails in the program, and nothing the host can see says so. There, and only
    # there, the program's MemoryError is taken for the limit, and the error says whose
    # word it is.
    out_of_memory = e.memory_per_process and kind is Kind.LIMIT and "MemoryError" in error
    if out_of_memory:
        error = (
            f"memory limit reached: the program ran out of memory under its limit of "
            f"{_size_of(e.limits.get('max_memory'))} per process (RLIMIT_DATA: this host gives "
            f"the run no memory cgroup, so this is the program's own report)\n{error}"
        )
    limit_seen = (
        (e.stats is not None and e.stats.limited > 0) or e.memory_hit or e.pids_hit or out_of_memory
    )
    if kind is Kind.LIMIT and not limit_seen:
        kind = Kind.RAISED
        error = f"(the child reported a limit, but none of the run's limits was reached)\n{error}"
    fields: dict[str, Any] = {"kind": kind, "cause": Cause.PROGRAM, "error": error}
    if answer.value:
        try:
            fields["value"] = msgspec.json.decode(answer.value)
        except (msgspec.DecodeError, RecursionError):
            fields["value"] = answer.value
        fields["cause"] = Cause.EXIT
    if kind is Kind.LIMIT and (e.memory_hit or out_of_memory):
        fields["cause"] = Cause.MEMORY
    if exit_code == RunnerExit.NOT_CONFINED:
        fields["cause"] = Cause.CONFINEMENT
    if e.pids_hit and kind in (Kind.RAISED, Kind.UNKNOWN):
        # The run's pids cgroup refused a fork: whatever the program made of that (a
        # BlockingIOError, a RuntimeError of its own), the host saw its limit reached.
        fields.update(
            kind=Kind.LIMIT,
            cause=Cause.PROCESSES,
            error=f"the run's process limit (max_processes: {e.limits.get('max_processes')}) "
            f"was reached when the program failed:\n{error}",
        )
    if e.disk_hit and kind in (Kind.RAISED, Kind.UNKNOWN):
        # Decided from the host's own look at the run's file system (what the program
        # raised, ENOSPC or any other, is only its word).
        fields.update(
            kind=Kind.LIMIT,
            cause=Cause.DISK,
            error=f"the run's file system (max_disk: {_size_of(e.limits.get('max_disk'))}) "
            f"was full when the program failed:\n{error}",
        )
    return fields
