"""The Python backend: host calls, arguments, values and failures, in a real runner process."""

from __future__ import annotations

import json
from collections.abc import Awaitable

import anyio
import pytest

from protocol import CallError, Kind, Request, StartBinding

from .helpers import ROOT, assert_closed, one_pipe_then_emfile, run_program

pytestmark = pytest.mark.anyio

SEARCH = StartBinding(name="search", signature="search(query, limit=10)")
GET_LOGS = StartBinding(name="get_logs", signature="get_logs(host, count)")


# -- calls -------------------------------------------------------------------------------


async def test_64_gathered_calls_are_64_calls_in_flight() -> None:
    """Top-level await with asyncio.gather: 64 host calls are in flight at once."""
    arrived = 0
    all_in = anyio.Event()

    async def hold_until_all_arrive(request: Request) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 64:
            all_in.set()
        await all_in.wait()
        return request.args

    program = "import asyncio\nawait asyncio.gather(*(host.echo(i) for i in range(64)))"
    run = await run_program(program, handler=hold_until_all_arrive)
    assert run.value == list(range(64))
    assert run.stats.peak_inflight == 64
    assert run.stats.calls == 64
    assert run.result.calls == 64


async def test_a_plain_script_calls_without_await() -> None:
    """With no event loop running, a host call blocks and returns the value itself."""
    run = await run_program("a = host.echo({'x': 1})\nb = host.echo([a, 2])\nb")
    assert run.value == [{"x": 1}, 2]


async def test_blocking_form_blocks_even_under_a_running_loop() -> None:
    """``host.<tool>.blocking()`` returns the value, not an awaitable, inside asyncio."""
    program = (
        "import inspect\n"
        "pending = host.echo(1)\n"
        "blocked = host.echo.blocking(2)\n"
        "[inspect.isawaitable(pending), await pending, blocked]"
    )
    run = await run_program(program)
    assert run.value == [True, 1, 2]


async def test_async_functions_under_asyncio_run_get_awaitables() -> None:
    """A program that starts its own loop with asyncio.run gets the awaitable form there."""
    program = (
        "import asyncio\n"
        "async def main():\n"
        "    return await asyncio.gather(host.echo('a'), host.echo('b'))\n"
        "asyncio.run(main())"
    )
    run = await run_program(program)
    assert run.value == ["a", "b"]


# -- arguments ---------------------------------------------------------------------------


async def test_signature_arguments_by_position_and_keyword() -> None:
    """Arguments are sent as a JSON object by parameter name, as passed, without defaults."""
    program = (
        "[host.search('a'), host.search('b', 5), host.search(query='c', limit=2),\n"
        " host.search('d', limit=3), host.get_logs('web1', 7),"
        " host.get_logs(host='web2', count=8)]"
    )
    run = await run_program(program, bindings=[SEARCH, GET_LOGS])
    assert run.value == [
        {"query": "a"},
        {"query": "b", "limit": 5},
        {"query": "c", "limit": 2},
        {"query": "d", "limit": 3},
        {"host": "web1", "count": 7},
        {"host": "web2", "count": 8},
    ]


