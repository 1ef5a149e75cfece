"""End to end: a model behind a real HTTP server on loopback (scripted) writes a program that
calls host tools concurrently inside a confined sandbox, and then finishes; and the same
through ``sandbox agent``, resumed from its trajectory file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import sandbox
from sandbox import Budget, confinement_gaps, plane
from sandbox._commands._main import main
from sandbox.agent import Agent, ContextWindow, OpenAICaller, PlaneTools
from tests.commands import exit_code

from .scripted import ScriptedServer, reply

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a run against the scripted model may take, its programs in the sandbox
#: included (each has a wall clock of 30 s at most); longer means it hangs. Two fit in the
#: file's per-test timeout.
DEADLINE = 45.0


def command(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m sandbox ARGS`` in a subprocess, as a person runs it, killed at
    :data:`DEADLINE`; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "sandbox", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=DEADLINE,
        check=False,
    )


PROGRAM = """
import asyncio
found = await asyncio.gather(*(host.lookup(key=k) for k in ["alpha", "beta", "gamma"]))
try:
    await host.remove(path="/etc/hosts")
    removed = "removed"
except Exception as exc:
    removed = exc.kind
{"found": found, "removed": removed}
"""


def tool_message(body: dict[str, Any]) -> str:
    content: str = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool")
    return content


def finish_with_program_value(body: dict[str, Any]) -> dict[str, Any]:
    value = json.loads(tool_message(body))["value"]
    answer = f"found {', '.join(value['found'])}; remove was {value['removed']}"
    return reply(tool_calls=[("call_2", "finish", {"answer": answer})])


@pytest.mark.anyio
@pytest.mark.skipif(bool(confinement_gaps()), reason="this host cannot confine")
async def test_a_model_runs_a_confined_program_that_calls_host_tools_then_finishes() -> None:
    inflight = 0
    most = 0
    removed: list[str] = []

    all_in = anyio.Event()

    async def lookup(key: str) -> str:
        """Look a key up (each waits, 5 s at most, until all three are in flight: calls
        made one after the other would each wait the whole time, and ``most`` say so)."""
        nonlocal inflight, most
        inflight += 1
        most = max(most, inflight)
        if inflight == 3:
            all_in.set()
        with anyio.move_on_after(5):
            await all_in.wait()
        inflight -= 1
        return key.upper()

    def remove(path: str) -> None:
        """Remove a file."""
        removed.append(path)

    def policy(call: plane.Call, tool: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        return plane.deny("nothing is removed here") if call.tool == "remove" else plane.ALLOW

    executor = plane.InProcess(
        [
            sandbox.Tool(lookup, annotations=plane.Annotations(read_only=True)),
            sandbox.Tool(remove, facts=lambda path: plane.Facts(writes=(path,))),
            plane.ProgramTool(level="confined", budget=Budget(wall_clock=30, max_calls=10)),
        ]
    )
    script: list[Any] = [
        reply(
            "I will look all three up at once.",
            tool_calls=[("call_1", "run_program", {"code": PROGRAM})],
        ),
        finish_with_program_value,
    ]
    with ScriptedServer(script) as server, anyio.fail_after(DEADLINE):
        tools = PlaneTools(await plane.Set.bind(executor, policy=policy))
        async with OpenAICaller("scripted", base_url=server.base_url, max_retries=0) as caller:
            agent = Agent(caller, tools, 5)
            window = ContextWindow(system="system", task="look up three keys", max_tokens=50_000)
            result = await agent.run(tools.specs(), window)
        requests = server.requests
    with anyio.fail_after(DEADLINE):
        await executor.aclose()
    assert result.finished, result.output
    assert result.output == "found ALPHA, BETA, GAMMA; remove was denied"
    assert most == 3, "the program's three host calls were in flight together"
    assert removed == [], "the policy refused the program's call of remove"
    assert len(requests) == 2
    ran = json.loads(tool_message(requests[1]))
    assert (ran["ok"], ran["calls"]) == (True, 4)
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert {"lookup", "remove", "run_program", "finish", "tool_result_read"} <= offered


TOOLS_MODULE = '''
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()
'''


def test_the_command_runs_writes_its_trajectory_and_resumes(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS_MODULE)
    trajectory = tmp_path / "run.jsonl"
    code = "await host.lookup(key='x')"
    first = [reply(tool_calls=[("c1", "run_program", {"code": code})])]
    with ScriptedServer(first) as server:
        common = ["--base-url", server.base_url, "--model", "m", "--level", "process"]
        common += ["--tools", str(tools)]
        ran = command(
            "agent", "find x", *common, "--max-steps", "1", "--trajectory", str(trajectory)
        )
    assert ran.returncode == 1, ran.stderr  # the step limit ended it unfinished
    records = [json.loads(line) for line in trajectory.read_text().splitlines()]
    assert records[0] == {"task": "find x"}
    steps = [r["step"] for r in records if "step" in r]
    assert [s["number"] for s in steps] == [1]
    assert json.loads(steps[0]["observation"])["value"] == "X"
    assert records[-1]["end"]["finished"] is False

    second = [reply(tool_calls=[("c2", "finish", {"answer": "X it is"})])]
    with ScriptedServer(second) as server:
        common[1] = server.base_url
        ran = command("agent", *common, "--max-steps", "3", "--resume", str(trajectory))
        sent = server.requests[0]["messages"]
    assert ran.returncode == 0, ran.stderr
    assert any(m["role"] == "tool" and '"X"' in m["content"] for m in sent), "resumed history"
    assert sent[1] == {"role": "user", "content": "find x"}
    records = [json.loads(line) for line in trajectory.read_text().splitlines()]
    numbers = [r["step"]["number"] for r in records if "step" in r]
    assert numbers == [1, 2]
    assert records[-1]["end"] == {"finished": True, "output": "X it is", "why": "finished"}


def test_the_command_shows_steps_live_and_says_when_the_model_fails() -> None:
    from .scripted import error

    script = [
        reply("Let me check.", tool_calls=[("c1", "run_program", {"code": "6 * 7"})]),
        reply(tool_calls=[("c2", "finish", {"answer": "42"})]),
    ]
    with ScriptedServer(script) as server:
        shown = command(
            "agent", "compute", "--base-url", server.base_url, "--model", "m", "--level", "process"
        )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "42"
    assert "── step 1" in shown.stderr
    assert "Let me check." in shown.stderr
    assert "→ run_program" in shown.stderr
    assert '"value":42' in shown.stderr

    with ScriptedServer([error(401, "bad key", "invalid_api_key")]) as server:
        failed = command(
            "agent", "compute", "--base-url", server.base_url, "--model", "m", "--level", "process"
        )
    assert failed.returncode == 4
    assert "bad key" in failed.stderr


#: A command that would reach no model: each refusal must come before it tries.
NOWHERE = ["agent", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (NOWHERE, "give a task"),
        (["agent", "--model", "m", "t"], "give --base-url"),
        ([*NOWHERE, "t", "--resume", "/nonexistent.jsonl"], "No such file"),
        ([*NOWHERE, "t", "--tools", "/nonexistent.py"], "cannot load tools module"),
        ([*NOWHERE, "t", "--max-calls", "-1"], "max_calls"),
        ([*NOWHERE, "t", "--max-steps", "many"], "--max-steps"),
    ],
)
def test_the_command_refuses_bad_usage_with_exit_two(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing task or URL, a file or module that does not exist, a value out of range:
    bad usage (exit 2, the documented code), before any model is called."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert exit_code(args) == 2
    assert says in capsys.readouterr().err


def test_a_trajectory_that_is_not_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "t"}\n{"step": {"number": "one"}}\n')
    args = [*NOWHERE, "--resume", str(bad)]
    assert main(args) == 4
    assert "not a trajectory record" in capsys.readouterr().err


def test_the_commands_verification_is_the_hosts(tmp_path: Path) -> None:
    tools = tmp_path / "edit_tools.py"
    tools.write_text(
        "from pathlib import Path\n\n\n"
        "def write_file(path: str, content: str) -> str:\n"
        '    """Write a file."""\n'
        f"    Path({str(tmp_path)!r}, path).write_text(content)\n"
        '    return "written"\n'
    )
    script = [
        reply(tool_calls=[("c1", "write_file", {"path": "a.txt", "content": "hi"})]),
        reply(tool_calls=[("c2", "finish", {"answer": "edited"})]),
    ]
    with ScriptedServer(script) as server:
        args = ["agent", "edit", "--base-url", server.base_url, "--model", "m"]
        args += ["--level", "process", "--tools", str(tools)]
        args += ["--verify", "cat a.txt; echo ' checked'; exit 3"]
        ran = command(*args, cwd=tmp_path)
        observed = tool_message(server.requests[1])
    assert ran.returncode == 0, ran.stderr
    assert observed.startswith("written")
    assert "[verify_on_edit] FAILED (exit 3): fix the failures" in observed
    assert "hi checked" in observed


def test_the_terminal_escapes_what_the_model_and_the_tools_wrote() -> None:
    """Live steps show control and bidirectional characters escaped, never raw."""
    import io

    from sandbox._commands._agent import Terminal
    from sandbox.agent._types import ToolCall

    out = io.StringIO()
    terminal = Terminal(out)
    hostile = "\x1b]0;owned\x07\x1b[2J\r── step 9\u202e"
    terminal.thought(1, hostile, hostile)
    call = ToolCall(id="c1", name="run_program", arguments=hostile)
    terminal.tool_call(1, call)
    terminal.tool_result(1, call, hostile, False)
    shown = out.getvalue()
    assert [c for c in ("\x1b", "\r", "\x07", "\u202e") if c in shown] == []
    assert shown.count("\\x1b]0;owned\\x07") == 4


def test_without_the_agent_extra_the_command_names_it(tmp_path: Path) -> None:
    """Without ``openai`` (the ``agent`` extra), ``sandbox agent`` exits 4 with one line
    naming the extra and the pip command that installs it, not a traceback."""
    ran = subprocess.run(
        [sys.executable, "-m", "tests.missing_extra", "openai", *NOWHERE, "a task"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 4, ran.stderr
    assert "Traceback" not in ran.stderr
    assert ran.stderr.splitlines() == [
        "sandbox agent needs the 'agent' extra, which is not installed (no module named "
        "'openai'): pip install 'sandbox-runtime[agent]'"
    ]
