"""The public entry points: :func:`run` (async) and :func:`run_sync` (for scripts)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio

from .._budget import Budget
from .._children import Pool, Spawn
from .._errors import ConfinementUnavailable
from .._result import RunResult
from ._inprocess import run_in_process
from ._levels import Level, applied_budget, cgroups_usable, confinement_gaps
from ._process import OnOutput, run_process
from ._tools import Tool, Toolset

__all__ = ["run", "run_sync"]

Tools = Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | Toolset
#: What ``spawn=None`` means. (The test suite runs every child-level test with each mode.)
_DEFAULT_SPAWN: Spawn | Pool = Spawn.ZYGOTE
#: What ``budget=None`` means (a budget is frozen: one serves every run).
_NO_BUDGET = Budget()


async def run(
    program: str,
    *,
    tools: Tools = (),
    budget: Budget | None = None,
    level: Level | str = Level.PROCESS,
    spawn: Spawn | str | Pool | None = None,
    stack_on_timeout: bool = False,
    on_output: OnOutput | None = None,
    argv: Sequence[str] | None = None,
) -> RunResult:
    """Run ``program`` (Python source) in a sandbox, with ``tools`` as ``host.<name>``.

    The program's value is its last expression. Whatever the program does, this returns a
    :class:`RunResult` (failures included) and leaves no process, descriptor or temporary
    directory of its own behind; cancelling the caller's task waits until the child is
    reaped. (What the host keeps for runs to come is not a run's: a pool's idle children,
    and the workspace made ahead for the next run forked on demand; see the README.)

    Args:
        program: Python source; top-level ``await`` is allowed.
        tools: host tools the program may call (functions or :class:`Tool` objects).
        budget: limits for the run; every item asked for is enforced or refused.
        level: the isolation level.
        spawn: how the child process is made, for the ``process`` and ``confined``
            levels: None or ``"zygote"`` (the default: forked from a warm template, about a
            millisecond), ``"cold"`` (a fresh interpreter, tens of milliseconds), ``"pool"``
            (taken from the process-wide pool of children forked ahead), or a :class:`Pool`
            of your own. A child never serves two runs, whichever way it was made.
        stack_on_timeout: if the run is killed at its wall clock, take the program's
            Python stack first (with py-spy) and return it in :attr:`RunResult.stack`, or
            why it could not be taken in :attr:`RunResult.stack_error`. Child levels only.
        on_output: called as ``on_output(stream, text)`` with ``"stdout"`` or ``"stderr"``
            and the text the program wrote, as it arrives (in order within a stream); an
            awaitable it returns (an ``async def``) is awaited. It is told exactly what
            :attr:`RunResult.stdout` and :attr:`RunResult.stderr` keep (up to the budget's
            ``max_output``), all of it before this returns. It runs in the run's own tasks:
            while it takes its time, the program's pipe fills and the program waits (its
            wall clock runs on). If it raises, the run is stopped and the exception
            propagates from here. Child levels only (``in_process`` captures no output).
        argv: the program's ``sys.argv``: its name (which its tracebacks show, e.g.
            ``"prog.py"``), then its arguments. None means ``["<program>"]``. At
            ``in_process`` the program shares this process's ``sys.argv``, which is left
            alone: only the name is used there, and arguments are refused.

    Raises:
        BudgetUnsupported: the budget asks for something ``level`` cannot enforce here.
        ConfinementUnavailable: ``confined`` was asked for and this host lacks a wall.
        ToolError: a tool cannot be bound (a bad or duplicate name).
        SpawnFailed: the child process could not be started.
        ValueError: an unknown level or spawn mode, ``stack_on_timeout`` or ``on_output``
            in process, an empty ``argv``, or arguments in ``argv`` in process.
        TypeError: ``argv`` is not a sequence of strings.
        Exception: whatever ``on_output`` raised.
    """
    level = Level(level)
    command_line = _command_line(argv)
    if spawn is None:
        spawn = _DEFAULT_SPAWN
    elif not isinstance(spawn, Pool):
        spawn = Spawn(spawn)
    budget = applied_budget(level, budget or _NO_BUDGET)
    toolset = tools if isinstance(tools, Toolset) else Toolset(tools)
    if level is Level.IN_PROCESS:
        if stack_on_timeout:
            raise ValueError("stack_on_timeout needs a child level (process or confined)")
        if on_output is not None:
            raise ValueError(
                "on_output needs a child level (process or confined): in_process does not "
                "capture output (the program writes to this process's own stdout and stderr)"
            )
        if len(command_line) > 1:
            raise ValueError(
                "program arguments (argv[1:]) need a child level (process or confined): "
                "in_process, the program shares this process's sys.argv"
            )
        return await run_in_process(program, toolset, budget, argv=command_line)
    if level is Level.CONFINED:
        gaps = confinement_gaps()
        if gaps:
            raise ConfinementUnavailable(gaps)
    return await run_process(
        program,
        toolset,
        budget,
        level,
        use_cgroups=cgroups_usable(),
        spawn=spawn,
        stack_on_timeout=stack_on_timeout,
        on_output=on_output,
        argv=command_line,
    )


def _command_line(argv: Sequence[str] | None) -> tuple[str, ...]:
    """``argv`` checked, as Start carries it (empty for None).

    Raises:
        TypeError: not a sequence of strings (a lone string included).
        ValueError: empty (it needs at least the program's name).
    """
    if argv is None:
        return ()
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise TypeError(
            f"argv must be a list of strings (the program's name, then its arguments), "
            f"not {type(argv).__name__}"
        )
    for i, item in enumerate(argv):
        if not isinstance(item, str):
            raise TypeError(f"argv[{i}] must be a string, not {type(item).__name__}")
    if not argv:
        raise ValueError("argv needs at least the program's name (argv[0])")
    return tuple(argv)


def run_sync(
    program: str,
    *,
    tools: Tools = (),
    budget: Budget | None = None,
    level: Level | str = Level.PROCESS,
    spawn: Spawn | str | Pool | None = None,
    stack_on_timeout: bool = False,
    on_output: OnOutput | None = None,
    argv: Sequence[str] | None = None,
    backend: str = "asyncio",
) -> RunResult:
    """:func:`run` for synchronous code: starts an event loop (``backend``) for one run.

    Raises:
        RuntimeError: called from a thread that already runs an event loop (a Jupyter
            notebook's cell, an ``async def``): there, ``await run(...)`` takes the same
            arguments.
    """
    running = _running_event_loop()
    if running:
        raise RuntimeError(
            f"run_sync() cannot start an event loop here: this thread already runs one "
            f"({running}; a Jupyter notebook runs asyncio). Use `await sandbox.run(...)`, "
            f"which takes the same arguments."
        )

    async def main() -> RunResult:
        return await run(
            program,
            tools=tools,
            budget=budget,
            level=level,
            spawn=spawn,
            stack_on_timeout=stack_on_timeout,
            on_output=on_output,
            argv=argv,
        )

    return anyio.run(main, backend=backend)


def _running_event_loop() -> str:
    """The event loop library running in this thread ("" if none), without importing any."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None and asyncio._get_running_loop() is not None:
        return "asyncio"
    trio = sys.modules.get("trio")
    if trio is not None and trio.lowlevel.in_trio_run():
        return "trio"
    return ""
