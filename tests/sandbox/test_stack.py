"""``stack_on_timeout``: a run killed at its wall clock can carry the program's Python stack."""

from __future__ import annotations

import pytest

import sandbox
from sandbox import Budget, Level
from sandbox._children import _stack
from tests.host import child_levels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

CHILD_LEVELS = child_levels()
STUCK = "def stuck_here():\n    while True:\n        pass\n\nstuck_here()\n"


@pytest.mark.skipif(_stack.py_spy() is None, reason="py-spy is not installed")
@pytest.mark.parametrize("level", CHILD_LEVELS)
async def test_the_stack_names_where_the_program_was(level: Level) -> None:
    result = await sandbox.run(
        STUCK, level=level, budget=Budget(wall_clock=1.0), stack_on_timeout=True
    )
    assert (result.ok, result.cause) == (False, "wall_clock")
    assert result.stack_error is None
    assert result.stack is not None
    assert "stuck_here (<program>:" in result.stack
    lines = result.stack.splitlines()
    # The program's frames come first, then the runner's, then py-spy's header.
    assert lines[0].startswith("Thread ")
    assert lines[1].strip().startswith("stuck_here (<program>:")
    runner = lines.index("    -- the runner, below the program:")
    assert all("<program>" not in line for line in lines[runner:])
    assert any(line.startswith("Process ") for line in lines[runner:])


DUMP = """\
Process 7: /venv/bin/python -I -S -c import runner
Python v3.11.7 (/usr/bin/python3.11)

Thread 8 (idle): "Thread-1 (worker)"
    worker (<program>:9)
    run (threading.py:975)

Thread 7 (active): "MainThread"
    inner (<program>:3)
    <module> (<program>:5)
    _execute (runner/_backends/python.py:212)
    serve (runner/_main.py:489)

"""


def test_program_first_puts_the_programs_thread_and_frames_first() -> None:
    assert _stack.program_first(DUMP) == (
        'Thread 7 (active): "MainThread"\n'
        "    inner (<program>:3)\n"
        "    <module> (<program>:5)\n"
        "    -- the runner, below the program:\n"
        "    _execute (runner/_backends/python.py:212)\n"
        "    serve (runner/_main.py:489)\n"
        "\n"
        "the other threads:\n"
        'Thread 8 (idle): "Thread-1 (worker)"\n'
        "    worker (<program>:9)\n"
        "    run (threading.py:975)\n"
        "\n"
        "Process 7: /venv/bin/python -I -S -c import runner\n"
        "Python v3.11.7 (/usr/bin/python3.11)\n"
    )


def test_program_first_leaves_other_text_alone() -> None:
    assert _stack.program_first("no threads here\n") == "no threads here\n"


@pytest.mark.slow
async def test_no_stack_unless_asked() -> None:
    result = await sandbox.run(STUCK, budget=Budget(wall_clock=1.0))
    assert result.cause == "wall_clock"
    assert (result.stack, result.stack_error) == (None, None)


async def test_no_stack_for_a_run_that_ends_in_time() -> None:
    result = await sandbox.run("1", budget=Budget(wall_clock=30.0), stack_on_timeout=True)
    assert (result.ok, result.stack, result.stack_error) == (True, None, None)


@pytest.mark.slow
async def test_without_py_spy_the_result_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stack, "py_spy", lambda: None)
    result = await sandbox.run(STUCK, budget=Budget(wall_clock=1.0), stack_on_timeout=True)
    assert result.cause == "wall_clock"
    assert result.stack is None
    assert result.stack_error is not None
    assert "not installed" in result.stack_error


@pytest.mark.slow
async def test_a_py_spy_that_cannot_attach_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stack, "py_spy", lambda: "/bin/false")
    result = await sandbox.run(STUCK, budget=Budget(wall_clock=1.0), stack_on_timeout=True)
    assert result.cause == "wall_clock"
    assert result.stack is None
    assert result.stack_error is not None
    assert "could not read process" in result.stack_error


async def test_in_process_refuses_stack_on_timeout() -> None:
    with pytest.raises(ValueError, match="child level"):
        await sandbox.run("1", level=Level.IN_PROCESS, stack_on_timeout=True)
