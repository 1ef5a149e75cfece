"""Every budget item, exceeded; every impossible budget, refused before anything runs."""

from __future__ import annotations

import time

import anyio
import msgspec
import pytest

import sandbox
from protocol import CallLimits, StartBudget
from sandbox import (
    DEFAULTS,
    Budget,
    BudgetError,
    BudgetUnsupported,
    Kind,
    Level,
    Tool,
    ToolError,
)
from sandbox._budget import UNSET
from sandbox._engine import applied_budget
from tests.host import child_levels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

#: The call budgets hold the same at every level: the same Server counts every call.
levels = pytest.mark.parametrize("level", [Level.IN_PROCESS, Level.PROCESS])


def fetch(n: int) -> str:
    """Ten bytes of JSON per call (an 8-character string, quoted)."""
    return f"{n:08d}"


async def slow(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "done"


CATCHING = """
from protocol import CallError
outcomes = []
for i in range({n}):
    try:
        host.fetch(i)
        outcomes.append("ok")
    except CallError as exc:
        outcomes.append(exc.kind.value)
outcomes
"""


@levels
async def test_max_calls(level: Level) -> None:
    """Past max_calls, each further call fails `limit` in the program; the parent counts."""
    result = await sandbox.run(
        CATCHING.format(n=5), tools=[fetch], budget=Budget(max_calls=3), level=level
    )
    assert result.ok, result.error
    assert result.value == ["ok", "ok", "ok", "limit", "limit"]
    assert result.calls == 3


@levels
async def test_max_calls_uncaught_fails_the_run_as_limit(level: Level) -> None:
    """A quota failure the program does not catch fails the run with kind `limit`."""
    result = await sandbox.run(
        "for i in range(5): host.fetch(i)", tools=[fetch], budget=Budget(max_calls=2), level=level
    )
    assert (result.ok, result.kind) == (False, Kind.LIMIT)
    assert "quota" in result.error


@levels
async def test_max_calls_zero_allows_no_call(level: Level) -> None:
    """Zero means zero: with max_calls=0 the first call already fails `limit`."""
    result = await sandbox.run(
        CATCHING.format(n=2), tools=[fetch], budget=Budget(max_calls=0), level=level
    )
    assert result.ok, result.error
    assert result.value == ["limit", "limit"]
    assert result.calls == 0


@levels
async def test_none_is_no_limit(level: Level) -> None:
    """None lifts a quota: every call is answered."""
    budget = Budget(max_calls=None, max_bytes=None)
    result = await sandbox.run(CATCHING.format(n=20), tools=[fetch], budget=budget, level=level)
    assert result.ok, result.error
    assert result.value == ["ok"] * 20


@levels
async def test_max_bytes(level: Level) -> None:
    """Results past max_bytes are withheld as `limit`; the bytes delivered stay within it."""
    result = await sandbox.run(
        CATCHING.format(n=4), tools=[fetch], budget=Budget(max_bytes=25), level=level
    )
    assert result.ok, result.error
    assert result.value == ["ok", "ok", "limit", "limit"]
    assert result.bytes == 20


@levels
async def test_inflight_cap(level: Level) -> None:
    """A child that sends calls over max_inflight (this program lifts its client's own
    cap, which queues them otherwise) has them refused at once with `limit`."""
    program = """
import asyncio
from protocol import CallError
host.slow._client._max_inflight = 1000
results = await asyncio.gather(*(host.slow(0.5) for _ in range(10)), return_exceptions=True)
[r if isinstance(r, str) else r.kind.value for r in results]
"""
    result = await sandbox.run(program, tools=[slow], budget=Budget(max_inflight=4), level=level)
    assert result.ok, result.error
    assert sorted(result.value) == ["done"] * 4 + ["limit"] * 6
    assert result.calls == 4


@levels
async def test_call_deadline(level: Level) -> None:
    """A call past max_call_deadline fails `transient` at the deadline, not when it ends."""
    program = """
from protocol import CallError
try:
    host.slow(30)
    outcome = "answered"
except CallError as exc:
    outcome = exc.kind.value
outcome
"""
    wall = None if level is Level.IN_PROCESS else 20.0
    result = await sandbox.run(
        program, tools=[slow], budget=Budget(max_call_deadline=0.5, wall_clock=wall), level=level
    )
    assert result.ok, result.error
    assert result.value == "transient"
    assert result.wall_time < 20


@pytest.mark.slow
async def test_wall_clock_with_calls_in_flight() -> None:
    """The wall clock ends a run whose program waits on a slow host call, less than 1.5 s
    after the limit (the margin of ``test_hostile``'s wall-clock tests).

    Timed from the call, which comes after the clock started: a cold runner's start, which
    comes before it and took more than a second on a loaded machine, is not the margin's.
    """
    assert (await sandbox.run("1")).ok  # the zygote, started outside the clock
    called: list[float] = []

    async def slow_from_now(seconds: float) -> str:
        called.append(time.monotonic())
        return await slow(seconds)

    tool = sandbox.Tool(slow_from_now, name="slow")
    result = await sandbox.run("host.slow(60)", tools=[tool], budget=Budget(wall_clock=1.0))
    ended = time.monotonic()
    assert (result.kind, result.cause) == (Kind.LIMIT, "wall_clock")
    assert len(called) == 1
    assert result.wall_time >= 1.0
    assert ended - called[0] < 1.0 + 1.5


async def test_max_file_size() -> None:
    """A write past max_file_size fails in the program (EFBIG), and the host is unharmed."""
    program = """
try:
    with open("big", "wb") as f:
        f.write(b"x" * 200_000)
    outcome = "written"
except OSError as exc:
    outcome = exc.errno
outcome
"""
    result = await sandbox.run(program, budget=Budget(max_file_size=100_000))
    assert result.ok, result.error
    import errno

    assert result.value == errno.EFBIG


async def test_max_open_files_per_process() -> None:
    """Opening descriptors past max_open_files_per_process fails in the program (EMFILE)."""
    program = """
import os
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    outcome = [exc.errno, len(fds) < 64]
outcome
"""
    result = await sandbox.run(program, budget=Budget(max_open_files_per_process=64))
    assert result.ok, result.error
    import errno

    assert result.value == [errno.EMFILE, True]


#: Every kind of impossible item, and the words its refusal has.
_IMPOSSIBLE = [
    ({"wall_clock": 0}, "positive"),
    ({"wall_clock": -1}, "positive"),
    ({"wall_clock": float("inf")}, "finite"),
    ({"wall_clock": float("nan")}, "finite"),
    ({"wall_clock": "30"}, "got '30' (str)"),
    ({"wall_clock": True}, "got True (bool)"),
    ({"wall_clock": 1e10}, "int64"),
    ({"wall_clock": 1e-10}, "a nanosecond"),
    ({"max_calls": -1}, "at least 0"),
    ({"max_calls": 2.5}, "whole number (an int), got 2.5 (float)"),
    ({"max_calls": "3"}, "whole number (an int), got '3' (str)"),
    ({"max_calls": 2**63}, "int64"),
    ({"max_bytes": -5}, "at least 0"),
    ({"max_bytes": False}, "(bool)"),
    ({"max_inflight": 0}, "at least 1"),
    ({"max_inflight": None}, "always enforced"),
    ({"max_call_deadline": -1.0}, "positive"),
    ({"max_memory": 0}, "at least 16 MiB (a Python runner needs about 10 MiB to start)"),
    ({"max_memory": (16 << 20) - 1}, "at least 16 MiB"),
    ({"max_memory": 1.5e9}, "whole number (an int), got 1500000000.0 (float)"),
    ({"max_memory": 2**63}, "int64"),
    ({"max_cpu": 0}, "positive"),
    ({"max_cpu": 1e300}, "int64"),
    ({"max_cpu": 10**400}, "finite"),
    ({"max_output": -1}, "at least 0"),
    ({"max_open_files_per_process": 3}, "the runner itself needs a few"),
    ({"max_processes": 0}, "at least 1"),
    ({"max_disk": 1.0}, "whole number"),
]


@pytest.mark.parametrize(("items", "says"), _IMPOSSIBLE, ids=repr)
def test_impossible_budgets_are_refused_when_built(items: dict[str, object], says: str) -> None:
    """Each impossible item (a bad type, a bad number, past what the wire carries) is a
    BudgetError naming it."""
    ((name, _),) = items.items()
    with pytest.raises(BudgetError) as info:
        Budget(**items)  # type: ignore[arg-type]
    assert list(info.value.items) == [name]
    assert says in info.value.items[name]
    assert str(info.value).startswith(f"{name} ")


def test_every_bad_item_is_named_in_one_error() -> None:
    """A budget with several bad items is refused once, with a reason for each."""
    with pytest.raises(BudgetError) as info:
        Budget(wall_clock="x", max_calls=-1, max_disk=0)  # type: ignore[arg-type]
    assert set(info.value.items) == {"wall_clock", "max_calls", "max_disk"}
    assert all(name in str(info.value) for name in info.value.items)


def test_a_budget_decoded_from_json_is_checked_the_same_way() -> None:
    """A budget that comes as JSON (an MCP client's, say) meets the same checks."""
    with pytest.raises(msgspec.ValidationError, match="max_calls must be at least 0"):
        msgspec.json.decode(b'{"max_calls": -1}', type=Budget)
    with pytest.raises(msgspec.ValidationError, match="max_memory"):
        msgspec.json.decode(b'{"max_memory": 1.5}', type=Budget)


def test_each_default_applies_where_the_level_can_enforce_it() -> None:
    """An item left unset takes its default (DEFAULTS) where the level can enforce it, and
    no limit where it cannot; None lifts it; a value stays."""
    assert Budget().wall_clock is UNSET
    at_process = applied_budget(Level.PROCESS, Budget())
    assert at_process.wall_clock == DEFAULTS["wall_clock"] == 30
    assert at_process.max_inflight == DEFAULTS["max_inflight"] == 64
    assert at_process.max_output == DEFAULTS["max_output"] == 1 << 20
    assert applied_budget(Level.IN_PROCESS, Budget()).wall_clock is None
    assert applied_budget(Level.PROCESS, Budget(wall_clock=None)).wall_clock is None
    assert applied_budget(Level.PROCESS, Budget(wall_clock=5)).wall_clock == 5


def test_the_wire_and_the_server_get_the_budget_in_their_own_terms() -> None:
    """The Start's budget is in nanoseconds, 0 where nothing is asked; the server's limits
    are None where there is no limit; an item left unset has its default in both."""
    budget = Budget(wall_clock=1.5, max_calls=3, max_memory=1 << 30, max_call_deadline=2.0)
    assert budget.start_budget() == StartBudget(
        wall_clock=1_500_000_000, max_calls=3, max_bytes=0, max_memory=1 << 30, max_inflight=64
    )
    assert budget.call_limits() == CallLimits(
        max_calls=3, max_bytes=None, max_inflight=64, max_call_deadline=2.0
    )
    assert Budget().start_budget() == StartBudget(
        wall_clock=30 * 10**9, max_memory=512 << 20, max_inflight=64
    )
    assert Budget(wall_clock=None, max_memory=None).start_budget() == StartBudget(max_inflight=64)
    assert Budget(max_inflight=2).start_budget().max_inflight == 2
    assert Budget(max_inflight=2).call_limits() == CallLimits(max_inflight=2)


async def test_max_output_none_keeps_all_of_it() -> None:
    """max_output=None keeps every byte of stdout; by default, 1 MiB of it is kept."""
    program = "import sys\nsys.stdout.write('x' * (2 << 20))\nNone"
    whole = await sandbox.run(program, budget=Budget(max_output=None))
    assert whole.ok, whole.error
    assert (len(whole.stdout), whole.stdout_truncated) == (2 << 20, False)
    capped = await sandbox.run(program)
    assert (len(capped.stdout), capped.stdout_truncated) == (1 << 20, True)
    assert capped.stdout_bytes == 2 << 20


async def test_an_item_the_level_cannot_enforce_is_refused_before_spawning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a host without a memory cgroup, asking for max_memory is refused, never ignored."""
    import sandbox._engine._levels as levels

    monkeypatch.setattr(
        levels, "_enforcement", lambda level: ({"max_memory": "no memory cgroup"}, {})
    )
    with pytest.raises(BudgetUnsupported, match="max_memory") as info:
        await sandbox.run("1", budget=Budget(max_memory=1 << 30))
    assert info.value.items == ["max_memory"]
    assert info.value.level == "process"
    # Items it can enforce still run.
    assert (await sandbox.run("1", budget=Budget(max_calls=1))).value == 1


async def test_unknown_level_is_refused() -> None:
    """A level that does not exist is a ValueError, before anything runs."""
    with pytest.raises(ValueError):
        await sandbox.run("1", level="vm")


def test_reports_what_this_host_cannot_enforce() -> None:
    """unenforceable() names each item the process level cannot enforce here, with a reason."""
    gaps = sandbox.unenforceable(Level.PROCESS)
    assert set(gaps) <= {"max_memory", "max_processes", "max_disk"}
    assert all(reason for reason in gaps.values())


async def test_tool_problems() -> None:
    """Duplicate or bad tool names are refused; an unknown tool is `invalid` in the program."""
    with pytest.raises(ToolError):
        sandbox.Toolset([Tool(fetch), Tool(fetch)])
    with pytest.raises(ToolError):
        Tool(fetch, name="not a name")
    program = """
from protocol import CallError
try:
    host.fetch(a=1, b=2)
    outcome = "sent"
except (CallError, TypeError) as exc:
    outcome = type(exc).__name__
outcome
"""
    result = await sandbox.run(program, tools=[fetch])
    assert result.ok, result.error
    assert result.value == "TypeError"  # the runner checks the signature before sending


@levels
async def test_tool_failures_reach_the_program_classified(level: Level) -> None:
    """A tool that raises is `raised` in the program; a value that is not JSON too."""

    def broken() -> None:
        raise RuntimeError("disk on fire")

    def weird() -> object:
        return object()

    program = """
from protocol import CallError
out = []
for call in (host.broken, host.weird):
    try:
        call()
    except CallError as exc:
        out.append([exc.kind.value, exc.message])
out
"""
    result = await sandbox.run(program, tools=[broken, weird], level=level)
    assert result.ok, result.error
    (k1, m1), (k2, m2) = result.value
    assert (k1, k2) == ("raised", "raised")
    assert "disk on fire" in m1
    assert "not JSON" in m2


async def test_in_process_a_memory_error_is_the_programs_own_failure() -> None:
    """in_process sets no memory limit: a MemoryError there is not reported as one."""
    result = await sandbox.run("raise MemoryError", level=Level.IN_PROCESS)
    assert (result.ok, result.kind, result.cause) == (False, Kind.RAISED, "program")


@levels
async def test_a_limit_a_tool_answers_is_believed(level: Level) -> None:
    """A call the parent answered `limit` (a tool's own limit, here) that the program lets
    escape fails the run as `limit`: the parent saw it."""

    def rate_limited() -> None:
        raise sandbox.CallError(Kind.LIMIT, "rate limit of this tool")

    result = await sandbox.run("host.rate_limited()", tools=[rate_limited], level=level)
    assert (result.ok, result.kind) == (False, Kind.LIMIT), result.error


async def test_in_process_refuses_what_only_a_process_can_enforce() -> None:
    """in_process cannot stop a thread or cap its memory: those items are refused."""
    for item in (
        "wall_clock",
        "max_memory",
        "max_cpu",
        "max_processes",
        "max_open_files_per_process",
    ):
        value = 64 << 20 if item == "max_memory" else 64
        with pytest.raises(BudgetUnsupported, match=item):
            await sandbox.run("1", budget=Budget(**{item: value}), level=Level.IN_PROCESS)


async def test_in_process_leaves_the_hosts_main_module_alone() -> None:
    """A program run in the host's process gets its own __main__, not the host's."""
    import sys

    before = sys.modules["__main__"]
    result = await sandbox.run("__name__", level=Level.IN_PROCESS)
    assert result.value == "__main__"
    assert sys.modules["__main__"] is before


@pytest.mark.parametrize("level", child_levels())
async def test_no_process_of_a_run_can_dump_core(level: Level) -> None:
    """The zygote's keeper sets RLIMIT_CORE to 0, soft and hard, and every child inherits
    it: the runner, and a process the program starts (across its exec too)."""
    program = (
        "import resource, subprocess, sys\n"
        "child = subprocess.run([sys.executable, '-c', 'import resource; "
        "print(resource.getrlimit(resource.RLIMIT_CORE))'], capture_output=True, text=True)\n"
        "[list(resource.getrlimit(resource.RLIMIT_CORE)), child.stdout.strip()]"
    )
    result = await sandbox.run(program, level=level)
    assert result.ok, result.error
    assert result.value == [[0, 0], "(0, 0)"]
