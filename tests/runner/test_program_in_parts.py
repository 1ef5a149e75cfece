"""A program compiled in two parts, straight from its text, runs as the whole program does.

:func:`runner._backends.python.compile_program` compiles most programs as the lines before
their last line of code and that line to the end, an expression, where it is ``alone`` in
its process (a runner); any other program, and every program elsewhere, goes through
:mod:`ast`, as every program once did. Here that path is the oracle: each program is run
both ways, in this process, and must come to the same outcome (its value's JSON, or the
same failure with the same traceback, lines and carets included) and the same warnings.
"""

from __future__ import annotations

import functools
import linecache
import warnings

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from runner._backends import Outcome
from runner._backends.python import (
    PROGRAM_FILENAME,
    Program,
    _compile_in_parts,
    _compile_whole,
    _execute,
    compile_program,
)
from runner._host import Host

Ran = tuple[object, frozenset[tuple[str, str, int]]]

#: As a runner compiles a program: alone in its process.
in_a_runner = functools.partial(compile_program, alone=True)


def _run(compile_it: object, source: str) -> Ran:
    """What ``source`` comes to, compiled by ``compile_it``: its outcome (or the error
    that stopped its compile), and the warnings it gave."""
    # Its lines, for the traceback (compile_program registers them; the oracle does not).
    linecache.cache[PROGRAM_FILENAME] = (len(source), None, source.splitlines(True), "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            program = compile_it(source, PROGRAM_FILENAME)  # type: ignore[operator]
        except (SyntaxError, ValueError) as exc:
            outcome: object = ("does not compile", type(exc).__name__, str(exc))
        else:
            ended = _execute(program, Host.empty(), as_main=False)
            outcome = ended if isinstance(ended, bytes) else _plain(ended)
    seen = frozenset((w.category.__name__, str(w.message), w.lineno) for w in caught)
    return outcome, seen


def _plain(outcome: Outcome) -> tuple[object, ...]:
    return (outcome.ok, outcome.value, outcome.kind, outcome.error)


def _same_both_ways(source: str) -> Program | None:
    """Assert ``source`` runs the same whole and as :func:`compile_program` compiles it;
    the program in parts, where it is compiled so."""
    whole = _run(_compile_whole, source)
    assert _run(in_a_runner, source) == whole
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _compile_in_parts(source, PROGRAM_FILENAME)


IN_PARTS = [
    "1",
    "x = 2\nx * 21",
    "x = [\n    1,\n    2,\n]\nsum(x)",
    "def f():\n    return 3\n\nf()",
    "f = lambda: 4\nf()  # the value\n# the end\n\n",
    "import sys\nsys.maxsize > 0",
    "'just a string'",
    '"""a docstring"""\n__doc__',
    "x = 1\n(\n  x +\n  1\n)",
    "y = '''\nnot the end\n'''\ny",
    "class C:\n    pass\nC.__name__",
    "x = 5\n\f\nx",
    "x = 1\nx if x else (y := 2)",
    "[i * i for i in range(4)]",
    "{'a': 1} | {'b': 2}",
    "\n\n1 / 0",
    "def f():\n    raise ValueError('at the end')\nf()",
    "print('out')\nNone",
    "import sys\nsys.exit(3)",
    "case = 2\ncase",
    "match 3:\n    case 3:\n        y = 'matched'\ny",
    "float('nan')",
    "object()",
    "import asyncio\nawait asyncio.sleep(0, 'slept')",
    "import asyncio\nx = await asyncio.sleep(0, 6)\nx * 7",
    "import asyncio\nasync def g():\n    return 8\nawait g()",
    "import asyncio\nloop = asyncio.get_running_loop()\nawait asyncio.sleep(0)\nloop.is_running()",
    "import asyncio\nasyncio.get_running_loop().is_running()\nawait asyncio.sleep(0)",
    "import asyncio\nt = asyncio.ensure_future(asyncio.sleep(0, 'task'))\nawait t",
    "import asyncio\nasync def boom():\n    raise KeyError('in a task')\nawait boom()",
    "import asyncio\nasync def agen():\n    yield 1\n    yield 2\n[i async for i in agen()]",
    "import asyncio\nawait asyncio.sleep(0)\n1 / 0",
    "print('a string that says await')\n1",
]

WHOLE = [
    "",
    "x = 1",
    "# only a comment",
    "x = 1; x",
    "x = 1 + \\\n2",
    "y = '''\nx\n'''",
    "y = '''abc\n' + '''",
    "f = (\n1)",
    "if True:\n    x = 1\nelse:\n    x = 2",
    "if __name__ == '__main__':\n    x = 1\n    x",
    "@staticmethod\ndef f():\n    pass",
    "*a, b = [1, 2]\n*a, b",
    "from __future__ import annotations\n1",
    "import asyncio\nx = await asyncio.sleep(0, 1)",
    "import asyncio\nasync def g():\n    return 1\nasync for x in g():\n    pass",
    "x = 1\r\nx",
    "yield 1",
    "x = (\n",
    "1 +",
    "y := 1",
    "x = 1\n    x",
    "x = 1\n\tx",
    "'\x00'",
    "x = 1\nx is 1",
    "'\\d'",
    "(x,\nx is 1",
]


@pytest.mark.parametrize("source", IN_PARTS)
def test_programs_compiled_in_parts_run_as_the_whole(source: str) -> None:
    assert _same_both_ways(source) is not None


@pytest.mark.parametrize("source", WHOLE)
def test_programs_not_in_parts_are_compiled_whole(source: str) -> None:
    assert _same_both_ways(source) is None


def test_the_parts_keep_the_programs_lines_and_columns() -> None:
    """An error in the last expression points at its own line and columns."""
    source = "x = {}\n\n\n[1, 2] + x['missing']"
    program = in_a_runner(source)
    assert program.body is not None
    assert program.last is not None
    outcome = _execute(program, Host.empty(), as_main=False)
    assert isinstance(outcome, Outcome)
    *_, where, line, carets, error = outcome.error.splitlines()
    assert where == '  File "<program>", line 4, in <module>'
    assert line == "    [1, 2] + x['missing']"
    assert carets == "              ~^^^^^^^^^^^"  # under x['missing']
    assert error == "KeyError: 'missing'"
    assert _run(in_a_runner, source) == _run(_compile_whole, source)


_LINES = st.sampled_from(
    [
        "x = 1",
        "x",
        "x + 1",
        "(x,",
        " 2)",
        "]",
        "[",
        "'''",
        "y = '''",
        "' + '''",
        "if x:",
        "    x = 2",
        "    x",
        "else:",
        "    pass",
        "def f():",
        "    return x",
        "f()",
        "x + \\",
        "1",
        "# comment",
        "    # indented comment",
        "",
        "\f",
        "@staticmethod",
        "x; x",
        "1 / 0",
        "x is 1",
        "(z := 3)",
        "lambda: x",
        "x = None",
        "raise ValueError('v')",
        "import asyncio",
        "await asyncio.sleep(0)",
        "x = await asyncio.sleep(0, 3)",
        "await asyncio.sleep(0, x)",
        "async def g():",
        "    return await asyncio.sleep(0, 4)",
        "await g()",
        "asyncio.get_running_loop() is not None",
    ]
)


@given(st.lists(_LINES, max_size=8))
@example(["x = 1", "y = '''", "x", "' + '''"])
@example(["x = 1", "(x,", " 2)"])
@example(["x = 1", "if x:", "    x = 2", "x"])
@example(["(x,", "x is 1"])  # the second part warns, the first does not compile
def test_any_program_runs_the_same_in_parts_as_whole(lines: list[str]) -> None:
    _same_both_ways("\n".join(lines))


@pytest.mark.parametrize("source", IN_PARTS[:6])
def test_a_program_compiled_among_other_threads_goes_the_ast_way(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not alone (``in_process``: a thread of the host), a program is compiled whole,
    without setting the warnings filters, which are the whole process's: another thread
    that warned meanwhile would have its warning raised as an error."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the warnings filters were set by another thread's compile")

    with monkeypatch.context() as patched:
        patched.setattr(warnings, "catch_warnings", refuse)
        program = compile_program(source)
    assert program.last is None
    assert program.body is not None
    assert _run(compile_program, source) == _run(_compile_whole, source)