async def test_a_tool_without_signature_takes_one_json_argument() -> None:
    """No signature: the one argument is sent as its JSON text; no argument sends null."""
    seen: list[str] = []

    def record(request: Request) -> str:
        seen.append(request.args)
        return request.args

    program = "[host.echo('text'), host.echo({'k': [1, 2]}), host.echo()]"
    run = await run_program(program, handler=record)
    assert run.value == ["text", {"k": [1, 2]}, None]
    assert seen == ['"text"', '{"k":[1,2]}', "null"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("host.search('a', 1, 2)", "takes 2 positional arguments but 3 were given"),
        ("host.search('a', colour='red')", "unexpected keyword argument 'colour'"),
        ("host.search('a', query='b')", "multiple values for argument 'query'"),
        ("host.get_logs('web1', 10, 3)", "takes 2 positional arguments but 3 were given"),
        ("host.echo(1, 2)", "takes one argument"),
        ("host.echo(value=1)", "takes one argument"),
        ("host.echo(object())", "object"),
        ("host.search({1, 2}, limit=lambda: 0)", "function"),
    ],
    ids=[
        "too-many",
        "unknown-kw",
        "twice",
        "host-is-an-argument",
        "no-sig-two",
        "no-sig-kw",
        "unencodable",
        "unencodable-kw",
    ],
)
async def test_wrong_arguments_raise_type_error_in_the_program(call: str, message: str) -> None:
    """Arguments the signature refuses, or that have no JSON form: TypeError, nothing sent."""
    caught = await run_program(
        f"try:\n    {call}\nexcept TypeError as exc:\n    caught = str(exc)\ncaught",
        bindings=["echo", SEARCH, GET_LOGS],
    )
    assert isinstance(caught.value, str)
    assert message in caught.value
    uncaught = await run_program(call, bindings=["echo", SEARCH, GET_LOGS])
    assert uncaught.result.kind is Kind.RAISED
    assert "TypeError" in uncaught.result.error
    assert caught.stats.calls == uncaught.stats.calls == 0


async def test_a_result_that_is_not_json_comes_back_as_text() -> None:
    """A tool's value is JSON-decoded; text that is not JSON is returned as it is."""

    def plain(request: Request) -> str:
        return "plain text, not JSON" if request.tool == "plain" else request.args

    run = await run_program("[host.plain(0), host.echo('1')]", ["plain", "echo"], plain)
    assert run.value == ["plain text, not JSON", "1"]


async def test_an_unknown_tool_raises_attribute_error_listing_the_tools() -> None:
    """``host.<unknown>`` raises AttributeError naming the tools there are."""
    run = await run_program("host.nope(1)", bindings=["echo", SEARCH])
    assert run.result.kind is Kind.RAISED
    assert "AttributeError: host has no tool named 'nope'" in run.result.error
    assert "available tools: echo, search" in run.result.error
    listed = await run_program("sorted(dir(host))", bindings=["echo", SEARCH])
    assert listed.value == ["echo", "search"]


async def test_an_unreadable_signature_fails_the_run_as_invalid() -> None:
    """A binding whose signature the runner cannot read: the run fails, kind invalid."""
    bad = StartBinding(name="odd", signature="odd(1, 2)")
    run = await run_program("1", bindings=[bad])
    assert run.result.kind is Kind.INVALID
    assert "'odd'" in run.result.error


# -- tool failures -----------------------------------------------------------------------


def fail_with_kind(request: Request) -> str | Awaitable[str]:
    """The ``fail`` tool fails with the kind named in its argument; others echo."""
    if request.tool == "fail":
        raise CallError(Kind(json.loads(request.args)), "as asked")
    return request.args


@pytest.mark.parametrize("kind", [Kind.DENIED, Kind.INVALID, Kind.TRANSIENT, Kind.RAISED])
async def test_a_failed_call_raises_call_error_with_its_kind(kind: Kind) -> None:
    """A tool failure is a CallError in the program, carrying the parent's kind."""
    program = (
        "from protocol import CallError\n"
        "try:\n"
        f"    host.fail({kind.value!r})\n"
        "except CallError as exc:\n"
        "    caught = [exc.kind.value, exc.message]\n"
        "caught"
    )
    run = await run_program(program, ["fail"], fail_with_kind)
    assert run.value == [kind.value, "as asked"]


@pytest.mark.parametrize("kind", [Kind.DENIED, Kind.TRANSIENT])
async def test_an_uncaught_call_error_fails_the_run_with_its_kind(kind: Kind) -> None:
    """A CallError escaping the program keeps its kind in the Result."""
    run = await run_program(f"await host.fail({kind.value!r})", ["fail"], fail_with_kind)
    assert not run.result.ok
    assert run.result.kind is kind
    assert "as asked" in run.result.error


async def test_an_exhausted_call_quota_fails_the_run_as_limit() -> None:
    """Past the parent's MaxCalls the call fails ``limit``; uncaught, so does the run."""
    run = await run_program("host.echo(1)\nhost.echo(2)", max_calls=1)
    assert run.result.kind is Kind.LIMIT
    assert "quota" in run.result.error
    assert run.stats.calls == 1


