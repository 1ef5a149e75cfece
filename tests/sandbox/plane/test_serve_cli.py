"""``sandbox serve``'s refusals: each a message and exit code 4, nothing served."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox._commands._main import main

SERVED = str(Path(__file__).parent / "served.py")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--http", "nonsense"], "HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "HOST:PORT"),
        (["--tools", "/nonexistent/tools.py"], "cannot load tools module"),
        (["--max-calls", "-1"], "max_calls"),
        (["--max-inflight", "none"], "the in-flight cap is always enforced"),
        (["--http", "127.0.0.1:0", "--idle", "0"], "idle"),
        # Whoever reaches the port runs code: not loopback, not without a token.
        (["--http", "203.0.113.7:0"], "needs a bearer token or OAuth"),
        (["--http", "0.0.0.0:0"], "needs a bearer token or OAuth"),
        (["--http", "[::]:0"], "needs a bearer token or OAuth"),
        (["--http", "203.0.113.7:0", "--no-auth"], "Cannot assign"),  # it tried to bind
        (["--http", "127.0.0.1:0", "--token-env", "SANDBOX_UNSET"], "shorter than 16"),
        (["--http", "127.0.0.1:0", "--token-file", "/nonexistent/token"], "No such file"),
        (["--http", "127.0.0.1:0", "--oauth-issuer", "https://issuer.example"], "both"),
        (["--http", "127.0.0.1:0", "--oauth-scope", "run"], "go with --oauth-issuer"),
        (["--http", "127.0.0.1:0", "--tls-cert", "/nonexistent/cert.pem"], "and its key"),
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


def test_serve_binds_a_public_address_with_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a token, an address that is not loopback is served: here one this host does not
    have, so that binding it fails (and nothing is served to anyone)."""
    monkeypatch.setenv("SANDBOX_TEST_TOKEN", "a-bearer-token-of-32-characters!")
    args = ["--http", "203.0.113.7:0", "--token-env", "SANDBOX_TEST_TOKEN"]
    assert main(["serve", "--level", "process", "--tools", SERVED, *args]) == 4
    assert "Cannot assign" in capsys.readouterr().err
