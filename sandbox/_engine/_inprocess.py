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
the host's task waits for the program to finish.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

import anyio
import anyio.to_thread

from protocol import VERSION, Client, FdChannel, Server, Start
from runner import Outcome, PythonBackend

from .._budget import Budget
from .._result import Answer, Ending, RunResult, run_result
from ._levels import Level
from ._tools import Toolset

__all__ = ["run_in_process"]


async def run_in_process(program: str, toolset: Toolset, budget: Budget) -> RunResult:
    """Run ``program`` in a thread of this process (see the module docstring)."""
    t0 = time.perf_counter()
    down, up = os.pipe(), os.pipe()
    server = Server(FdChannel(up[0], down[1]), toolset.handle, budget.call_limits())
    client = Client(down[0], up[1])
    start = Start(
        v=VERSION,
        program=program,
        bindings=toolset.bindings(),
        budget=budget.start_budget(),
        result_id=uuid.uuid4().hex,
    )
    backend = PythonBackend(as_main=False)

    def execute() -> tuple[Outcome, float]:
        started = time.thread_time()
        try:
            return backend.run(start, client), time.thread_time() - started
        finally:
            client.close()  # the server then reads EOF and returns

    async def serve() -> None:
        # The program closes its end when it finishes, answers to calls it abandoned
        # still pending: the server ends then, and that is no error.
        with contextlib.suppress(anyio.BrokenResourceError):
            await server.serve()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        outcome, cpu = await anyio.to_thread.run_sync(execute)
    answer = Answer(
        ok=outcome.ok,
        value=outcome.value,
        kind=outcome.kind,
        error=outcome.error,
        calls=client.calls_made,
        bytes=client.bytes_received,
    )
    ending = Ending(
        level=Level.IN_PROCESS.value,
        wall_time=time.perf_counter() - t0,
        answer=answer,
        stats=server.statistics(),
        cpu_time=cpu,
    )
    return run_result(ending)
