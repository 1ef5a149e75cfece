"""``sandbox run --mcp``, ``--mcp-http``, ``--mcp-read-only`` and ``sandbox describe``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.commands import exit_code

from .servers import FAKE, command, free_port, http_server

ROOT = Path(__file__).resolve().parents[2]
FAKE_LINE = "fake=" + shlex.join(FAKE)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the fake upstream is `python -m tests.upstream.fake_upstream`


def test_run_with_an_stdio_upstream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sandbox run --mcp`` binds the server's tools; the value is printed."""
    program = tmp_path / "p.py"
    program.write_text("await host.fake__echo(text='hi', times=3)")
    assert exit_code(["run", str(program), "--mcp", FAKE_LINE, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["value"] == {"result": "hihihi"}
    assert result["calls"] == 1


def test_run_with_read_only_upstreams_denies_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--mcp-read-only`` refuses tools without readOnlyHint: the program fails denied."""
    program = tmp_path / "p.py"
    program.write_text("await host.fake__echo(text='hi')")
    assert exit_code(["run", str(program), "--mcp", FAKE_LINE, "--mcp-read-only"]) == 1
    err = capsys.readouterr().err
    assert "denied" in err
    assert "refused by policy" in err


def test_run_with_an_http_upstream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sandbox run --mcp-http NAME=URL``."""
    program = tmp_path / "p.py"
    program.write_text("await host.web__echo(text='x')")
    port = free_port()
    with http_server([*FAKE, "http", str(port)], port) as url:
        assert exit_code(["run", str(program), "--mcp-http", f"web={url}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["value"] == {"result": "x"}


def test_an_upstream_that_cannot_start_exits_4_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that cannot start ends the command before the run, exit code 4, named."""
    program = tmp_path / "p.py"
    program.write_text("1")
    missing = str(tmp_path / "no-such-server")
    assert exit_code(["run", str(program), "--mcp", f"gone={missing} --x"]) == 4
    err = capsys.readouterr().err
    assert "upstream 'gone'" in err
    assert missing in err


def test_bad_mcp_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An --mcp that does not parse, or an --mcp-http that is no URL, is bad usage."""
    program = tmp_path / "p.py"
    program.write_text("1")
    assert exit_code(["run", str(program), "--mcp", "x='open"]) == 2
    assert "No closing quotation" in capsys.readouterr().err
    assert exit_code(["run", str(program), "--mcp-http", "ftp://h/"]) == 2
    assert "http" in capsys.readouterr().err
    assert exit_code(["describe"]) == 2
    assert "at least one server" in capsys.readouterr().err


def test_describe_prints_stubs_that_compile(capsys: pytest.CaptureFixture[str]) -> None:
    """``sandbox describe`` prints every tool as a typed stub, with its docstring."""
    assert exit_code(["describe", "--mcp", FAKE_LINE]) == 0
    text = capsys.readouterr().out
    compile(text, "<stubs>", "exec")
    assert "async def fake__echo(text: str, *, times: int = 1) -> FakeEchoResult:" in text
    assert "Say ``text`` back, ``times`` times." in text


@pytest.mark.slow
def test_describe_a_real_server(capsys: pytest.CaptureFixture[str]) -> None:
    """The memory server's tools, as stubs (typed from its input and output schemas)."""
    memory = shlex.join(command("memory"))
    assert exit_code(["describe", "--mcp", f"memory={memory}"]) == 0
    text = capsys.readouterr().out
    compile(text, "<stubs>", "exec")
    assert "async def memory__search_nodes(query: str) -> MemorySearchNodesResult:" in text
