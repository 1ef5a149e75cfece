"""A program that cannot fit in a Start frame (16 MiB) is refused before anything is
spawned: a RunResult that names the limit, and exit code 4 on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest

import sandbox
from protocol import MAX_FRAME_BYTES, Kind
from sandbox._commands._main import main
from sandbox._engine import _process
from tests.host import skip_because_host_cannot

#: A program whose JSON in the Start frame is over the cap by a little.
TOO_LARGE = "x = 1\n#" + "a" * MAX_FRAME_BYTES + "\nx"


def _no_spawn(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("a child was asked for")


@pytest.mark.anyio
@pytest.mark.parametrize("level", ["process", "confined"])
async def test_a_program_over_the_frame_cap_is_refused_before_a_child_is_made(
    level: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_process, "acquire", _no_spawn)
    if level == "confined" and sandbox._engine._levels.confinement_gaps():
        skip_because_host_cannot(f"confine: {sandbox.confinement_gaps()}")
    result = await sandbox.run(TOO_LARGE, level=level)
    assert not result.ok
    assert (result.kind, result.cause) == (Kind.INVALID, "protocol"), result.error
    assert "16 MiB" in result.error
    assert result.level == level


def test_sandbox_run_refuses_it_with_exit_code_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "big.py"
    program.write_text(TOO_LARGE)
    assert main(["run", str(program)]) == 4
    said = capsys.readouterr().err
    assert "16 MiB" in said
    assert "Traceback" not in said
