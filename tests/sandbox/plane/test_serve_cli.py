"""``sandbox serve``'s refusals, nothing served: bad usage exits 2 (the documented code),
what this host cannot do exits 4, each with a message."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sandbox._commands._main import main
from sandbox._commands._options import DISTRIBUTION, EXTRAS
from tests.commands import exit_code

SERVED = str(Path(__file__).parent / "served.py")
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--http", "nonsense"], "HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "HOST:PORT"),
        (["--tools", "/nonexistent/tools.py"], "cannot load tools module"),
        (["--max-calls", "-1"], "max_calls"),
        (["--max-inflight", "none"], "the in-flight cap is always enforced"),
        (["--max-memory", "1000"], "max_memory must be at least 16 MiB"),
        (["--http", "127.0.0.1:0", "--idle", "0"], "idle"),
        (["--http", "127.0.0.1:0", "--idle", "soon"], "--idle"),
        (["--http", "127.0.0.1:0", "--oauth-issuer", "https://issuer.example"], "both"),
        (["--http", "127.0.0.1:0", "--oauth-scope", "run"], "go with --oauth-issuer"),
        (["--http", "127.0.0.1:0", "--tls-cert", "/nonexistent/cert.pem"], "and its key"),
        (["--level", "nowhere"], "--level"),
    ],
)
def test_serve_refuses_bad_usage_with_exit_two(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed or out-of-range value, a module that does not exist, options that do not
    go together: exit 2, naming the problem."""
    assert exit_code(["serve", "--level", "process", "--tools", SERVED, *args]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Whoever reaches the port runs code: not loopback, not without a token.
        (["--http", "203.0.113.7:0"], "needs a bearer token or OAuth"),
        (["--http", "0.0.0.0:0"], "needs a bearer token or OAuth"),
        (["--http", "[::]:0"], "needs a bearer token or OAuth"),
        (["--http", "203.0.113.7:0", "--no-auth"], "Cannot assign"),  # it tried to bind
        (["--http", "127.0.0.1:0", "--token-env", "SANDBOX_UNSET"], "shorter than 16"),
        (["--http", "127.0.0.1:0", "--token-file", "/nonexistent/token"], "No such file"),
        (
            [
                "--http",
                "127.0.0.1:0",
                "--tls-cert",
                "/nonexistent/c.pem",
                "--tls-key",
                "/nonexistent/k.pem",
            ],
            "No such file",
        ),
    ],
)
def test_serve_refuses_what_it_cannot_do_with_exit_four(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--level", "process", "--tools", SERVED, *args]) == 4
    assert says in capsys.readouterr().err


def test_without_the_mcp_extra_serve_names_it() -> None:
    """Without the MCP SDK (the ``mcp`` extra), ``sandbox serve`` exits 4 with one line
    naming the extra and the pip command that installs it, not a traceback."""
    ran = subprocess.run(
        [sys.executable, "-m", "tests.missing_extra", "mcp,mcp_types", "serve"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 4, ran.stderr
    assert "Traceback" not in ran.stderr
    [line] = ran.stderr.splitlines()
    assert line.startswith("sandbox serve needs the 'mcp' extra, which is not installed")
    assert line.endswith(": pip install 'sandbox-runtime[mcp]'")


def test_the_extras_named_are_those_of_pyproject() -> None:
    """Each extra a missing module is blamed on is one of the distribution's, and brings a
    package of that module's name (``jwt`` comes as ``pyjwt``, ``mcp_types`` with ``mcp``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    extras = project["optional-dependencies"]
    package_of = {"jwt": "pyjwt", "mcp_types": "mcp"}
    for module, extra in EXTRAS.items():
        assert extra in extras, module
        packages = [req.split("[")[0].split(">")[0].split("<")[0] for req in extras[extra]]
        assert package_of.get(module, module) in packages, (module, extra)


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


def test_serve_binds_a_public_address_with_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a token, an address that is not loopback is served: here one this host does not
    have, so that binding it fails (and nothing is served to anyone)."""
    monkeypatch.setenv("SANDBOX_TEST_TOKEN", "a-bearer-token-of-32-characters!")
    args = ["--http", "203.0.113.7:0", "--token-env", "SANDBOX_TEST_TOKEN"]
    assert main(["serve", "--level", "process", "--tools", SERVED, *args]) == 4
    assert "Cannot assign" in capsys.readouterr().err
