"""What a run returns."""

from __future__ import annotations

from typing import Any, final

import msgspec

from protocol import Kind

__all__ = ["RunResult", "program_failure"]


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
        exit_code: the runner's exit status, if it exited.
        signal: the signal that ended the runner, if one did.
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
    cause: str | None = None
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


def program_failure(
    kind: Kind | None, error: str, value: str, *, limit_seen: bool
) -> dict[str, Any]:
    """The fields of a :class:`RunResult` for a run whose program failed by itself.

    ``value`` is the failure's data as the runner sent it (JSON text, or empty): the Python
    backend sends the code of a program that exited, which makes the cause ``exit``.

    The parent decides what was a limit, from what it saw itself (``limit_seen``: a call
    it answered ``limit``, its memory or process cgroup at its limit), never from the
    child's word: a child that reports ``limit`` otherwise (a program that raised
    ``MemoryError`` with memory to spare) failed by itself, kind ``raised``.
    """
    if kind is Kind.LIMIT and not limit_seen:
        kind = Kind.RAISED
        error = f"(the child reported a limit, but none of the run's limits was reached)\n{error}"
    fields: dict[str, Any] = {"kind": kind or Kind.UNKNOWN, "cause": "program", "error": error}
    if value:
        try:
            fields["value"] = msgspec.json.decode(value)
        except (msgspec.DecodeError, RecursionError):
            fields["value"] = value
        fields["cause"] = "exit"
    return fields
