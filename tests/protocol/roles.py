"""A run's two ends in one process: the host's Starter, and a thread playing the child."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio

from protocol import VERSION, FdChannel, Result, Runner, Start, StartBudget, Starter

RESULT_ID = "r" * 32


async def start_against(
    runner: Runner,
    channel: FdChannel,
    answer: Callable[[Runner, Start], None],
    seconds: float = 10.0,
) -> Result:
    """Send a Start over ``channel`` and return its Result, while a thread awaits the Start
    on ``runner`` and answers it with ``answer``. The channel is closed after.

    Raises:
        BaseException: what the child's side raised.
    """
    errors: list[BaseException] = []

    def child() -> None:
        try:
            answer(runner, runner.await_start(seconds))
        except BaseException as exc:  # raised below, on the host's side
            errors.append(exc)

    thread = threading.Thread(target=child)
    thread.start()
    try:
        with anyio.fail_after(seconds):
            result = await Starter(channel).start(
                Start(
                    v=VERSION, program="1", bindings=(), budget=StartBudget(), result_id=RESULT_ID
                )
            )
    finally:
        thread.join(seconds)
        channel.close()
    if errors:
        raise errors[0]
    return result
