"""``sandbox serve``'s refusals: each a message and exit code 4, nothing served."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox._cli import main

SERVED = str(Path(__file__).parent / "served.py")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--http", "nonsense"], "HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "HOST:PORT"),
        (["--tools", "/nonexistent/tools.py"], "cannot load tools module"),
        (["--max-calls", "-1"], "max_calls"),
        (["--http", "127.0.0.1:0", "--idle", "0"], "idle"),
        (["--http", "203.0.113.7:0"], "Cannot assign"),
    ],
)
def test_serve_refuses_bad_options(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--level", "process", "--tools", SERVED, *args]) == 4
    assert says in capsys.readouterr().err


def test_serve_refuses_a_module_that_offers_no_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("TOOLS = [42]\n")
    assert main(["serve", "--level", "process", "--tools", str(bad)]) == 4
    assert "neither a tool nor a function" in capsys.readouterr().err


def test_serve_refuses_two_tools_of_one_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twice = tmp_path / "twice.py"
    twice.write_text("def run_program(code: str) -> str:\n    return code\n")
    assert main(["serve", "--level", "process", "--tools", str(twice)]) == 4
    assert "two tools are named 'run_program'" in capsys.readouterr().err
