"""The budget's options on the command line: one name per idea (the API's item names),
the earlier names still read, one meaning of zero and of ``none``, and help that shows
every default with a short metavar."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sandbox
from sandbox import Budget
from sandbox._commands._main import _parser, main
from sandbox._commands._options import BUDGET_OPTIONS, budget_from

from ..commands import exit_code

#: The commands that run programs, each with what it needs besides the budget.
COMMANDS = (["run", "p.py"], ["serve"], ["agent", "--model", "m", "task"])
#: Earlier names of budget options, and the item each sets.
ALIASES = {
    "--timeout": "wall_clock",
    "--call-timeout": "max_call_deadline",
    "--max-open-files": "max_open_files_per_process",
}


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_each_option_is_named_as_the_api_names_its_item() -> None:
    """``--wall-clock`` sets ``wall_clock``, ``--max-call-deadline`` sets
    ``max_call_deadline``: each budget option is its item's name with dashes."""
    for option in BUDGET_OPTIONS:
        assert option.flag == "--" + option.item.replace("_", "-")
    args = _parser().parse_args(["run", "p.py", "--wall-clock", "2", "--max-call-deadline", "1"])
    assert budget_from(args) == Budget(wall_clock=2.0, max_call_deadline=1.0)


@pytest.mark.parametrize("command", ["run", "serve", "agent"])
def test_earlier_names_still_work_and_are_not_shown(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--timeout``, ``--call-timeout`` and ``--max-open-files`` still set their items in
    every command, and the help shows only the one name of each."""
    base = next(c for c in COMMANDS if c[0] == command)
    for alias, item in ALIASES.items():
        value = "64" if item == "max_open_files_per_process" else "3"
        budget = budget_from(_parser().parse_args([*base, alias, value]))
        assert getattr(budget, item) == float(value), alias
    text = help_of(command, capsys)
    for alias in ALIASES:
        assert not re.search(rf"{alias}\b(?!-)", text), alias


@pytest.mark.parametrize("command", ["run", "serve", "agent"])
def test_help_shows_each_default_with_a_short_metavar(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each budget option's help ends with its default (the value of sandbox.DEFAULTS as
    the option writes it, or 'no limit'), and its metavar is S, SIZE or N."""
    text = help_of(command, capsys)
    for option in BUDGET_OPTIONS:
        # The option's own line, then the first default after it (its help may wrap).
        line = rf"^  {option.flag} (\S+)(.*?)\(default:\s+([^)]*)\)"
        match = re.search(line, text, re.MULTILINE | re.DOTALL)
        assert match is not None, option.flag
        metavar, default = match[1], " ".join(match[3].split())
        assert metavar in ("S", "SIZE", "N"), option.flag
        assert "--" not in match[2], option.flag  # no other option's default taken
        expected = {
            "wall_clock": f"{sandbox.DEFAULTS['wall_clock']:g} s",
            "max_memory": f"{int(sandbox.DEFAULTS['max_memory']) >> 20}M",
            "max_inflight": "64",
            "max_output": "1M",
            "max_processes": "256",
            "max_disk": "64M",
        }.get(option.item, "no limit")
        assert default == expected, option.flag
    assert "0 means zero" in " ".join(text.split())


def test_zero_is_zero_and_none_is_no_limit_as_in_the_api(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--max-calls 0`` is Budget(max_calls=0) (no call); ``none`` is None; a time of 0 is
    refused as the API refuses it (exit 2), saying how to ask for no limit."""
    for command in COMMANDS:
        zero = budget_from(_parser().parse_args([*command, "--max-calls", "0"]))
        assert zero == Budget(max_calls=0)
        lifted = budget_from(_parser().parse_args([*command, "--wall-clock", "none"]))
        assert lifted == Budget(wall_clock=None)
    with pytest.raises(sandbox.BudgetError, match="None means no limit"):
        Budget(wall_clock=0)
    capsys.readouterr()
    assert exit_code(["run", "p.py", "--wall-clock", "0"]) == 2
    err = capsys.readouterr().err
    assert "wall_clock must be a positive" in err
    assert "'none' means no limit" in err


def test_the_summary_counts_in_words_that_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sandbox run``'s last line says ``1 call`` (not ``1 calls``) and the result bytes
    as a size (the value 3 is one byte of JSON)."""
    program = tmp_path / "one.py"
    program.write_text("host.word_count('a b c')\n")
    tools = Path(__file__).resolve().parents[2] / "examples" / "tools.py"
    assert exit_code(["run", str(program), "--tools", str(tools)]) == 0
    summary = capsys.readouterr().err.splitlines()[-1]
    assert summary.startswith("sandbox: 1 call, 1 byte of results, "), summary
