"""The remains of runs are cleared off their path, bounded, and all gone when the host
closes (:mod:`sandbox._children._remains`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, cast

import anyio
import pytest

import sandbox
from sandbox import Level, Pool
from sandbox._children import REMAINS
from sandbox._children._cgroups import CgroupSet
from sandbox._children._remains import Remains
from sandbox._engine import _process
from tests.host import needs_run_cgroups, skip_because_host_cannot

if TYPE_CHECKING:
    from sandbox._children import Child


class Held:
    """A stand-in for a child whose clearing waits until the test lets it go."""

    def __init__(self, *, fails: bool = False) -> None:
        self.go = threading.Event()
        self.cleared = threading.Event()
        self.fails = fails

    def clear(self) -> None:
        assert self.go.wait(30.0)
        self.cleared.set()
        if self.fails:
            raise RuntimeError("a clearing that fails")

    def child(self) -> Child:
        return cast("Child", self)


def test_new_runs_wait_when_the_bound_is_reached() -> None:
    remains = Remains(limit=2)
    held = [Held(), Held()]
    for h in held:
        remains.put(h.child())
    assert remains.pending() == 2
    assert not remains.has_room()
    assert not remains.wait_room(timeout=0.2)  # still full: a new run would wait
    held[0].go.set()
    assert remains.wait_room(timeout=10.0)
    assert held[0].cleared.is_set()
    held[1].go.set()
    assert remains.wait_empty(timeout=10.0)
    assert remains.pending() == 0


def test_a_clearing_that_fails_does_not_stop_the_others() -> None:
    remains = Remains(limit=4)
    bad, good = Held(fails=True), Held()
    remains.put(bad.child())
    remains.put(good.child())
    bad.go.set()
    good.go.set()
    assert remains.wait_empty(timeout=10.0)
    assert good.cleared.is_set()


def test_wait_empty_says_when_it_gave_up() -> None:
    remains = Remains(limit=4)
    held = Held()
    remains.put(held.child())
    assert not remains.wait_empty(timeout=0.2)
    held.go.set()
    assert remains.wait_empty(timeout=10.0)


@pytest.mark.anyio
async def test_room_waits_without_blocking_the_event_loop() -> None:
    remains = Remains(limit=1)
    held = Held()
    remains.put(held.child())
    got_room = anyio.Event()
    ticks = 0

    async def take() -> None:
        await remains.room()
        got_room.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(take)
        with anyio.fail_after(10):
            while ticks < 20:  # the loop keeps running while room() waits
                await anyio.sleep(0.01)
                ticks += 1
        assert not got_room.is_set()
        held.go.set()
        with anyio.fail_after(10):
            await got_room.wait()
    assert remains.pending() == 0


@pytest.mark.anyio
async def test_closing_a_pool_waits_until_every_remains_is_gone() -> None:
    slow = Held()  # a remains whose clearing takes a while
    with Pool(size=2) as pool:
        for i in range(6):
            result = await sandbox.run(f"{i}", spawn=pool)
            assert (result.ok, result.value) == (True, i), result.error
        REMAINS.put(slow.child())
        threading.Timer(0.5, slow.go.set).start()
    # Closed: nothing of its runs, nor of its idle children, waits to be cleared.
    assert slow.cleared.is_set()
    assert REMAINS.pending() == 0


@needs_run_cgroups("end a run through its cgroups")
@pytest.mark.anyio
@pytest.mark.parametrize("level", [Level.PROCESS, Level.CONFINED])
@pytest.mark.parametrize("broken", [False, True], ids=["at-its-end", "after-an-error"])
async def test_a_run_whose_kill_fails_still_hands_its_remains_over(
    level: Level, broken: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a run that waits for nothing (with cgroups) is done without awaiting;
    if the kill fails there (at the run's end, or in its clean-up after the run broke
    down), the run raises it, and its remains are cleared all the same (the autouse check
    finds nothing of it left)."""
    if level is Level.CONFINED and sandbox.confinement_gaps():
        skip_because_host_cannot(f"confine: {sandbox.confinement_gaps()}")
    real = CgroupSet.kill_all
    failed: list[bool] = []

    def fail_once(self: CgroupSet, **kwargs: Any) -> set[int]:
        if not failed:
            failed.append(True)
            raise OSError("the kill failed")
        return real(self, **kwargs)

    async def break_down(*args: object) -> None:
        raise RuntimeError("the run broke down")

    monkeypatch.setattr(CgroupSet, "kill_all", fail_once)
    if broken:
        monkeypatch.setattr(_process._Run, "_await_result", break_down)
    with pytest.raises(BaseException) as raised:  # (which, checked below)
        await sandbox.run("1", level=level, spawn="zygote")
    error = raised.value
    if isinstance(error, BaseExceptionGroup):  # (from the run's task group)
        assert error.subgroup(OSError) is not None, error
    else:
        assert isinstance(error, OSError), error
        assert isinstance(error.__context__, BaseExceptionGroup), error.__context__
    assert failed == [True]
    assert REMAINS.wait_empty(30.0)
