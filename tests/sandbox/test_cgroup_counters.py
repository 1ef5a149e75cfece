"""The counters a run's end reads are held open while its cgroups live, and read fresh.

A run's end reads its CPU time, peak memory, limit events and process count from its
cgroups (``_Run.stop``). :meth:`CgroupSet.create` opens those files once, off the run's
path, and every read is then a ``pread`` from their start; these tests check that a held
file says what a fresh open would, as it changes, and that nothing stays open once the
cgroups are removed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol import CGROUP_PREFIX
from sandbox._children import CgroupSet, _cgroups
from tests.host import needs_enforcing, needs_run_cgroups

pytestmark = needs_run_cgroups("the counters of a run's cgroups")

#: The longest any one wait of these tests may take.
WAIT = 10.0


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    made = CgroupSet.create(f"{CGROUP_PREFIX}test-{uuid.uuid4().hex[:12]}", memory=None, pids=50)
    try:
        yield made
    finally:
        made.kill_all()
        made.remove()


def _fds() -> set[str]:
    """What this process's descriptors are open on."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own, closed by now
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
    return found


def test_the_counters_and_limits_are_held_and_let_go(cgroups: CgroupSet) -> None:
    hierarchy = cgroups.hierarchy
    counters = [str(path) for path in hierarchy.counters(cgroups.dirs)]
    assert counters, "a hierarchy with cgroups names the counters a run's end reads"
    limits = [str(path) for path in hierarchy.limit_files(cgroups.dirs)]
    assert limits, "and the files its limits are written to"
    held = [path for path in counters + limits if path in _cgroups._held]
    assert set(held) >= {path for path in counters + limits if os.path.exists(path)}
    assert held
    assert set(held) <= _fds()
    cgroups.kill_all()
    cgroups.remove()
    assert not set(held) & set(_cgroups._held)
    assert not set(held) & _fds()


def test_a_held_counter_reads_what_a_fresh_open_reads(cgroups: CgroupSet) -> None:
    """CPU time and the process count, read through the held descriptors while a process
    of the set spins and after it is gone, against the files opened afresh."""
    assert cgroups.hierarchy._pids_current(cgroups.dirs) == 0
    counts_cpu = cgroups.cpu_time() is not None  # (v1 without cpuacct: not counted)
    assert cgroups.cpu_time() in (0.0, None)
    with subprocess.Popen(
        [sys.executable, "-c", "import sys\nsys.stdin.readline()\nwhile True: pass"],
        stdin=subprocess.PIPE,
    ) as spin:
        try:
            cgroups.add(spin.pid)
            assert spin.stdin is not None
            spin.stdin.write(b"go\n")
            spin.stdin.flush()
            assert cgroups.hierarchy._pids_current(cgroups.dirs) == 1
            deadline = time.monotonic() + WAIT
            while counts_cpu and time.monotonic() < deadline:
                if (cgroups.cpu_time() or 0.0) >= 0.05:
                    break
                time.sleep(0.01)
            assert not counts_cpu or (cgroups.cpu_time() or 0.0) >= 0.05
        finally:
            spin.kill()
            spin.wait(WAIT)
    deadline = time.monotonic() + WAIT
    while cgroups.hierarchy._pids_current(cgroups.dirs) != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cgroups.hierarchy._pids_current(cgroups.dirs) == 0
    for path in cgroups.hierarchy.counters(cgroups.dirs):
        assert _cgroups._read(path) == path.read_text(), path
    assert not cgroups.pids_exceeded()
    assert not cgroups.memory_exceeded()


@needs_enforcing("max_processes")
def test_limits_written_through_held_files_take_effect(cgroups: CgroupSet) -> None:
    """The limits a run's cgroups get before its Start, written through the held
    descriptors, read back from the files opened afresh; one the kernel refuses raises."""
    held = cgroups.controllers()
    assert "pids" in held
    memory = 256 << 20
    cgroups.set_limits(memory=memory, pids=17)
    for path in cgroups.hierarchy.limit_files(cgroups.dirs):
        if not path.exists():
            continue
        text = path.read_text().strip()
        if path.name == "pids.max":
            assert text == "17"
        elif "swap" in path.name:  # v2: no swap at all; v1: memory and swap together
            assert text in ("0", str(memory))
        else:
            assert int(text) == memory, path
    with pytest.raises(OSError):
        cgroups.set_limits(memory=None, pids=-5)
    cgroups.set_limits(memory=None, pids=23)  # the descriptor still works after a refusal
    assert (
        next(
            p.read_text().strip()
            for p in cgroups.hierarchy.limit_files(cgroups.dirs)
            if p.name == "pids.max"
        )
        == "23"
    )


def test_a_base_removed_since_is_made_again() -> None:
    """The runs' base cgroups are made once per host; one removed since (by hand, by
    another tool) is made again when the next run's cgroups are."""
    where = _cgroups.hierarchy()
    if not isinstance(where, _cgroups.CgroupV1):
        pytest.skip("the runs' bases are made once only on cgroup v1")
    top = f"sandbox-test-{uuid.uuid4().hex[:12]}"
    bases = {c: base.parent / top / base.name for c, base in where._bases.items() if base}
    private = _cgroups.CgroupV1(bases)
    try:
        for base in bases.values():
            base.parent.mkdir()
        first = CgroupSet.create(f"{CGROUP_PREFIX}a", memory=None, pids=None, within=private)
        controllers = set(first.dirs)
        first.remove()
        for base in bases.values():
            base.rmdir()
        again = CgroupSet.create(f"{CGROUP_PREFIX}b", memory=None, pids=None, within=private)
        assert set(again.dirs) == controllers
        assert all(path.is_dir() for path in again.dirs.values())
        again.remove()
    finally:
        for base in bases.values():
            for path in (base, base.parent):
                with contextlib.suppress(OSError):
                    path.rmdir()


