"""Safe defaults: a budget that asks for nothing still has a wall clock, a memory limit, a
process limit and output caps wherever the level can enforce them, the same in the API and
in every command; each is lifted by ``None`` (``none`` on the command line), item by item;
``in_process``, which can enforce none of them, runs without them rather than refusing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import sandbox
from sandbox import DEFAULTS, Budget, BudgetUnsupported, Kind, Level
from sandbox._commands._main import _parser
from sandbox._commands._options import budget_from
from sandbox._engine import applied_budget, with_defaults
from sandbox.plane import ProgramTool
from sandbox.plane._capability import cap_budget

from ..commands import exit_code
from ..host import child_levels, needs_enforcing

pytestmark = [pytest.mark.anyio]

#: Allocates and touches 1 GiB: past the default memory limit, well within this host.
ALLOCATES_1_GIB = (Path(__file__).parent / "hostile" / "allocates_past_limit.py").read_text()


def test_the_defaults_are_the_documented_values() -> None:
    """The defaults are those README's table lists: 30 s, 512 MiB, 256 processes, 1 MiB of
    each output stream, 64 calls in flight, 64 MiB of files."""
    assert dict(DEFAULTS) == {
        "wall_clock": 30.0,
        "max_memory": 512 << 20,
        "max_inflight": 64,
        "max_output": 1 << 20,
        "max_processes": 256,
        "max_disk": 64 << 20,
    }


@pytest.mark.parametrize("level", child_levels())
def test_a_budget_that_asks_for_nothing_has_every_default(level: Level) -> None:
    """Budget() at a child level has each default the level can enforce here, and no limit
    only where it cannot (process has no file system of the run's own to bound)."""
    applied = applied_budget(level, Budget())
    gaps = sandbox.unenforceable(level)
    for item, default in DEFAULTS.items():
        assert getattr(applied, item) == (None if item in gaps else default), item


def test_each_default_is_lifted_by_none_item_by_item() -> None:
    """None lifts one item and leaves the other defaults in place."""
    for item in ("wall_clock", "max_memory", "max_output", "max_processes"):
        applied = applied_budget(Level.PROCESS, Budget(**{item: None}))  # type: ignore[arg-type]
        assert getattr(applied, item) is None, item
        others = [i for i in ("wall_clock", "max_output") if i != item]
        assert all(getattr(applied, i) == DEFAULTS[i] for i in others), item


@needs_enforcing("max_memory")
@pytest.mark.usefixtures("spawn")
@pytest.mark.parametrize("level", child_levels())
async def test_a_program_past_the_default_memory_limit_is_ended(level: Level) -> None:
    """A program that allocates 1 GiB under a budget that asks for nothing is ended at the
    default memory limit (kind limit, cause memory, named in MiB); with max_memory=None it
    gets its gigabyte."""
    capped = await sandbox.run(ALLOCATES_1_GIB, level=level)
    assert (capped.ok, capped.kind, capped.cause) == (False, Kind.LIMIT, "memory"), capped.error
    assert "512 MiB" in capped.error
    if "max_memory" not in sandbox.substitutes(level):  # a cgroup: the host measured it
        assert capped.peak_memory is not None
        assert capped.peak_memory <= DEFAULTS["max_memory"]
    lifted = await sandbox.run(ALLOCATES_1_GIB, level=level, budget=Budget(max_memory=None))
    assert (lifted.ok, lifted.value) == (True, 64), lifted.error


@pytest.mark.usefixtures("spawn")
@pytest.mark.parametrize("level", child_levels())
async def test_an_endless_program_is_ended_at_the_default_wall_clock(
    level: Level, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``while True: pass`` with no budget at all is ended at the default wall clock (made
    1 s here, so that the test does not wait 30); the error says the limit as set."""
    monkeypatch.setitem(DEFAULTS, "wall_clock", 1.0)
    result = await sandbox.run("while True: pass", level=level)
    assert (result.kind, result.cause) == (Kind.LIMIT, "wall_clock"), result.error
    assert result.wall_time >= 1.0
    assert "wall-clock limit of 1 s reached" in result.error  # not "1.0 s"


async def test_in_process_runs_without_the_defaults_it_cannot_enforce() -> None:
    """in_process applies only the call and output items; a budget that asks for nothing
    runs there, and memory asked for explicitly is still refused."""
    applied = applied_budget(Level.IN_PROCESS, Budget())
    assert (applied.wall_clock, applied.max_memory, applied.max_processes) == (None, None, None)
    assert applied.max_inflight == DEFAULTS["max_inflight"]
    result = await sandbox.run("6 * 7", level=Level.IN_PROCESS)
    assert (result.ok, result.value) == (True, 42), result.error
    with pytest.raises(BudgetUnsupported, match="max_memory"):
        await sandbox.run("1", level=Level.IN_PROCESS, budget=Budget(max_memory=64 << 20))


async def test_a_host_without_a_memory_cgroup_runs_without_the_memory_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the host has no memory cgroup, the memory default is not applied (the run
    goes ahead); a memory limit asked for is refused."""
    import sandbox._engine._levels as levels

    monkeypatch.setattr(
        levels, "_enforcement", lambda level: ({"max_memory": "no memory cgroup"}, {})
    )
    assert with_defaults(Level.PROCESS, Budget()).max_memory is None
    with pytest.raises(BudgetUnsupported, match="max_memory"):
        applied_budget(Level.PROCESS, Budget(max_memory=64 << 20))


def test_a_budget_applied_once_is_not_worked_out_again_while_the_gaps_stand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same budget at the same level gets the same answer, not worked out again; once
    the level's gaps change (the host's cgroups, here patched), it is worked out anew."""
    import sandbox._engine._levels as levels

    budget = Budget(wall_clock=7)
    enforced_before = "max_memory" not in levels._gaps(Level.PROCESS)
    first = applied_budget(Level.PROCESS, budget)
    assert applied_budget(Level.PROCESS, Budget(wall_clock=7)) is first
    assert first.wall_clock == 7
    worked_out: list[Budget] = []
    real = levels.with_defaults

    def counted(level: Level, asked: Budget) -> Budget:
        worked_out.append(asked)
        return real(level, asked)

    monkeypatch.setattr(levels, "with_defaults", counted)
    assert applied_budget(Level.PROCESS, budget) is first
    assert worked_out == []
    lost = {"max_memory": "no memory cgroup"}
    monkeypatch.setattr(levels, "_enforcement", lambda level: (lost, {}))
    again = applied_budget(Level.PROCESS, budget)
    assert worked_out == [budget]
    assert again.max_memory is None
    assert first.max_memory == (DEFAULTS["max_memory"] if enforced_before else None)
    monkeypatch.setitem(DEFAULTS, "wall_clock", 5.0)  # a default changed: worked out anew
    assert applied_budget(Level.PROCESS, Budget()).wall_clock == 5.0


def test_every_command_and_the_plane_get_the_same_defaults() -> None:
    """``run``, ``serve`` and ``agent`` with no budget option make Budget(), which has the
    API's defaults; the plane's program tool and a serve session that asks to lift an item
    keep them too (a session cannot lift past the server's ceiling)."""
    api = applied_budget(Level.PROCESS, Budget())
    for command in (["run", "p.py"], ["serve"], ["agent", "--model", "m", "task"]):
        budget = budget_from(_parser().parse_args(command))
        assert applied_budget(Level.PROCESS, budget) == api, command
    tool = with_defaults(Level.PROCESS, ProgramTool(level=Level.PROCESS).budget)
    assert (tool.wall_clock, tool.max_memory) == (api.wall_clock, api.max_memory)
    session = cap_budget(Budget(wall_clock=None, max_memory=None), ceilings=Budget())
    assert applied_budget(Level.PROCESS, session) == api


@needs_enforcing("max_memory")
def test_sandbox_run_limits_memory_by_default(tmp_path: Path) -> None:
    """``sandbox run`` with no budget option ends a 1 GiB program at the default memory
    limit (exit 3), and ``--max-memory none`` lets it run (exit 0)."""
    program = tmp_path / "big.py"
    program.write_text(ALLOCATES_1_GIB)
    assert exit_code(["run", str(program)]) == 3
    assert exit_code(["run", str(program), "--max-memory", "none"]) == 0


def test_the_readme_lists_every_default_in_one_table() -> None:
    """README's "Safe defaults" table has one row per item of sandbox.DEFAULTS, with its
    option and its value, and no other table says a default."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.partition("### Safe defaults")[2].partition("\n#")[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| `")]
    table = {cells[0].strip().strip("`"): [c.strip() for c in cells[1:3]] for cells in rows}
    shown = {
        "wall_clock": "30 s",
        "max_memory": "512 MiB",
        "max_processes": "256",
        "max_output": "1 MiB of stdout, and of stderr",
        "max_disk": "64 MiB, and 4096 files",
        "max_inflight": "64",
    }
    assert set(table) == set(DEFAULTS) == set(shown)
    for item, (option, default) in table.items():
        assert option == f"`--{item.replace('_', '-')}`", item
        assert default == shown[item], item
    elsewhere = readme.replace(section, "")
    assert "by default |" not in elsewhere


@needs_enforcing("max_memory")
@needs_enforcing("max_processes")
async def test_a_run_of_the_default_budget_writes_no_cgroup_limit_on_its_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's cgroups are made with the default budget's limits (most often ahead of the
    run, off its path): a run of the default budget writes none once its child is ready,
    one of another budget writes its own there (and the next default run none again)."""
    from sandbox import Spawn
    from sandbox._children import _cgroups
    from sandbox._engine import _process

    written: list[tuple[int | None, int | None]] = []
    applying: int | None = None  # the thread applying a run's limits, while it does
    hierarchy = _cgroups.hierarchy()
    real_set, real_apply = hierarchy.set_limits, _process._Run._apply_limits

    def set_limits(dirs: object, *, memory: int | None, pids: int | None) -> None:
        # (The background thread makes the next runs' cgroups meanwhile, with their
        # limits: those writes are not on a run's path.)
        if applying == threading.get_ident():
            written.append((memory, pids))
        real_set(dirs, memory=memory, pids=pids)  # type: ignore[arg-type]

    def apply_limits(run: _process._Run) -> None:
        nonlocal applying
        applying = threading.get_ident()
        try:
            real_apply(run)
        finally:
            applying = None

    monkeypatch.setattr(hierarchy, "set_limits", set_limits)
    monkeypatch.setattr(_process._Run, "_apply_limits", apply_limits)
    other = Budget(max_memory=300 << 20, max_processes=20)
    with sandbox.Pool(size=1) as pool:
        for spawn in (Spawn.ZYGOTE, pool):
            for budget, expected in ((None, []), (other, [(300 << 20, 20)]), (None, [])):
                written.clear()
                result = await sandbox.run("1", level=Level.PROCESS, spawn=spawn, budget=budget)
                assert result.ok, result.error
                assert written == expected, (spawn, budget)