# -- how programs end --------------------------------------------------------------------


async def test_a_traceback_shows_the_programs_frames_only() -> None:
    """An uncaught exception's traceback has the program's lines and no runner internals."""
    program = "x = 1\ndef f(y):\n    raise ValueError(f'bad {y}')\nf(x)"
    run = await run_program(program)
    error = run.result.error
    assert run.result.kind is Kind.RAISED
    assert error.startswith("Traceback (most recent call last):")
    assert 'File "<program>", line 4, in <module>' in error
    assert 'File "<program>", line 3, in f' in error
    assert "raise ValueError(f'bad {y}')" in error  # the source line is shown
    assert error.endswith("ValueError: bad 1")
    for internal in ("runner", "protocol", "<string>", "exec("):
        assert internal not in error


async def test_a_call_error_traceback_leaves_out_the_call_machinery() -> None:
    """A failed call's traceback ends at the program's call, not in runner or protocol code."""
    program = "import asyncio\nasync def go():\n    await host.fail('denied')\nawait go()"
    run = await run_program(program, ["fail"], fail_with_kind)
    error = run.result.error
    assert 'File "<program>", line 3, in go' in error
    assert "/runner/" not in error
    assert "/protocol/" not in error
    assert "asyncio/runners.py" not in error


async def test_a_syntax_error_fails_as_invalid_with_its_line() -> None:
    """A program that does not compile: kind invalid, with the message and the line."""
    run = await run_program("x = 1\ny = (x +\n")
    assert run.result.kind is Kind.INVALID
    assert "SyntaxError" in run.result.error
    assert "line 2" in run.result.error


async def test_a_value_without_json_form_fails_as_invalid_naming_its_type() -> None:
    """The program's value must encode as JSON; the error names the type that does not."""
    run = await run_program("class Thing:\n    pass\n[1, Thing()]")
    assert run.result.kind is Kind.INVALID
    assert "__main__.Thing" in run.result.error


async def test_memory_error_fails_the_run_as_limit() -> None:
    """MemoryError escaping the program: kind limit, and the error says memory was the cause."""
    run = await run_program("def grow():\n    raise MemoryError\ngrow()")
    assert run.result.kind is Kind.LIMIT
    assert "out of memory" in run.result.error
    assert "line 2" in run.result.error


@pytest.mark.parametrize(
    ("program", "code"),
    [
        ("raise SystemExit", "null"),
        ("import sys\nsys.exit(0)", "0"),
        ("import sys\nsys.exit(None)\n1", "null"),
        ("import sys\nsys.exit(3)", "3"),
        ("import sys\nsys.exit('bye')", '"bye"'),
        ("exit()", "null"),
        ("quit(0)", "0"),
        ("raise SystemExit(object)", "\"<class 'object'>\""),
    ],
    ids=["bare", "zero", "none", "three", "message", "exit", "quit", "no-json-form"],
)
async def test_system_exit_is_a_failure_that_keeps_its_code(program: str, code: str) -> None:
    """A program that exits, with any code, produced no value: raised, the code kept."""
    run = await run_program(program)
    assert run.result.ok is False
    assert run.result.kind is Kind.RAISED
    assert "SystemExit" in run.result.error
    assert run.result.value == code
    assert run.status == 0


async def test_the_program_runs_as_a_fresh_main_module() -> None:
    """``__name__`` is ``"__main__"`` and sys.modules["__main__"] is the program's module."""
    program = (
        "import dataclasses, pickle, sys\n"
        "@dataclasses.dataclass\n"
        "class Point:\n"
        "    x: int\n"
        "p = pickle.loads(pickle.dumps(Point(3)))\n"
        "[__name__, sys.modules['__main__'].Point is Point, p.x]"
    )
    run = await run_program(program)
    assert run.value == ["__main__", True, 3]


async def test_runner_future_imports_do_not_leak_into_the_program() -> None:
    """The program compiles with its own flags: annotations are evaluated, not strings."""
    run = await run_program("def f(x: int) -> None: ...\nf.__annotations__['x'] is int")
    assert run.value is True


