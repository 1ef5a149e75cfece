"""The README's commands work on a fresh clone, run the way a new user runs them."""

from __future__ import annotations

import faulthandler
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTION = "The two commands"
#: The whole test: a clone, a fresh .venv installed from the package index, the suite.
BUDGET = 15 * 60.0
#: What ``make test`` runs of the clone's suite. The whole suite runs here already, on
#: the same commit: the clone proves the install, the lint, the type check and the test
#: command from nothing, with a part of the suite that goes through the installed entry
#: point (the ``sandbox`` script against ``python -m sandbox``) and real children (the
#: wire's end-to-end tests), not this test again. ``make demo`` before it has run programs
#: through the installed script as well.
PYTEST_ARGS = " ".join(
    (
        "tests/protocol/test_e2e.py",
        "tests/sandbox/test_cli.py::test_console_script_works_like_python_dash_m",
    )
)
#: Set by a developer's shell or by the test's own process (make, pytest, a venv), not by
#: a fresh login.
NOT_A_FRESH_USER = ("PY", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "PYTEST_ADDOPTS")
NOT_A_FRESH_USER_PREFIXES = ("MAKE", "MFLAGS", "PYTEST_")


def readme_commands(readme: str) -> list[str]:
    """The command lines of the ```sh block in the README's "The two commands" section.

    Each line is a command and a comment (``make test  # what it does``), kept as written:
    a shell runs it as the README's reader would.
    """
    section = re.search(
        rf"^##\s+{re.escape(SECTION)}\s*$(.*?)(?=^##\s|\Z)", readme, re.MULTILINE | re.DOTALL
    )
    assert section is not None, f"README.md has no {SECTION!r} section"
    block = re.search(r"^```sh\s*$(.*?)^```\s*$", section.group(1), re.MULTILINE | re.DOTALL)
    assert block is not None, f"README.md's {SECTION!r} section has no ```sh block"
    lines = block.group(1).splitlines()
    return [line.strip() for line in lines if shlex.split(line, comments=True)]


def test_readme_commands_parse() -> None:
    """The README's section holds at least one command, each a ``make`` target."""
    commands = readme_commands((ROOT / "README.md").read_text())
    assert commands
    for command in commands:
        words = shlex.split(command, comments=True)
        assert len(words) == 2, command
        assert words[0] == "make", command


def fresh_user_env() -> dict[str, str]:
    """This machine's environment without what the test process adds to it."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in NOT_A_FRESH_USER and not key.startswith(NOT_A_FRESH_USER_PREFIXES)
    }
    if sys.prefix != sys.base_prefix:  # the test runs from a virtual environment: leave it
        venv_bin = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(
            entry for entry in env.get("PATH", "").split(os.pathsep) if entry != venv_bin
        )
    env["PYTEST_ARGS"] = PYTEST_ARGS
    return env


@pytest.mark.slow
@pytest.mark.timeout(BUDGET + 60)
def test_readme_commands_on_a_fresh_clone(tmp_path: Path) -> None:
    """A clone of HEAD runs each of the README's commands with exit code 0, in order."""
    # Minutes, not a hang: no stack dump at the suite's faulthandler_timeout (50 s).
    faulthandler.cancel_dump_traceback_later()
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: cannot clone the repository")
    clone = tmp_path / "clone"
    subprocess.run(
        [git, "clone", "--quiet", ROOT.as_uri(), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    commands = readme_commands((clone / "README.md").read_text())
    assert commands
    env = fresh_user_env()
    assert shutil.which("python3", path=env["PATH"]), "no python3 on PATH"
    deadline = time.monotonic() + BUDGET
    for command in commands:
        proc = subprocess.run(
            command,
            shell=True,
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=max(deadline - time.monotonic(), 1.0),
            check=False,
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{command!r} exited {proc.returncode}:\n{output[-20000:]}"


def test_readme_plane_example_runs(tmp_path: Path) -> None:
    """The execution plane's example in the README runs and prints what it says it does."""
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## The execution plane.*?(?=^##\s)", readme, re.MULTILINE | re.DOTALL)
    assert section, "the README has no execution plane section"
    block = re.search(r"```python\n(.*?)```", section.group(0), re.DOTALL)
    assert block, "the section has no python example"
    script = tmp_path / "example.py"
    script.write_text(block.group(1))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "denied"


def test_readme_says_what_each_command_needs() -> None:
    """The README's install section names the extra of each command, with its pip command,
    and says where the ``sandbox`` command is."""
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Install\s*$(.*?)(?=^##\s)", readme, re.MULTILINE | re.DOTALL)
    assert section, "the README has no Install section"
    text = " ".join(section.group(1).split())
    for command, extra in (("sandbox serve", "mcp"), ("sandbox agent", "agent")):
        assert command in text
        assert f"pip install 'sandbox-runtime[{extra}]'" in text
    assert ".venv/bin/sandbox" in text
    assert "source .venv/bin/activate" in text


def test_the_license_pyproject_promises_is_there() -> None:
    """pyproject says ``license = "MIT"``; the LICENSE file holds the MIT text."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) ")
    assert "the sandbox-runtime authors" in text.splitlines()[2]
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_the_only_command_put_on_path_is_sandbox() -> None:
    """The runner is started by the host (``python -I -S -c 'from runner import ...'``),
    never by a person: an install puts only ``sandbox`` on PATH."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"sandbox": "sandbox._commands:main"}
