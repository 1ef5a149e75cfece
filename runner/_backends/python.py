"""The Python backend: run ``Start.program`` as a fresh ``__main__`` module.

Theory of operation
-------------------
1. The source is registered with :mod:`linecache` under the program's name (the first
   item of ``Start.argv``: ``prog.py`` for a program that came from that file;
   ``<program>`` when there is none), so tracebacks (ours and the program's own) show its
   name and its lines.
2. The program's *value* is its last expression statement, as in a notebook cell; a body
   that ends with anything else has the value ``None``. Most programs end with one on a
   line of its own, and in a runner process they are compiled in two parts, straight from
   the source (:func:`compile_program`): every line before that last line (``exec``), and
   that line to the end as an expression (``eval``), which gives the value. Any other
   program (and every program at ``in_process``) is parsed with :mod:`ast`, and its last
   expression statement (if any) becomes an assignment to a private name before it is
   compiled.
3. It is compiled with ``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``, and with ``dont_inherit`` so
   that the runner's own ``from __future__`` imports do not leak into the program.
4. It runs in a new module object installed as ``sys.modules["__main__"]`` (so pickle,
   dataclasses and friends find the program's classes), with ``__name__ == "__main__"``,
   the builtins, ``host`` (the run's tools: :mod:`runner._host`) and ``CallError`` (what
   a failed call raises: :class:`protocol.CallError`, also importable from
   :mod:`protocol`). It has no ``__file__`` and its ``__spec__`` is None, as for
   ``python -c``: the program's file is not in the sandbox.
   In a runner process (not at ``in_process``, where the program shares the host's
   interpreter and none of this is touched), the program's command line is its own:
   ``sys.argv`` is ``Start.argv`` (``["<program>"]`` when it is empty),
   ``sys.orig_argv`` is ``[sys.executable, *sys.argv]``, as ``python prog.py ARGS``
   would make them; and ``sys.executable`` is an interpreter the program can reach: the
   runner's own where it is visible, else (inside the confined level's view, which
   binds the interpreter's real file, not a virtual environment's link to it) that real
   file.
5. If the compiled code is a coroutine (it uses top-level ``await``, ``async for`` or
   ``async with``), :mod:`asyncio` is imported then, and only then, and the module runs
   as under ``asyncio.run`` (:func:`_run_awaiting`). Otherwise it runs with plain
   ``exec``: a program that never awaits never pays for asyncio. A runner forked ahead
   of a program that may await has its event loop made already
   (:meth:`PythonBackend.ahead_of_run`); one whose program does not await closes it
   before the program starts, which never sees it. In a runner process, the loop's
   teardown waits for the Result where it has nothing to do (see :func:`_run_awaiting`).

How a run ends, as an :class:`~runner.Outcome`:

========================================= =======================================
the program                               the outcome
========================================= =======================================
ends normally                             ok, value = JSON text of its value
value has no JSON form                    ``invalid``, naming the type
does not compile                          ``invalid``, with the message and line
calls ``sys.exit``, ``exit``, ``quit``,   ``raised``, naming ``SystemExit`` and its
or raises ``SystemExit``, with any code   code; the code (JSON) is the failure's value
lets a ``CallError`` escape               the CallError's kind (a quota ``limit``
                                          fails the run as ``limit``)
runs out of memory (``MemoryError``)      ``limit``, saying memory was the cause
raises anything else                      ``raised``, with the program's traceback
========================================= =======================================

Tracebacks show the program's frames only: the runner's frames above the program (the
bootstrap, ``exec``, ``asyncio.run``) and the runner's and ``protocol``'s frames below it
(the tool call machinery) are cut out, so the error reads as if the program had run alone.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import linecache
import os
import sys
import types
import warnings
from typing import TYPE_CHECKING, Final, NoReturn, final

from protocol import (
    VERSION,
    CallError,
    Client,
    Kind,
    Response,
    StartBinding,
    frame_message,
)

from .._host import Host
from .._value import encode_json, encode_json_bytes
from . import VALUE_OUT_OF_MEMORY, Outcome

if TYPE_CHECKING:
    import asyncio
    import traceback
    from collections.abc import Coroutine
    from typing import Any

    from protocol import Start

__all__ = ["PROGRAM_FILENAME", "PythonBackend"]

#: The program's name when ``Start.argv`` gives none: ``sys.argv[0]``, and the filename
#: the program is compiled under (its frames in tracebacks carry it).
PROGRAM_FILENAME: Final = "<program>"

# The module global the last expression's value is stored in. Unlikely to clash with a
# program's own names, and harmless if it does (the program then sets its own value).
_VALUE_NAME: Final = "__runner_value__"

# ``inspect.CO_COROUTINE``: set on code compiled from a module that awaits at top level.
# Spelled out so that the check does not import inspect.
_CO_COROUTINE: Final = 0x0080

# How every part of a program is compiled (see the module docstring, step 3).
_FLAGS: Final = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT

# A failure's text is for people; past this many characters it is cut (a program that
# raises with a 100 MB message must still get a Result out, in one frame).
MAX_ERROR_CHARS: Final = 64 * 1024


def _internal_dirs() -> tuple[str, ...]:
    """The directories whose frames are the runner's and protocol's machinery, never the
    program's, left out of tracebacks: where the modules' files are now, and where their
    code says it is (both are their places in a confined view, :mod:`runner._relocate`;
    a zygote's children at ``process`` have the files at their host paths and the code
    named by those places)."""
    protocol = sys.modules[CallError.__module__]  # protocol/_errors.py -> protocol/
    errors = (protocol.__file__ or "", protocol.VersionMismatch.__init__.__code__.co_filename)
    ours = (__file__, _internal_dirs.__code__.co_filename)  # runner/_backends/... -> runner/
    found = {os.path.dirname(os.path.abspath(f)) for f in errors}
    found |= {os.path.dirname(os.path.dirname(os.path.abspath(f))) for f in ours}
    return tuple(sorted(d + os.sep for d in found))


@final
class PythonBackend:
    """Runs Python source (see the module docstring).

    Args:
        as_main: install the program's module as ``sys.modules["__main__"]``, as the
            runner process does (its ``__main__`` is nobody else's). A host that runs a
            program in its own process (the ``in_process`` level) passes False.
    """

    def __init__(self, *, as_main: bool = True) -> None:
        self._as_main = as_main
        self._interpreter = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    def prepare(self) -> None:
        """Give the program ``exit`` and ``quit``, which ``site`` (off in the runner) adds,
        warm the path from source to value (:func:`_warm_up`), and find the interpreter's
        real file while the host's view is still there (once: a child forked from a
        template that prepared this backend has it already).

        Nothing else to load: ast, linecache and types are loaded with the runner itself.
        """
        for name in ("exit", "quit"):
            if not hasattr(builtins, name):
                setattr(builtins, name, _Exit(name))
        _warm_up(alone=self._as_main)
        if self._as_main and sys.executable and not self._interpreter:
            self._interpreter = os.path.realpath(sys.executable)

    def prepare_for(self, *, calls: bool, awaits: bool) -> None:
        """Warm the path of a program that calls tools (:func:`_warm_up_calls`), and of one
        that awaits (:func:`_warm_up_awaiting`, which imports :mod:`asyncio` if it is not
        loaded yet): for a template, and for a child forked ahead for such programs."""
        if calls:
            _warm_up_calls(alone=self._as_main)
        if awaits:
            _warm_up_awaiting(alone=self._as_main)

    def ahead_of_run(self, *, awaits: bool) -> None:
        """In a runner forked ahead of its one run, once its walls are up: make what that
        run would make first where its program may await (``awaits``, the host's guess),
        an event loop, before the Start rather than on the run's path.

        Made in a child of the zygote, a loop took 0.16 ms of such a program's path here
        (the policy's loop, its selector and self-pipe), and its three descriptors are
        those ``asyncio.run`` would have made: a program that awaits finds them as it
        would have; one that does not never sees them (:meth:`run_json` closes the loop
        first). No loop where there are no descriptors to spare: the program makes its
        own, as ever. Never in a template, whose children would share the loop.
        """
        if not awaits or self._loop is not None:
            return
        import asyncio

        with contextlib.suppress(OSError):
            self._loop = asyncio.new_event_loop()

    def run(self, start: Start, client: Client) -> Outcome:
        """Run ``start.program`` with ``start.bindings`` as ``host``; never raises."""
        ended = self.run_json(start, client)
        if isinstance(ended, Outcome):
            return ended
        try:
            return Outcome.success(ended.decode("utf-8"))
        except MemoryError:
            return Outcome.failure(Kind.LIMIT, VALUE_OUT_OF_MEMORY)

    def run_json(self, start: Start, client: Client | None) -> Outcome | bytes:
        """:meth:`run`, but the value of a program that succeeds comes as its JSON bytes.

        For a host that runs the program in its own process and decodes the value itself
        (the ``in_process`` level): the value skips its copy into a ``str``. That copy is
        a third buffer the size of the value in the program's thread, and with it the
        thread's malloc arena is given back to the kernel after every run and faulted in
        again by the next (737 page faults and 1.3 ms of a 1 MiB value's 2.1 ms, here).
        ``client`` None: the program has no tools, so it calls nobody (``start`` must bind
        none). Never raises.
        """
        loop, self._loop = self._loop, None  # the program's, to run on or close
        ready = self._compile(start, client)
        if isinstance(ready, Outcome):
            if loop is not None:
                loop.close()
            return ready
        program, host = ready
        return _execute(program, host, as_main=self._as_main, loop=loop)

    def _compile(self, start: Start, client: Client | None) -> tuple[Program, Host] | Outcome:
        """The program compiled and ``host``, its command line made its own; or why not."""
        try:
            if client is None:
                if start.bindings:
                    raise ValueError("tools were bound, but there is no call channel")
                host = Host.empty()
            else:
                host = Host(client, start.bindings or ())
        except ValueError as exc:
            return Outcome.failure(Kind.INVALID, str(exc))
        argv = list(start.argv) or [PROGRAM_FILENAME]
        filename = argv[0] or PROGRAM_FILENAME
        try:
            program = compile_program(start.program, filename, alone=self._as_main)
        except SyntaxError as exc:
            return Outcome.failure(Kind.INVALID, _format_syntax_error(exc))
        except (ValueError, RecursionError) as exc:  # null bytes; nesting too deep
            return Outcome.failure(Kind.INVALID, f"the program does not compile: {exc}")
        except MemoryError:
            return Outcome.failure(Kind.LIMIT, "out of memory while compiling the program")
        if self._as_main:
            self._own_command_line(argv)
        return program, host

    def _own_command_line(self, argv: list[str]) -> None:
        """Make ``sys``'s view of the command line the program's (see the module docstring)."""
        if sys.executable and not os.path.exists(sys.executable):
            # Not in the program's view (a virtual environment's link, at confined): the
            # real file is, and it is the same interpreter.
            reachable = os.path.exists(self._interpreter)
            sys.executable = self._interpreter if reachable else ""
        sys.argv = argv
        sys.orig_argv = [sys.executable, *argv]


def _warm_up(*, alone: bool = False) -> list[Outcome | bytes]:
    """Take a small program from source to value once, before any Start.

    A runner forked from the zygote shares its pages until it first writes to them, and
    the first run through the parser, the compiler, a new module and the JSON encoder
    writes to many (copies, first calls, caches): 0.25 ms of a trivial program's 0.43 ms
    here (a page written first costs a fault and a copy, about 2 µs on this machine).
    Taken now, that cost is paid while the runner waits for its Start (a pool's runner,
    before it is needed at all), not on the run's path. Nothing of it matters after: the
    run's own program has a module of its own, and its source lines replace the lines
    left under ``<program>``. ``alone``: as :func:`compile_program`'s.

    Returns:
        What the program came to (its value's JSON, unless it failed).
    """
    return [_execute(compile_program(_WARM_UP, alone=alone), Host.empty(), as_main=False)]


def _warm_up_calls(*, alone: bool = False) -> list[Outcome | bytes]:
    """Take a small program that calls a tool from source to value once, before any Start.

    A program's first call writes first to pages shared with the zygote too: the tool's
    proxy, the client, the frames both ways (0.2-0.4 ms of a first call's path here). The
    price, where it is taken ahead: about 0.5 ms of CPU and 0.15 MB of private memory per
    child here, so a pool takes it only in children it makes for programs with tools
    (``sandbox``'s pools decide; the zygote takes it once for all its children). The call
    goes over a channel of its own, closed after.

    Returns:
        What the program came to (its value's JSON, unless it failed); nothing if there
        was no room for the call's channel (the warm-up is skipped, never the run).
    """
    return _warm_up_with(_CALLING_WARM_UP, "1", alone=alone)


def _warm_up_awaiting(*, alone: bool = False) -> list[Outcome | bytes]:
    """Take a small program that awaits calls from source to value once, the way a run's
    is run (``asyncio.run``), before any Start; then leave :mod:`asyncio` as a fresh
    interpreter has it.

    A program's first event loop in a child of the zygote (the policy, the selector and
    self-pipe, the loop's own objects, its tasks, the loop closed) wrote to 300-350 pages
    shared with the zygote: 1.3 ms of a program that awaits at all, on the run's path,
    measured in a child of a zygote-like interpreter (0.28 ms and 7 faults after this).
    The price, where it is taken ahead: about 1.5 ms of CPU and 0.8 MB of private memory
    per child here, so a pool takes it only in children it makes for programs that await
    (as for :func:`_warm_up_calls`).

    What the program finds after: a new policy that has made no loop and has been told
    none (``asyncio.run`` leaves its own told "none", and ``get_event_loop`` outside a
    loop would then raise instead of making one); no loop, no selector, no descriptor,
    no thread (nothing here starts the default executor).

    Returns:
        As :func:`_warm_up`.
    """
    import asyncio

    # (Both answers sent before the loop reads.)
    ended = _warm_up_with(_AWAITING_WARM_UP, "1", "2", alone=alone)
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    return ended


def _warm_up_with(program: str, *answers: str, alone: bool = False) -> list[Outcome | bytes]:
    """Run ``program`` over a :class:`_Loopback` that has ``answers`` (call ids) ready
    (``alone``: as :func:`compile_program`'s)."""
    try:
        loopback = _Loopback()
    except OSError:  # no descriptors to spare: a warm-up is worth less than the run
        return []
    with loopback as channel:
        channel.answer(*answers)
        return [_execute(compile_program(program, alone=alone), channel.host, as_main=False)]


#: The warm-up programs: an import and a function called, as most programs have
#: (:func:`_warm_up`); the same, with a tool called (:func:`_warm_up_calls`); a loop's life,
#: its tasks and two calls awaited together (:func:`_warm_up_awaiting`).
_WARM_UP: Final = "import sys\nx = [sys.maxsize.bit_length()]\nx"
_CALLING_WARM_UP: Final = "import sys\nx = [sys.maxsize.bit_length(), host.echo(1)]\nx"
_AWAITING_WARM_UP: Final = (
    "import asyncio\nawait asyncio.sleep(0)\nawait asyncio.gather(host.echo(1), host.echo(2))\n"
)


#: The warm-up tool's call shape (:class:`_Loopback`).
_WARM_UP_SIGNATURE: Final = "echo(value, /, *more, key=None, **keys)"


@final
class _Loopback:
    """A call channel that goes nowhere, for the warm-up: a host with one tool, ``echo``,
    whose answers (the value ``1``) are written to its client before the calls are made.

    A call that finds no answer ready would wait for ever, so each call's answer is
    written first, by its id (:class:`~protocol.Client` numbers its calls from 1); an
    answer the client reads for a call it has not made fails the call instead.
    """

    def __init__(self) -> None:
        fds: list[int] = []
        try:
            for _ in range(2):
                fds.extend(os.pipe())
        except OSError:
            for fd in fds:  # (the first pipe, when the second could not be had)
                os.close(fd)
            raise
        self._calls_read, calls_write, answers_read, self._answers_write = fds
        self._client = Client(answers_read, calls_write)
        # A call shape with every kind of parameter: a run's tools come with one, read
        # (``parse_signature``) and bound on each call.
        binding = StartBinding(name="echo", signature=_WARM_UP_SIGNATURE)
        self.host = Host(self._client, (binding,))

    def answer(self, *call_ids: str) -> None:
        for call_id in call_ids:
            response = Response(v=VERSION, id=call_id, ok=True, value="1")
            os.write(self._answers_write, frame_message(response))

    def __enter__(self) -> _Loopback:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.close()
        os.close(self._calls_read)
        os.close(self._answers_write)


@final
class _Exit:
    """``exit`` and ``quit`` as the interactive interpreter has them: raise SystemExit."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"Use {self._name}() to exit"

    def __call__(self, code: object = None) -> NoReturn:
        raise SystemExit(code)


@final
class Program:
    """A program compiled (:func:`compile_program`): ``body``, then ``last``.

    ``last``, if any, is the program's last expression statement compiled on its own
    (``eval``): its value is the program's. Without it, ``body`` is the whole program, and
    stores the value of a last expression statement, if it has one, in the module's
    :data:`_VALUE_NAME`. ``body`` is None where nothing comes before ``last``.
    """

    __slots__ = ("body", "filename", "last")

    def __init__(
        self, filename: str, body: types.CodeType | None, last: types.CodeType | None = None
    ) -> None:
        self.filename = filename
        self.body = body
        self.last = last

    @property
    def awaits(self) -> bool:
        """Whether it awaits at top level (either part, compiled in parts): it runs as a
        coroutine, under an event loop."""
        codes = (self.body, self.last)
        return any(code is not None and code.co_flags & _CO_COROUTINE for code in codes)


def compile_program(
    source: str, filename: str = PROGRAM_FILENAME, *, alone: bool = False
) -> Program:
    """Compile ``source`` as a module whose last expression statement is its value.

    Args:
        source: the program.
        filename: the name its frames carry in tracebacks (its lines are registered with
            :mod:`linecache` under it).
        alone: no other thread of this process runs meanwhile (a runner's process, or a
            template's, before any program runs): only then is a program compiled in
            parts (:func:`_compile_in_parts`), which sets the warnings filters, global to
            the process, for the time of its two compiles. Elsewhere (``in_process``,
            in a thread of the host) every program goes the :mod:`ast` way.

    Raises:
        SyntaxError: the source is not valid Python.
        ValueError: the source contains null bytes (Python 3.11).
    """
    linecache.cache[filename] = (
        len(source),
        None,  # no mtime: linecache.checkcache keeps the entry
        source.splitlines(keepends=True),
        filename,
    )
    in_parts = _compile_in_parts(source, filename) if alone else None
    return in_parts or _compile_whole(source, filename)


def _compile_in_parts(source: str, filename: str) -> Program | None:
    """``source`` compiled straight from its text, in two parts: everything before its last
    line of code that starts at the left margin (:func:`_last_line_of_code`), then that
    line to the end as an expression; None where that is not the program (the caller
    parses it instead).

    Parsing the program into :mod:`ast`'s objects and compiling those takes twice as long
    as compiling its text: 39 against 18 µs for a trivial program, here, and 0.41-0.48
    against 0.26-0.28 ms of CPU where it counts, the first compile in a child forked ahead
    of its run.

    The split is the program's own last statement exactly when both parts compile. The
    first part, alone, ends where no bracket, string or continued line is open, at the end
    of a line: the tokens that follow start a statement of their own, at the top level,
    since they start at the left margin. The second is an expression (``eval``'s input,
    an expression statement's form) and nothing more. So a split inside a string, a
    bracket or a continued line, or below a compound statement, fails one compile or the
    other, and so does a last statement that is not an expression. Either part may await
    (:func:`_in_parts` runs them as one coroutine). Left to the caller: a program that has
    ``from __future__`` imports (they would not reach the second part), or ``\r`` line
    ends; whatever does not compile in parts, whose error is the whole program's to
    report; and whatever the compiler warns about, whose warnings are the whole program's
    to give (a part that warned could still fail).
    """
    if "__future__" in source or "\r" in source:
        return None
    start = _last_line_of_code(source)
    if start < 0:
        return None
    head = source[:start]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (the compiler raises a warning as SyntaxError)
            # The expression first: most programs that end otherwise fail here, at once.
            # Padded with the lines before it, its frames show the program's own lines.
            tail = "\n" * head.count("\n") + source[start:]
            last = compile(tail, filename, "eval", _FLAGS, True)
            body = compile(head, filename, "exec", _FLAGS, True) if head else None
    except (SyntaxError, ValueError, Warning):  # not in parts; the whole program says why
        return None
    return Program(filename, body, last)


def _last_line_of_code(source: str) -> int:
    """Where the last line of ``source`` that starts at its left margin with code starts:
    not blank, not a comment, not a closing bracket (the end of a longer line, as black
    writes them); -1 if there is none."""
    end = len(source)
    while end > 0:
        start = source.rfind("\n", 0, end) + 1
        if start < end and source[start] not in " \t\f#\n)]}":
            return start
        end = start - 1
    return -1


def _compile_whole(source: str, filename: str) -> Program:
    """``source`` parsed with :mod:`ast`, its last expression statement (if any) made an
    assignment to :data:`_VALUE_NAME`, then compiled.

    Raises:
        SyntaxError: the source is not valid Python.
        ValueError: the source contains null bytes (Python 3.11).
    """
    tree = ast.parse(source, filename, "exec")
    body = tree.body
    if body and isinstance(body[-1], ast.Expr):
        last = body[-1]
        # Both new nodes take the statement's place (set here rather than by
        # ast.fix_missing_locations, which walks the whole tree).
        store = ast.copy_location(ast.Name(id=_VALUE_NAME, ctx=ast.Store()), last)
        body[-1] = ast.copy_location(ast.Assign(targets=[store], value=last.value), last)
    return Program(filename, compile(tree, filename, "exec", flags=_FLAGS, dont_inherit=True))


def _new_main(host: Host, *, install: bool) -> types.ModuleType:
    """A fresh ``__main__`` module holding ``host`` and ``CallError``, installed in
    ``sys.modules`` if asked."""
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    namespace["host"] = host
    namespace["CallError"] = CallError
    if install:
        sys.modules["__main__"] = module
    return module


def _execute(
    program: Program,
    host: Host,
    *,
    as_main: bool,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Outcome | bytes:
    """Run ``program`` as the program's module; ``loop``, one made ahead for it (closed
    here if the program does not await)."""
    filename = program.filename
    body, last = program.body, program.last
    namespace = _new_main(host, install=as_main).__dict__
    value: object = None
    try:
        if program.awaits:
            if last is None:  # the whole program, compiled as one (it stores its value)
                # eval() of code that awaits at top level returns the coroutine that runs it.
                assert body is not None
                main = eval(body, namespace)
            else:
                main = _in_parts(body, last, namespace)
            value = _run_awaiting(main, loop, last=as_main)
        else:
            if loop is not None:
                loop.close()
            if body is not None:
                exec(body, namespace)
            if last is not None:
                value = eval(last, namespace)
    except SystemExit as exc:
        # Whatever its code, a program that exits did not produce a value: the run failed,
        # and the code goes with the failure (a code with no JSON form, as its repr).
        exit_code = exc.code
        try:
            encoded = encode_json(exit_code)
        except (TypeError, MemoryError):
            encoded = encode_json(repr(exit_code))
        shown = "" if exit_code is None else repr(exit_code)
        head = f"the program exited (SystemExit({shown})) without producing a value"
        return Outcome.failure(
            Kind.RAISED, f"{head}\n{_format_exception(exc, filename)}", value=encoded
        )
    except MemoryError as exc:
        return Outcome.failure(Kind.LIMIT, _describe_memory_error(exc, filename))
    except CallError as exc:
        return Outcome.failure(exc.kind, _format_exception(exc, filename))
    except BaseException as exc:  # the program's failure, whatever it is, is the outcome
        return Outcome.failure(Kind.RAISED, _format_exception(exc, filename))
    return _encode_value(value if last is not None else namespace.get(_VALUE_NAME))


async def _in_parts(
    body: types.CodeType | None, last: types.CodeType, namespace: dict[str, Any]
) -> object:
    """A program compiled in parts (:func:`_compile_in_parts`) that awaits, as the one
    coroutine that runs it: its first part, then its last expression, each awaited if it
    awaits (a part that does not runs inside the loop all the same, as it would in the
    whole program's coroutine); the expression's value."""
    if body is not None:
        ran = eval(body, namespace)
        if body.co_flags & _CO_COROUTINE:
            await ran
    value = eval(last, namespace)
    if last.co_flags & _CO_COROUTINE:
        value = await value
    return value


def _run_awaiting(
    main: Coroutine[Any, Any, object], loop: asyncio.AbstractEventLoop | None, *, last: bool
) -> object:
    """``asyncio.run(main)``, on ``loop`` if one was made ahead: what ``main`` returns.

    As ``asyncio.run`` does: ``main`` runs as the loop's main task, with the loop set as
    the thread's current one; then the teardown (every task left cancelled and waited
    for, the async generators closed, the default executor shut down, the loop closed).

    ``last``: this process runs no other program and ends after its Result (a runner).
    There, a teardown that has nothing to do is left to the process's end, after the
    Result rather than before it (0.11 ms of a program that awaits, here): nothing left
    is no task, no async generator, no executor, and no callback ready or timer
    scheduled (the teardown's own turns of the loop would run them). Anything left, or
    a loop whose state cannot be read, and it runs as ``asyncio.run``'s does.
    """
    import asyncio

    if loop is None:
        runner = asyncio.Runner()
    else:
        made = loop
        runner = asyncio.Runner(loop_factory=lambda: made)
        asyncio.set_event_loop(loop)  # (asyncio.run's own Runner sets the loop it makes)
    try:
        return runner.run(main)
    finally:
        if not (last and _nothing_left(runner.get_loop())):
            try:
                runner.close()
            finally:
                if loop is not None:
                    asyncio.set_event_loop(None)


def _nothing_left(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop``'s teardown would run nothing of the program's (see
    :func:`_run_awaiting`). False where its state cannot be read: not asyncio's own loop,
    or asyncio itself changed by the program (the teardown then runs, as it would have)."""
    import asyncio

    try:
        return not (
            asyncio.all_tasks(loop)
            or loop._asyncgens  # type: ignore[attr-defined]
            or loop._default_executor is not None  # type: ignore[attr-defined]
            or loop._ready  # type: ignore[attr-defined]
            or loop._scheduled  # type: ignore[attr-defined]
        )
    except Exception:  # the program's own doing: as if something were left
        return False


def _encode_value(value: object) -> Outcome | bytes:
    """The value's JSON bytes, or the failure to encode it."""
    try:
        return encode_json_bytes(value)
    except TypeError as exc:
        return Outcome.failure(Kind.INVALID, f"the program's value has no JSON form: {exc}")
    except MemoryError:
        return Outcome.failure(Kind.LIMIT, VALUE_OUT_OF_MEMORY)


# -- failures, for people --------------------------------------------------------------


def _cap(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    cut = len(text) - MAX_ERROR_CHARS
    return f"{text[:MAX_ERROR_CHARS]}\n... ({cut} more characters cut)"


def _format_syntax_error(exc: SyntaxError) -> str:
    import traceback

    lines = traceback.format_exception_only(type(exc), exc)
    return _cap("the program does not compile:\n" + "".join(lines).rstrip("\n"))


def _describe_memory_error(exc: MemoryError, filename: str) -> str:
    head = "the program ran out of memory (MemoryError)"
    try:
        return f"{head}\n{_format_exception(exc, filename)}"
    except MemoryError:
        return head


def _format_exception(exc: BaseException, filename: str) -> str:
    """``exc``'s traceback, as Python prints it, with only the program's frames (those of
    the program compiled as ``filename``, and below them any but the runner's)."""
    import traceback

    summary = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    _keep_program_frames(summary, filename, set())
    return _cap("".join(summary.format()).rstrip("\n"))


def _keep_program_frames(
    summary: traceback.TracebackException, filename: str, seen: set[int]
) -> None:
    """Cut the runner's frames from ``summary`` and from every exception chained to it."""
    if id(summary) in seen:
        return
    seen.add(id(summary))
    stack = summary.stack
    frames = list(stack)
    first = next((i for i, f in enumerate(frames) if f.filename == filename), 0)
    internal = _internal_dirs()
    stack[:] = [f for f in frames[first:] if not f.filename.startswith(internal)]
    for chained in (summary.__cause__, summary.__context__, *(summary.exceptions or ())):
        if chained is not None:
            _keep_program_frames(chained, filename, seen)