async def test_the_warm_up_before_the_start_leaves_nothing_behind() -> None:
    """``prepare`` runs a small program (``x = [1]``) so that the first real one is fast;
    the real program sees none of it: not its names, not its source lines."""
    program = (
        "import linecache, sys\n"
        "here = sys._getframe().f_code.co_filename\n"
        "main = sys.modules['__main__'].__dict__\n"
        "['x' in globals(), linecache.getline(here, 1), main is globals()]"
    )
    run = await run_program(program)
    assert run.value == [False, "import linecache, sys\n", True]


#: Prepares a backend in a fresh interpreter, for programs that await too or not, and says
#: what the program would find after: whether asyncio is loaded, the policy's state, the
#: threads and descriptors, what ``get_event_loop`` outside a loop gives, and what the
#: warm-up programs come to when run again.
PREPARED = """
import json, os, sys, threading, warnings
fds = sorted(os.listdir("/proc/self/fd"))
from runner._backends import python
backend = python.PythonBackend()
backend.prepare()
calls, awaits = sys.argv[1] in ("calls", "awaiting"), sys.argv[1] == "awaiting"
backend.prepare_for(calls=calls, awaits=awaits)
values = python._warm_up()
if calls:
    values += python._warm_up_calls()
if awaits:
    values += python._warm_up_awaiting()
report = {"asyncio": "asyncio" in sys.modules, "threads": threading.active_count(),
          "fds_unchanged": sorted(os.listdir("/proc/self/fd")) == fds,
          "again": [v.decode() if isinstance(v, bytes) else repr(v) for v in values]}
if report["asyncio"]:
    import asyncio
    policy = asyncio.events._event_loop_policy
    report["policy"] = type(policy).__name__
    report["told"] = policy._local._set_called
    warnings.simplefilter("ignore")  # (get_event_loop outside a loop is deprecated)
    loop = asyncio.get_event_loop()
    report["loop"] = loop.run_until_complete(asyncio.sleep(0, "slept"))
    loop.close()
print(json.dumps(report))
"""


@pytest.mark.parametrize("programs", ["awaiting", "calls", "plain"])
def test_the_warm_ups_run_their_programs_and_leave_nothing(programs: str) -> None:
    """``prepare`` takes a plain program to its value; ``prepare_for`` one that calls a
    tool (over a channel of its own), and one that awaits two calls together, and does
    not import asyncio unless asked for the latter; it leaves asyncio as a fresh
    interpreter has it: a new policy that was told no loop, so ``get_event_loop`` still
    makes one. None leaves a thread or a descriptor behind."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", PREPARED, programs],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    common = {"threads": 1, "fds_unchanged": True}
    if programs == "plain":
        assert report == {**common, "asyncio": False, "again": ["[63]"]}
    elif programs == "calls":
        assert report == {**common, "asyncio": False, "again": ["[63]", "[63,1]"]}
    else:
        assert report == {
            **common,
            "asyncio": True,
            "again": ["[63]", "[63,1]", "[1,1]"],
            "policy": "_UnixDefaultEventLoopPolicy",
            "told": False,
            "loop": "slept",
        }


def test_a_warm_up_without_descriptors_to_spare_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No pipe for the warm-up's calls (``EMFILE``): ``prepare_for`` skips the warm-up and
    raises nothing, so the runner still serves its run."""
    import errno
    import os

    from runner._backends import python

    def no_pipe() -> tuple[int, int]:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "pipe", no_pipe)
    assert python._warm_up_calls() == []
    python.PythonBackend().prepare_for(calls=True, awaits=False)  # (raises nothing)
    assert python._warm_up_with(python._AWAITING_WARM_UP, "1", "2") == []


def test_a_warm_up_that_gets_one_pipe_of_two_closes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pipe made, the second refused: the warm-up is skipped and the first
    pipe's two descriptors are closed, not left to the program."""
    from runner._backends import python

    made = one_pipe_then_emfile(monkeypatch)
    assert python._warm_up_calls() == []
    assert len(made) == 2
    assert_closed(made)
