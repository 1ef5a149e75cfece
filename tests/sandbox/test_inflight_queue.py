"""A program's calls past the in-flight cap wait their turn in the child, at every level:
``asyncio.gather`` over a thousand host calls succeeds, and the parent, counting the calls
where it handles them, never has more than the cap in flight. A child that sends past the
cap anyway is still refused, and a run that ends with calls queued leaves nothing."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import sandbox
from sandbox import DEFAULTS, Budget, Kind, Level
from tests.host import child_levels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

LEVELS = [Level.IN_PROCESS, *child_levels()]
CHILD_LEVELS = child_levels()
DEFAULT_CAP = DEFAULTS["max_inflight"]


class Parent:
    """The host's tools, counting the calls they are handling: the parent's own view.

    ``hold`` holds the first ``gate`` calls until that many are in flight at once, so the
    run reaches its cap for certain; ``forever`` never answers.
    """

    def __init__(self, gate: int = 0) -> None:
        self.gate = gate
        self.active = 0
        self.peak = 0
        self.started = 0
        self._all_in = anyio.Event()

    def _enter(self) -> int:
        self.active += 1
        self.started += 1
        self.peak = max(self.peak, self.active)
        if self.active >= self.gate:
            self._all_in.set()
        return self.started

    async def hold(self, i: int) -> int:
        try:
            if self._enter() <= self.gate:
                await self._all_in.wait()
            await anyio.lowlevel.checkpoint()
            return i
        finally:
            self.active -= 1

    async def forever(self, i: int) -> int:
        try:
            self._enter()
            await anyio.sleep_forever()
        finally:
            self.active -= 1
        raise AssertionError("unreachable")  # pragma: no cover

    async def slow(self, i: int) -> int:
        """Held until ``gate`` calls are in flight, then a second more: the calls past
        them, sent with them, are all read and refused meanwhile. (Fewer than ``gate``
        ever in flight: held 10 s at most, and the test's count of them fails it.)"""
        try:
            if self._enter() <= self.gate:
                with anyio.move_on_after(10):
                    await self._all_in.wait()
            await anyio.sleep(1)
            return i
        finally:
            self.active -= 1


def budget_for(level: Level, **items: object) -> Budget:
    wall = {} if level is Level.IN_PROCESS else {"wall_clock": 60}
    return Budget(**wall, **items)  # type: ignore[arg-type]


GATHER = """
import asyncio
values = await asyncio.gather(*(host.hold(i) for i in range({n})))
values == list(range({n}))
"""


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("cap", "calls"), [(DEFAULT_CAP, 1000), (4, 100)])
async def test_gather_past_the_cap_succeeds_with_the_cap_in_flight_at_most(
    level: Level, cap: int, calls: int
) -> None:
    """Every call succeeds; the parent's tools see the cap in flight, never more."""
    parent = Parent(gate=cap)
    items = {} if cap == DEFAULT_CAP else {"max_inflight": cap}
    result = await sandbox.run(
        GATHER.format(n=calls),
        tools=[parent.hold],
        budget=budget_for(level, **items),
        level=level,
    )
    assert (result.ok, result.value) == (True, True), result.error
    assert result.calls == calls
    assert parent.peak == cap
    assert parent.started == calls


THREADS = """
import threading
out, errors = [], []
def one(i):
    try:
        out.append(host.hold.blocking(i))
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=one, args=(i,)) for i in range({n})]
for t in threads:
    t.start()
for t in threads:
    t.join()
[sorted(out), errors]
"""


@pytest.mark.parametrize("level", LEVELS)
async def test_threads_calling_the_blocking_form_wait_for_a_place(level: Level) -> None:
    """Threads calling ``host.tool.blocking`` together all succeed, by waiting: the
    parent's tools never see more than the cap in flight."""
    cap, n = 4, 24
    parent = Parent(gate=cap)
    result = await sandbox.run(
        THREADS.format(n=n),
        tools=[parent.hold],
        budget=budget_for(level, max_inflight=cap),
        level=level,
    )
    assert result.ok, result.error
    assert result.value == [list(range(n)), []]
    assert parent.peak == cap


LIFTED = """
import asyncio
from protocol import CallError
host.slow._client._max_inflight = 1000  # what a hostile child would do: ignore the cap
results = await asyncio.gather(*(host.slow(i) for i in range(10)), return_exceptions=True)
[r.kind.value if isinstance(r, CallError) else "ok" for r in results]
"""


@pytest.mark.parametrize("level", LEVELS)
async def test_a_child_that_sends_past_the_cap_is_refused(level: Level) -> None:
    """The parent answers ``limit`` to calls past its cap, whatever the child's client
    does: a program that lifts its client's cap gets six of ten refused."""
    parent = Parent(gate=4)
    result = await sandbox.run(
        LIFTED,
        tools=[parent.slow],
        budget=budget_for(level, max_inflight=4),
        level=level,
    )
    assert result.ok, result.error
    assert sorted(result.value) == ["limit"] * 6 + ["ok"] * 4
    assert result.calls == 4
    assert parent.peak == parent.started == 4


FOREVER = """
import asyncio
await asyncio.gather(*(host.forever(i) for i in range(1000)))
"""


@pytest.mark.parametrize("level", CHILD_LEVELS)
async def test_a_run_ended_by_its_wall_clock_with_calls_queued_ends_promptly(
    level: Level,
) -> None:
    """At the wall clock, with the cap in flight and the rest (936) queued, the run ends
    (kind ``limit``, cause ``wall_clock``) within seconds, every handler of the parent
    cancelled; no process is left (the fixture checks)."""
    parent = Parent()
    started = time.monotonic()
    result = await sandbox.run(
        FOREVER,
        tools=[parent.forever],
        budget=Budget(wall_clock=2),
        level=level,
    )
    elapsed = time.monotonic() - started
    assert (result.ok, result.kind, result.cause) == (False, Kind.LIMIT, "wall_clock")
    assert elapsed < 15
    assert parent.started == DEFAULT_CAP  # only the cap ever reached the parent
    assert parent.active == 0


async def test_cancelling_an_in_process_run_with_calls_queued_fails_them_all(
    tmp_path: Path,
) -> None:
    """``in_process`` has no wall clock: cancelling the host's task ends the run. The calls
    in flight and the 936 queued all fail ``canceled`` in the program, which then ends;
    the parent's handlers are all cancelled."""
    seen = tmp_path / "seen"
    program = f"""
import asyncio
from protocol import CallError
results = await asyncio.gather(
    *(host.forever(i) for i in range(1000)), return_exceptions=True
)
kinds = sorted({{r.kind.value if isinstance(r, CallError) else repr(r) for r in results}})
with open({str(seen)!r}, "w") as f:
    f.write(",".join(kinds) + " " + str(len(results)))
"""
    parent = Parent()

    async def cancel_when_all_in(scope: anyio.CancelScope) -> None:
        while parent.started < DEFAULT_CAP:  # noqa: ASYNC110 - the tools have no event for it
            await anyio.sleep(0.01)
        scope.cancel()

    started = time.monotonic()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_when_all_in, tg.cancel_scope)
            await sandbox.run(
                program,
                tools=[parent.forever],
                level=Level.IN_PROCESS,
            )
    assert time.monotonic() - started < 15
    assert seen.read_text() == "canceled 1000"  # written before the run returned
    assert parent.started == DEFAULT_CAP
    assert parent.active == 0
