"""A program that exits (``sys.exit``, ``exit``, ``quit``, ``SystemExit``) produced no value.

Whatever the code, 0 included, the run is not ok: its kind is ``raised``, its cause
``exit``, its error names ``SystemExit`` and the code, and the code is its ``value``.
"""

from __future__ import annotations

import pytest

import sandbox
from sandbox import Budget, Kind, Level
from tests.host import child_levels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

LEVELS = [Level.IN_PROCESS, *child_levels()]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    ("program", "code"),
    [
        ("import sys\nsys.exit()", None),
        ("import sys\nsys.exit(0)", 0),
        ("exit(0)", 0),
        ("quit()", None),
        ("raise SystemExit(7)", 7),
        ("import sys\nprint('bye')\nsys.exit('a message')", "a message"),
    ],
    ids=["sys.exit()", "sys.exit(0)", "exit(0)", "quit()", "SystemExit(7)", "message"],
)
async def test_exit_is_not_success(level: Level, program: str, code: object) -> None:
    budget = Budget() if level is Level.IN_PROCESS else Budget(wall_clock=30)
    result = await sandbox.run(program, budget=budget, level=level)
    assert result.ok is False
    assert (result.kind, result.cause) == (Kind.RAISED, "exit")
    assert "SystemExit" in result.error
    assert result.value == code
