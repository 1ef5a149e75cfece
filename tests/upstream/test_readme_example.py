"""The README's code-mode section: its Python example and its program run as written,
against the installed filesystem server instead of npx's download."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from .servers import command

ROOT = Path(__file__).resolve().parents[2]
NPX = "npx -y @modelcontextprotocol/server-filesystem@2026.8.31"


def section() -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(
        r"^## Code mode over MCP servers.*?(?=^##\s)", readme, re.MULTILINE | re.DOTALL
    )
    assert found, "the README has no code-mode section"
    return found.group(0)


def test_readme_api_example_runs(tmp_path: Path) -> None:
    """The API example lists the directory through the real server and prints the stubs."""
    installed = shlex.join(command("filesystem"))
    (tmp_path / "a.txt").write_text("needle")
    blocks = re.findall(r"```python\n(.*?)```", section(), re.DOTALL)
    example = next(b for b in blocks if "Upstreams(" in b)
    script = example.replace(NPX, installed).replace("/srv/docs", str(tmp_path))
    ran = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "async def fs__read_text_file(" in ran.stdout
    assert "{'content': '[FILE] a.txt'}" in ran.stdout


def test_readme_command_line_program_runs(tmp_path: Path) -> None:
    """``sandbox run find.py --mcp-read-only --mcp 'fs=...'`` as the README shows it."""
    installed = shlex.join(command("filesystem"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "small.txt").write_text("a needle")
    (docs / "big.txt").write_text("a longer needle here")
    (docs / "none.txt").write_text("hay")
    program = next(
        b for b in re.findall(r"```python\n(.*?)```", section(), re.DOTALL) if "gather" in b
    )
    (tmp_path / "find.py").write_text(program.replace("/srv/docs", str(docs)))
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            "run",
            str(tmp_path / "find.py"),
            "--mcp-read-only",
            "--mcp",
            f"fs={installed} {docs}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == '[[8,"small.txt"],[20,"big.txt"]]'
