"""The program's output as it comes: ``run(..., on_output=...)`` and ``sandbox run``.

Each test that needs the first output to arrive before the run ends makes the program
wait for something only that arrival releases (a host tool that waits for the callback,
a file the test creates once it has read the first line): without streaming, the program
would wait until its wall clock, and the test fails.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import sandbox
from sandbox import Budget, Level, Tool
from tests.host import child_levels

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent.parent
#: The longest any of these runs may take; reaching it means the output was not streamed.
WALL_CLOCK = 30.0

#: Prints a line, then waits until the host's ``released`` tool returns, then prints again.
WAITS_FOR_THE_HOST = """
import sys
print("first", flush=True)
print("first on stderr", file=sys.stderr)
host.released()
print("second")
"done"
"""


@pytest.mark.usefixtures("spawn")
@pytest.mark.parametrize("level", child_levels())
async def test_the_first_line_arrives_while_the_program_waits(level: Level) -> None:
    """The callback sees the program's first lines while the program is blocked on a tool
    that returns only once the callback has seen them; then the rest, before ``run``
    returns; what it saw is the result's output, each stream apart."""
    events: list[str] = []
    seen = {"stdout": "", "stderr": ""}
    both_seen = anyio.Event()

    def on_output(name: str, text: str) -> None:
        seen[name] += text
        events.append(f"{name}: {text!r}")
        if "first\n" in seen["stdout"] and "first on stderr\n" in seen["stderr"]:
            both_seen.set()

    async def released() -> None:
        events.append("program waits")
        await both_seen.wait()
        events.append("program released")

    result = await sandbox.run(
        WAITS_FOR_THE_HOST,
        tools=[Tool(released)],
        level=level,
        budget=Budget(wall_clock=WALL_CLOCK),
        on_output=on_output,
    )
    assert result.ok, (result.error, events)
    assert result.value == "done"
    assert (seen["stdout"], seen["stderr"]) == (result.stdout, result.stderr)
    assert result.stdout == "first\nsecond\n"
    assert result.stderr == "first on stderr\n"
    released_at = events.index("program released")
    assert any("second" in event for event in events[released_at:]), events
    assert not any("second" in event for event in events[:released_at]), events


async def test_a_sleeping_programs_first_line_arrives_before_it_wakes() -> None:
    """A program that prints, sleeps 1.5 s and prints again: by the time it wakes (and
    asks the host what it has seen), the callback has been told the first line, and
    nothing of the second."""
    told: list[str] = []
    seen_when_awake: list[list[str]] = []

    async def on_output(name: str, text: str) -> None:  # an async callback is awaited
        await anyio.lowlevel.checkpoint()
        told.append(text)

    def awake() -> None:
        seen_when_awake.append(list(told))

    result = await sandbox.run(
        "import time\nprint('one', flush=True)\ntime.sleep(1.5)\nhost.awake()\nprint('two')",
        tools=[Tool(awake)],
        budget=Budget(wall_clock=WALL_CLOCK),
        on_output=on_output,
    )
    assert result.ok, result.error
    assert ["".join(seen) for seen in seen_when_awake] == ["one\n"]
    assert "".join(told) == "one\ntwo\n"


async def test_what_is_told_is_what_is_kept() -> None:
    """Past ``max_output``, nothing more is told: the text told is the result's, cut at
    the same byte, and the result says it was cut."""
    told: list[str] = []
    result = await sandbox.run(
        "for i in range(1000):\n    print('x' * 99)",
        budget=Budget(max_output=1000),
        on_output=lambda name, text: told.append(text),
    )
    assert result.ok, result.error
    assert "".join(told) == result.stdout == ("x" * 99 + "\n") * 10
    assert result.stdout_truncated
    assert result.stdout_bytes == 100_000


async def test_a_character_split_between_writes_is_told_whole() -> None:
    """A UTF-8 character whose bytes come in two writes (with a host call between them)
    is told once, whole; an incomplete one at the end is told as U+FFFD, as the result
    has it."""
    told: list[str] = []
    program = """
import sys
sys.stdout.buffer.write(b"\\xc3")
host.nothing()
sys.stdout.buffer.write(b"\\xa9 and \\xe2\\x82")
"""

    def nothing() -> None:
        pass

    result = await sandbox.run(
        program, tools=[Tool(nothing)], on_output=lambda name, text: told.append(text)
    )
    assert result.ok, result.error
    assert "".join(told) == result.stdout == "\u00e9 and \ufffd"
    assert all("\ufffd" not in text for text in told[:-1])


async def test_a_callback_that_raises_stops_the_run() -> None:
    """An exception from ``on_output`` stops the run at once (the program would sleep a
    minute) and propagates from ``run``; nothing of the run is left (the fixture)."""

    def on_output(name: str, text: str) -> None:
        raise LookupError(f"no room for {text!r}")

    started = time.monotonic()
    with pytest.raises(LookupError, match="no room for 'hello"):
        await sandbox.run(
            "import time\nprint('hello', flush=True)\ntime.sleep(60)",
            budget=Budget(wall_clock=60.0),
            on_output=on_output,
        )
    assert time.monotonic() - started < 30.0


async def test_in_process_refuses_on_output() -> None:
    """``in_process`` captures no output (the program writes to the host's own streams):
    asking to be told it is refused, not ignored."""
    with pytest.raises(ValueError, match="on_output needs a child level"):
        await sandbox.run("1", level=Level.IN_PROCESS, on_output=lambda name, text: None)


def test_run_sync_tells_the_output_too() -> None:
    """``run_sync`` takes ``on_output`` as ``run`` does."""
    told: list[tuple[str, str]] = []
    result = sandbox.run_sync(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)",
        on_output=lambda name, text: told.append((name, text)),
    )
    assert result.ok, result.error
    joined = {name: "".join(t for n, t in told if n == name) for name in ("stdout", "stderr")}
    assert joined == {"stdout": "out\n", "stderr": "err\n"}


def _line_within(stream: object, seconds: float) -> str | None:
    """The next line of a pipe (a Popen's stdout), or None if none comes in ``seconds``."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    got = b""
    deadline = time.monotonic() + seconds
    while not got.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1)
        if not chunk:
            return None
        got += chunk
    return got.decode()


def test_the_command_line_shows_output_as_it_comes(tmp_path: Path) -> None:
    """``sandbox run``: the program's first line is on the command's stdout (and its
    stderr line on stderr) while the program waits for a file that the test creates only
    once it has read that line; then the rest, the value, and the exit code."""
    go = tmp_path / "go"
    program = tmp_path / "program.py"
    program.write_text(
        "import os, sys, time\n"
        "print('first', flush=True)\n"
        "print('first on stderr', file=sys.stderr)\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.05)\n"
        "print('second')\n"
        "42\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "run", str(program), "--timeout", str(WALL_CLOCK)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = _line_within(proc.stdout, WALL_CLOCK / 2)
        first_err = _line_within(proc.stderr, WALL_CLOCK / 2)
        assert not go.exists()
        go.touch()
        out, err = proc.communicate(timeout=WALL_CLOCK)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (first, first_err) == ("first\n", "first on stderr\n")
    assert proc.returncode == 0, err
    assert out.decode() == "second\n42\n"
    assert err.decode().startswith("sandbox: 0 calls")