def test_the_runs_share_of_the_cpu_is_held_only_where_it_is_set() -> None:
    """The runs' share of the CPU is said to be held (the wall-clock tests' margin depends
    on it) exactly where a run's cgroups include a ``cpu`` cgroup whose base sets
    ``cpu.shares``: v1 with that hierarchy, and not v1 without it, v2 or no cgroups."""
    assert not _cgroups.NoCgroups("none here").holds_cpu_share()
    assert not _cgroups.CgroupV2(Path("/nonexistent")).holds_cpu_share()
    where = _cgroups.hierarchy()
    if not isinstance(where, _cgroups.CgroupV1) or where._bases.get("cpu") is None:
        assert not where.holds_cpu_share()
        pytest.skip("no cgroup v1 cpu hierarchy here to hold a share with")
    top = f"sandbox-test-{uuid.uuid4().hex[:12]}"
    bases = {c: base.parent / top / base.name for c, base in where._bases.items() if base}
    without_cpu = _cgroups.CgroupV1({c: b for c, b in bases.items() if c != "cpu"})
    with_cpu = _cgroups.CgroupV1(bases)
    try:
        for base in bases.values():
            base.parent.mkdir()
        assert not without_cpu.holds_cpu_share()
        assert with_cpu.holds_cpu_share()
        bases["cpu"].mkdir()
        (bases["cpu"] / "cpu.shares").write_text("2")  # (1024, a task's, is the default)
        made = CgroupSet.create(f"{CGROUP_PREFIX}a", memory=None, pids=None, within=with_cpu)
        assert "cpu" in made.dirs
        assert (bases["cpu"] / "cpu.shares").read_text().strip() == "1024"
        made.remove()
    finally:
        for base in bases.values():
            for path in (base, base.parent):
                with contextlib.suppress(OSError):
                    path.rmdir()


def _limits_read(cgroups: CgroupSet) -> dict[str, str]:
    """The set's limit files, opened afresh, by name."""
    return {
        path.name: path.read_text().strip()
        for path in cgroups.hierarchy.limit_files(cgroups.dirs)
        if path.exists()
    }


def _memory_limits(read: dict[str, str]) -> set[int | None]:
    """The memory limits of ``read``, None for none (v1: -1 reads as a page-rounded
    maximum; v2: ``max``); v2's swap, always 0 or none, is left out."""
    found: set[int | None] = set()
    for name, text in read.items():
        if name.startswith("memory.") and "swap" not in name:
            found.add(None if text == "max" or int(text) >= 1 << 62 else int(text))
        elif name == "memory.memsw.limit_in_bytes":
            found.add(None if int(text) >= 1 << 62 else int(text))
    return found


@needs_enforcing("max_memory")
def test_limits_move_up_down_and_off_in_any_order(cgroups: CgroupSet) -> None:
    """A set's limits can be raised, lowered and lifted after they were set (a set made
    ahead has the default budget's from the start): on cgroup v1 the memory limit may
    never be above the swap one, so one of the two orders is refused by the kernel each
    time; the memory and swap limits end equal whichever way the limit moved."""
    for memory, pids in (
        (256 << 20, 30),
        (1 << 30, 40),
        (64 << 20, 10),
        (None, None),
        (128 << 20, 5),
    ):
        cgroups.set_limits(memory=memory, pids=pids)
        read = _limits_read(cgroups)
        assert _memory_limits(read) == {memory}, read
        assert read["pids.max"] == ("max" if pids is None else str(pids))
        if "memory.swap.max" in read:  # v2: no swap while memory is limited
            assert read["memory.swap.max"] == ("max" if memory is None else "0")


def test_limits_the_set_has_already_are_not_written_again(
    cgroups: CgroupSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Setting the limits a set has already writes nothing (a run of the default budget
    sets none on its path); after a write the kernel refused, they are written again."""
    written: list[tuple[int | None, int | None]] = []
    real = cgroups.hierarchy.set_limits

    def counted(dirs: Any, *, memory: int | None, pids: int | None) -> None:
        written.append((memory, pids))
        real(dirs, memory=memory, pids=pids)

    monkeypatch.setattr(cgroups.hierarchy, "set_limits", counted)
    held = cgroups.controllers()
    memory = 200 << 20 if "memory" in held else None
    cgroups.set_limits(memory=memory, pids=21)
    cgroups.set_limits(memory=memory, pids=21)
    assert written == [(memory, 21)]
    with pytest.raises(OSError):
        cgroups.set_limits(memory=memory, pids=-5)
    cgroups.set_limits(memory=memory, pids=21)  # unknown after the refusal: written again
    assert written == [(memory, 21), (memory, -5), (memory, 21)]
    assert _limits_read(cgroups)["pids.max"] == "21"
