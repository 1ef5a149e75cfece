"""The runner's entry point: wait for one Start, run the program, send one Result, exit.

Usage::

    python -m runner START_R START_W CALL_R CALL_W [--backend NAME] [--start-timeout SECONDS]
                     [--confine JSON] [--ready FD] [--supervised] [--no-linger]

The four numbers are inherited file descriptors: the start channel's read and write ends
and the call channel's read and write ends (a read end may equal its write end, for a
socket). They are never stdin or stdout: the program's own stdout and stderr are plain
pipes the parent captures, and nothing of the protocol is ever written to them. A host
that wants the shortest start launches the runner as
``python -I -S -c "import sys; sys.path[:0] = [...]; from runner._main import main; main()"``
followed by the same arguments.

Start-up imports the standard library and msgspec only (and the child side of
``protocol``, which is the same): no asyncio unless the program awaits at top level, no
anyio, no trio, and not even :mod:`argparse` (the command line is parsed by hand).

Options: ``--confine JSON`` puts up the confined level's walls (:mod:`runner._confine`);
without it, the runner puts up the ``process`` level's, where the kernel has them: a
Landlock domain that keeps the run from signalling or tracing any process outside it
(:func:`runner._landlock.scope_signals`), and a seccomp filter that keeps it from changing
another process's limits, scheduling or priority, or the machine
(:func:`runner._seccomp.install_process_filter`). ``--ready FD`` makes the runner put them
up *before* it reads its Start and then write :data:`READY_OK` to ``FD`` (or
:data:`READY_FAILED` and the reason), so that the host can set the run's limits on the
runner's final process before it sends anything of the run; ``--supervised`` means the
runner's parent is the zygote (:mod:`runner._zygote`): no ``PR_SET_PDEATHSIG`` (the zygote
ends its runners when the host dies, and a runner outlives a zygote that dies alone), and a
confined runner leaves its PID 1 to the zygote rather than waiting outside for it;
``--no-linger`` skips step 5 (for a host that finds every process of the run in its cgroups,
whatever their parents: the runner exits right after its Result, while the host reads it).
The zygote's warm children skip the command line and call :func:`serve` directly.

What the runner does, in order:

1. Ties its life to the parent's (Linux, best effort, through ``prctl``): the kernel kills
   it with SIGKILL when the parent dies (``PR_SET_PDEATHSIG``; note that this follows the
   parent *thread* that spawned it), and it becomes a child subreaper
   (``PR_SET_CHILD_SUBREAPER``), so the program's orphaned descendants are reparented to the
   runner rather than to init and the host can find every one of them under the runner. If
   the parent has already died by the time the death signal is armed, the runner exits.
2. Marks the channel descriptors close-on-exec, so that nothing the program executes
   inherits them (a process it leaves behind must not hold the channels open after the
   runner is gone). A ``fork`` without ``exec`` still shares them; the parent's reaper
   deals with those.
3. Loads the backend, then waits for the Start (``--start-timeout``, 60 s by default).
4. Runs the program, flushes ``sys.stdout`` and ``sys.stderr``, and sends exactly one
   Result, whose ``calls`` and ``bytes`` are the call channel's own counts. The program's
   ``sys.stdout`` and ``sys.stderr`` write through to their pipes (:func:`_write_through`):
   a run can end by SIGKILL at any instruction (its wall clock, its CPU or memory limit, the
   program's own ``os.kill``), and nothing the program wrote may be left in a buffer then.
5. Waits, at most ``_LINGER_SECONDS``, for the parent to close the start channel: while the
   runner lives, every process the program left behind stays in its tree (it is their
   subreaper), where the parent finds and kills them before it closes the channel.
6. Exits at once with ``os._exit``: neither the program's ``atexit`` handlers nor threads it
   left running can hold the process after its Result is out.

The budget in ``Start.budget`` (wall clock, calls, bytes, memory, in-flight cap) is enforced
by the parent, not here: the parent is the only authority (invariant 3). Its Server counts
the calls and bytes and refuses calls past the in-flight cap, its clock ends the run, and its
rlimits or cgroups bound memory. The runner reads the budget to pass it to the backend, for
information, and to give the in-flight cap to its Client, which holds calls past it back
rather than have the parent refuse them (for the program's sake, not the parent's).

Exit status:

== ==================================================================================
0  a Result was sent
2  no Result could be sent: no Start within the timeout, the start channel closed or
   broke, or the parent sent something that is not a Start
3  the parent died before the runner was tied to it
64 bad command line (``os.EX_USAGE``)
== ==================================================================================

For every nonzero status the runner writes one line, starting ``runner:``, to stderr. It
never prints a traceback for a protocol reason.
"""

from __future__ import annotations

import errno
import functools
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from protocol import (
    VERSION,
    ChannelClosed,
    Client,
    Kind,
    LocalFrameTooLarge,
    ProtocolError,
    Result,
    Runner,
    RunnerExit,
    Start,
    StartBinding,
    StartBudget,
    StarterCore,
)

from ._backends import DEFAULT_BACKEND, VALUE_OUT_OF_MEMORY, Outcome, get_backend

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from ._backends import Backend
    from ._confine import Confinement

__all__ = [
    "READY_FAILED",
    "READY_OK",
    "Arguments",
    "DEFAULT_START_TIMEOUT",
    "EXIT_NO_START",
    "EXIT_OK",
    "EXIT_ORPHANED",
    "EXIT_USAGE",
    "main",
    "run",
    "serve",
]

#: Seconds to wait for the Start. Long enough for a loaded host to get round to a runner it
#: spawned; short enough that a runner whose parent forgot it does not linger for long.
DEFAULT_START_TIMEOUT: Final = 60.0

# The exit statuses the host reads (protocol.RunnerExit is the contract).
EXIT_OK: Final = RunnerExit.OK
EXIT_NO_START: Final = RunnerExit.NO_START
EXIT_ORPHANED: Final = RunnerExit.ORPHANED
EXIT_NOT_CONFINED: Final = RunnerExit.NOT_CONFINED
EXIT_USAGE: Final = RunnerExit.USAGE

_USAGE: Final = (
    "usage: python -m runner START_R START_W CALL_R CALL_W "
    "[--backend NAME] [--start-timeout SECONDS] [--confine JSON] [--ready FD] [--supervised] "
    "[--no-linger]"
)
#: The byte written to ``--ready`` once the runner waits for its Start; a failure to put
#: up the walls writes ``READY_FAILED`` followed by the reason instead.
READY_OK: Final = b"R"
READY_FAILED: Final = b"!"

# prctl(2) options and the signal number, from <linux/prctl.h> and <signal.h>.
#: After its Result, how long the runner waits for the parent to close the start channel.
#: The parent normally does so within milliseconds; the bound only matters if it never does
#: (a parent that died is covered by PDEATHSIG as well).
_LINGER_SECONDS: Final = 30.0
_PR_SET_PDEATHSIG: Final = 1
_PR_SET_CHILD_SUBREAPER: Final = 36
_SIGKILL: Final = 9


class _UsageError(Exception):
    pass


class Arguments:
    """What one run of the runner is told (by its command line, or by the zygote)."""

    __slots__ = (
        "backend",
        "call_fds",
        "confine",
        "confinement",
        "linger",
        "net",
        "pid_one",
        "ready_fd",
        "start_fds",
        "start_timeout",
        "supervised",
        "view",
        "warm_await",
        "warm_calls",
        "warm_up",
    )

    def __init__(
        self,
        start_fds: tuple[int, int],
        call_fds: tuple[int, int],
        *,
        backend: str = DEFAULT_BACKEND,
        start_timeout: float | None = DEFAULT_START_TIMEOUT,
        confine: str = "",
        confinement: Confinement | None = None,
        ready_fd: int | None = None,
        supervised: bool = False,
        linger: bool = True,
        view: int | None = None,
        pid_one: bool = False,
        net: int | None = None,
        warm_up: bool = True,
        warm_calls: bool = False,
        warm_await: bool = False,
    ) -> None:
        self.start_fds = start_fds
        self.call_fds = call_fds
        self.backend = backend
        self.start_timeout = start_timeout
        self.confine = confine
        #: ``confine`` prepared by the zygote (:func:`runner._confine.prepare`), if it was.
        self.confinement = confinement
        self.ready_fd = ready_fd
        self.supervised = supervised
        self.linger = linger
        #: From the zygote (see :func:`runner._confine.confine`): a shared view's mount
        #: namespace to copy, whether this process was forked PID 1 already, and a network
        #: namespace made for this run.
        self.view = view
        self.pid_one = pid_one
        self.net = net
        #: Prepare the backend before saying ready, for a program that calls tools, or
        #: awaits, too (see :func:`_load_backend`).
        self.warm_up = warm_up
        self.warm_calls = warm_calls
        self.warm_await = warm_await


#: The options that take a value, and their values when not given.
_OPTION_DEFAULTS: Final = {
    "--backend": DEFAULT_BACKEND,
    "--start-timeout": str(DEFAULT_START_TIMEOUT),
    "--confine": "",
    "--ready": "",
}
#: The options that take none.
_FLAGS: Final = frozenset({"--supervised", "--no-linger"})


def _parse(argv: Sequence[str]) -> Arguments:
    """The command line, parsed by hand (argparse costs more to import than this runs).

    Raises:
        _UsageError: anything the usage line does not allow.
    """
    fds, options, flags = _split(argv)
    start_fds, call_fds = _channels(fds)
    return Arguments(
        start_fds,
        call_fds,
        backend=options["--backend"],
        start_timeout=_start_timeout(options["--start-timeout"]),
        confine=options["--confine"],
        ready_fd=_ready_descriptor(options["--ready"], fds),
        supervised="--supervised" in flags,
        linger="--no-linger" not in flags,
    )


def _split(argv: Sequence[str]) -> tuple[list[int], dict[str, str], set[str]]:
    """The command line's descriptor numbers, option values (defaults filled in) and flags.

    Raises:
        _UsageError: an option without its value, an unknown option, or an argument that is
            not a descriptor number.
    """
    fds: list[int] = []
    options = dict(_OPTION_DEFAULTS)
    flags: set[str] = set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if arg in _FLAGS:
            flags.add(arg)
        elif name in options:
            options[name] = value if eq else _next_value(name, args)
        else:
            fds.append(_descriptor_number(arg))
    return fds, options, flags


def _next_value(name: str, args: list[str]) -> str:
    """The value of option ``name``, given as the next argument (taken from ``args``).

    Raises:
        _UsageError: there is no next argument.
    """
    if not args:
        raise _UsageError(f"{name} needs a value")
    return args.pop(0)


def _descriptor_number(arg: str) -> int:
    """A positional argument: a descriptor number (a negative one is not an option).

    Raises:
        _UsageError: ``arg`` is an option this command line does not know (help included),
            or not a number.
    """
    if arg in ("-h", "--help"):
        raise _UsageError("help requested")
    if arg.startswith("-") and not arg[1:].isdigit():
        raise _UsageError(f"unknown option {arg!r}")
    try:
        return int(arg)
    except ValueError:
        raise _UsageError(f"not a file descriptor: {arg!r}") from None


def _channels(fds: list[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The start channel's and the call channel's descriptors (read end, write end).

    Raises:
        _UsageError: not four descriptors, one of them stdio or not open, or a descriptor
            shared by both channels.
    """
    if len(fds) != 4:
        raise _UsageError(f"expected 4 file descriptors, got {len(fds)}")
    for fd in fds:
        if fd < 3:
            raise _UsageError(f"descriptor {fd} cannot be a channel (0, 1 and 2 are stdio)")
        try:
            os.fstat(fd)
        except OSError:
            raise _UsageError(f"descriptor {fd} is not open") from None
    start_fds, call_fds = (fds[0], fds[1]), (fds[2], fds[3])
    if set(start_fds) & set(call_fds):
        raise _UsageError("the start and call channels must be separate descriptors")
    return start_fds, call_fds


def _start_timeout(text: str) -> float | None:
    """``--start-timeout``: positive seconds; None for ``inf`` (no timeout).

    Raises:
        _UsageError: not a number, or not positive.
    """
    try:
        seconds = float(text)
    except ValueError:
        raise _UsageError(f"not a number of seconds: {text!r}") from None
    if not seconds > 0:  # also refuses NaN
        raise _UsageError("--start-timeout must be positive")
    return None if seconds == float("inf") else seconds


def _ready_descriptor(text: str, fds: list[int]) -> int | None:
    """``--ready``: an open descriptor, none of the channels' nor stdio (None if not given).

    Raises:
        _UsageError: not an open descriptor, or not one of its own.
    """
    if not text:
        return None
    try:
        ready_fd = int(text)
        os.fstat(ready_fd)
    except (ValueError, OSError):
        raise _UsageError(f"--ready: not an open descriptor: {text!r}") from None
    if ready_fd < 3 or ready_fd in fds:
        raise _UsageError("--ready must be a descriptor of its own")
    return ready_fd


def _tie_to_parent(*, death_signal: bool = True) -> None:
    """Arm PR_SET_PDEATHSIG (unless supervised) and PR_SET_CHILD_SUBREAPER; best effort."""
    if not sys.platform.startswith("linux"):
        return
    try:
        from ._libc import libc

        # The handle the zygote loaded and warmed (a new one per runner took 0.2 ms of a
        # child's start here).
        prctl = libc().prctl
        if death_signal:
            prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass  # no ctypes, no libc, or no prctl: the host's other walls still stand


def _say(message: str) -> None:
    """One line to stderr, for the people reading the host's logs."""
    try:
        sys.stderr.write(f"runner: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _flush_stdio() -> None:
    """Flush what the program printed (and what it swapped in for stdout or stderr)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # a closed or broken stream, or the program's own odd object
            pass


class _Unbuffered(io.FileIO):
    """The raw layer under the program's ``sys.stdout`` or ``sys.stderr``: each write is
    in the pipe, whole, before it returns (a short write, after a signal, is resumed)."""

    def write(self, b: ReadableBuffer, /) -> int:
        fd = self.fileno()  # ValueError once closed, as FileIO's own write
        written = os.write(fd, b)
        with memoryview(b) as view:
            size = view.nbytes
            if written < size:
                with view.cast("B") as flat:
                    while written < size:
                        written += os.write(fd, flat[written:])
        return size


def _write_through() -> None:
    """Make the program's ``sys.stdout`` and ``sys.stderr`` (and ``sys.__stdout__``,
    ``sys.__stderr__``) write through to descriptors 1 and 2, as ``python -u`` does.

    The interpreter's own streams keep what is printed in a buffer of the process (stdout
    block-buffered on a pipe, stderr up to the end of the line), and SIGKILL, which no
    process can catch, would lose it: the wall clock, the CPU and memory limits and a
    program that kills itself all end a run that way. Each ``write`` is a system call
    instead, and ``print`` to these streams makes one write of its whole text
    (:func:`_print_for`), where the built-in ``print`` makes one per argument, separator
    and end: the cost is measured in ``benchmarks/bench_output.py``. Encoding and error
    handler stay the interpreter's.

    A child of a template that made them already (:func:`prepare_stdio`) keeps those.
    """
    _flush_stdio()
    if _made_through is not None and _made_through == _streams():
        return
    import builtins

    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        try:
            raw = _Unbuffered(fd, "w", closefd=False)
        except OSError:  # not open: the program gets what the interpreter gave it
            continue
        stream = io.TextIOWrapper(
            raw,
            encoding=getattr(old, "encoding", None) or "utf-8",
            errors=getattr(old, "errors", None) or "backslashreplace",
            newline="\n",
            write_through=True,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    builtins.print = _print_for(sys.stdout, sys.stderr, builtins.print)


#: The streams and ``print`` a template made (:func:`prepare_stdio`), which every child
#: forked from it finds in place (:func:`_streams`). None where nothing was made ahead.
_made_through: tuple[object, ...] | None = None


def _streams() -> tuple[object, ...]:
    """What :func:`_write_through` sets: ``sys.stdout``, ``sys.stderr``, their ``__``
    twins, ``print``."""
    import builtins

    return (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, builtins.print)


def prepare_stdio() -> bool:
    """In a template (the zygote): make :func:`_write_through`'s streams once, for every
    child forked from here, rather than in each child.

    In a child, making them wrote first to pages shared with the template (the io
    objects, the codec, the interpreter's own streams let go): 0.28 ms of CPU and about
    70 page faults of each child's start here, on the run's path for a child forked on
    demand. They are made for descriptors 1 and 2 as each child has them, the ends of
    pipes (the streams ask whether the file can seek once, when they are made): a pipe's
    end is put on 1 and 2 meanwhile, and the template's own descriptors put back after.
    Best effort: a template that cannot (no descriptor to spare, 1 or 2 not open) leaves
    each child to make its own, as a cold runner does.

    Returns:
        Whether the streams were made.
    """
    global _made_through
    try:
        ends = list(os.pipe())
    except OSError:
        return False
    saved: list[int] = []
    try:
        saved.append(os.dup(1))  # (one at a time: what was had is closed if 2 fails)
        saved.append(os.dup(2))
        try:
            for fd in (1, 2):
                os.dup2(ends[1], fd)
            _write_through()
        finally:
            for fd, own in zip((1, 2), saved, strict=True):
                os.dup2(own, fd)
    except OSError:
        return False
    finally:
        for fd in (*ends, *saved):
            os.close(fd)
    if not all(isinstance(getattr(s, "buffer", None), _Unbuffered) for s in _streams()[:2]):
        return False
    _made_through = _streams()
    return True


def _print_for(out: Any, err: Any, builtin: Callable[..., None]) -> Callable[..., None]:
    """``print`` as the built-in one, but one ``write`` of the whole text to ``out`` or
    ``err``.

    Printing to any other file (or with ``sys.stdout`` gone) is the built-in ``print``'s.
    What it refuses, and what it writes before an argument's ``__str__`` raises, are the
    built-in's. Its code carries no host path (a traceback through it shows ``<print>``).
    """

    def print(
        *args: object,
        sep: str | None = " ",
        end: str | None = "\n",
        file: Any = None,
        flush: bool = False,
    ) -> None:
        target: Any = getattr(sys, "stdout", None) if file is None else file
        if target is None or (target is not out and target is not err):
            return builtin(*args, sep=sep, end=end, file=file, flush=flush)
        if sep is None:
            sep = " "
        elif not isinstance(sep, str):
            raise TypeError(f"sep must be None or a string, not {type(sep).__name__}")
        if end is None:
            end = "\n"
        elif not isinstance(end, str):
            raise TypeError(f"end must be None or a string, not {type(end).__name__}")
        texts: list[str] = []
        try:
            texts.extend(map(str, args))  # (what was made before a failure stays in it)
        except BaseException:
            if texts:  # the built-in print has written these, and the separator after them
                target.write(sep.join(texts) + sep)
            raise
        target.write(sep.join(texts) + end)
        if flush:
            target.flush()
        return None

    print.__code__ = print.__code__.replace(co_filename="<print>")
    print.__module__ = "builtins"
    print.__qualname__ = "print"
    print.__doc__ = builtin.__doc__
    return print


def _confine(
    request_json: str,
    *,
    prepared: Confinement | None = None,
    detach: bool = False,
    view: int | None = None,
    pid_one: bool = False,
    net: int | None = None,
) -> str | None:
    """Put up the confined level's walls (of ``request_json``, or of what the zygote
    ``prepared`` from it); None when they are up, else why not."""
    from ._confine import confine, prepare

    try:
        confinement = prepare(request_json) if prepared is None else prepared
        confine(confinement, detach=detach, view=view, pid_one=pid_one, net=net)
    except (ValueError, OSError) as exc:
        return f"the sandbox's walls could not be put up: {exc}"
    return None


def _scope() -> str | None:
    """The ``process`` level's walls: no signal or trace from the run reaches a process
    outside it (:func:`runner._landlock.scope_signals`), and no change to another process's
    limits, scheduling or priority, nor to the machine
    (:func:`runner._seccomp.install_process_filter`). None
    when they are up, or where this kernel has neither (the host's probe says so:
    :class:`runner.Walls`); else why one could not be put up."""
    from ._landlock import scope_signals
    from ._seccomp import install_process_filter

    for wall in (scope_signals, install_process_filter):
        try:
            wall()
        except OSError as exc:
            if exc.errno != errno.EOPNOTSUPP:  # (ENOTSUP: the same number on Linux)
                return f"the sandbox's walls could not be put up: {exc}"
        except RuntimeError as exc:
            return f"the sandbox's walls could not be put up: {exc}"
    return None


def _own_main_thread() -> None:
    """Make :mod:`threading`'s main thread this process's, if it was imported before.

    Its native id is read when :mod:`threading` is imported, and Python 3.11 does not
    update it after a fork: in a runner the zygote forked, it would be the zygote's pid (in
    a confined one, a pid from outside the namespace).
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        main_thread = threading.main_thread()
        if hasattr(main_thread, "_set_native_id"):
            main_thread._set_native_id()


def _run_program(backend: Backend, start: Start, client: Client) -> Outcome | bytes:
    """The program's outcome; a successful one as its value's JSON bytes if the backend
    has ``run_json`` (they go into the Result without being copied: :func:`_send`)."""
    run_json: Callable[[Start, Client], Outcome | bytes] | None = getattr(backend, "run_json", None)
    try:
        return backend.run(start, client) if run_json is None else run_json(start, client)
    except BaseException as exc:  # a backend bug must still end in a Result
        return Outcome.failure(Kind.UNKNOWN, f"the runner failed: {type(exc).__name__}: {exc}")


def _send(runner: Runner, start: Start, outcome: Outcome | bytes, client: Client) -> None:
    """Send the Result of ``outcome`` (a successful value's JSON bytes, or an
    :class:`Outcome`); a too-large one is replaced by a small failure.

    Raises:
        ProtocolError: the start channel is closed or broken.
        OSError: the parent is gone.
    """

    def result(ok: bool, value: str = "", kind: Kind | None = None, error: str = "") -> Result:
        return Result(
            v=VERSION,
            result_id=start.result_id,
            ok=ok,
            value=value,
            kind=kind,
            error=error,
            calls=client.calls_made,
            bytes=client.bytes_received,
        )

    try:
        if isinstance(outcome, bytes):
            runner.send_result_json(result(True), outcome)
        else:
            runner.send_result(result(outcome.ok, outcome.value, outcome.kind, outcome.error))
        return
    except LocalFrameTooLarge as exc:
        ok = isinstance(outcome, bytes) or outcome.ok
        error = f"the program's {'value' if ok else 'error report'} is too large for one "
        error += f"Result frame: {exc}"
    except MemoryError:  # only ever before anything was sent
        error = VALUE_OUT_OF_MEMORY
    runner.send_result(result(False, kind=Kind.LIMIT, error=error))


def run(argv: Sequence[str]) -> int:
    """Do one run, as described in the module docstring; return the exit status.

    Never raises for a protocol or usage reason; the status says what happened.
    """
    parent = os.getppid()
    try:
        args = _parse(argv)
    except _UsageError as exc:
        _say(f"{exc}\n{_USAGE}")
        return EXIT_USAGE
    _tie_to_parent(death_signal=not args.supervised)
    orphaned = os.getppid() != parent
    del parent  # a pid of the host's side: not for the program to find up its stack
    if orphaned:  # died before the death signal was armed: nobody to serve
        _say("the parent exited before the runner started")
        return EXIT_ORPHANED
    return serve(args)


def _ready(fd: int | None, message: bytes) -> None:
    """Tell the host (through ``--ready``) that the runner waits for its Start, or why not."""
    if fd is None:
        return
    try:
        os.write(fd, message)
    except OSError:
        pass  # the host is gone or stopped listening: it will see the rest as it can
    finally:
        os.close(fd)


def serve(args: Arguments) -> int:
    """Steps 2 to 5 of the module docstring, for a runner already tied to its parent.

    With ``args.ready_fd``, the walls (``args.confine``'s, or without it the ``process``
    level's: :func:`_scope`) go up *before* the Start is read,
    and the runner then writes :data:`READY_OK` to that descriptor (or :data:`READY_FAILED`
    and the reason, and exits); the host sets the run's limits on every process of the run
    once it has read it. This is how the zygote's children run, confined before anything of
    the run (the Start included) reaches them. Without it, the walls go up after the Start.
    """
    _keep_descriptors(args)
    _write_through()
    backend = _load_backend(args)
    if backend is None:
        return EXIT_USAGE
    early = args.ready_fd is not None
    if early:
        if not _confine_before_start(args):
            return EXIT_NOT_CONFINED
        _own_main_thread()  # (in its walls, this is the process the program runs in)
    # Both channels' ends are made before the Start, off the run's path (the first Client
    # a runner forked from the zygote makes writes to pages it shares with it).
    runner = Runner(*args.start_fds)
    client = Client(*args.call_fds)
    if args.warm_up:  # forked ahead: what its one run would make first, made now
        ahead: Callable[..., object] | None = getattr(backend, "ahead_of_run", None)
        if ahead is not None:
            ahead(awaits=args.warm_await)
    _ready(args.ready_fd, READY_OK)
    start = _await_start(runner, args.start_timeout, early=early)
    if start is None:
        return EXIT_NO_START
    client.limit_inflight(start.budget.max_inflight)
    if not early:
        if not _confine_after_start(args, runner, start, client):
            return EXIT_NOT_CONFINED
        _own_main_thread()
    outcome = _run_program(backend, start, client)
    _flush_stdio()
    return _report(runner, start, outcome, client, linger=args.linger)


def _keep_descriptors(args: Arguments) -> None:
    """Step 2: the channels (and ``--ready``) are not passed on to what the program runs."""
    for fd in (*args.start_fds, *args.call_fds):
        # Inherited on purpose, but not to be passed on: a process the program execs must not
        # hold the channels open, or the parent would not see EOF when the runner dies.
        os.set_inheritable(fd, False)
    if args.ready_fd is not None:
        os.set_inheritable(args.ready_fd, False)


#: Backends a template process (the zygote) built and prepared before forking runners, by
#: name (see :func:`keep_prepared`).
_prepared: dict[str, Backend] = {}


def keep_prepared(name: str, backend: Backend) -> None:
    """In a template process: ``backend`` (called ``name``) is built and prepared, and
    every runner forked from here uses it as it is (:func:`_load_backend`)."""
    _prepared[name] = backend


def _load_backend(args: Arguments) -> Backend | None:
    """Step 3's first half: the backend, prepared; None (the host told why) if there is
    none by that name or it cannot load.

    A runner forked from a template that prepared it already uses that one, and prepares
    it again (its warm-up, whose first run writes to pages shared with the template) only
    if ``args.warm_up``: a child forked ahead of its run does it while it waits, where a
    run waiting for its child would wait for that too (0.75 ms here, against 0.25 ms it
    saves the run's own first compile). With ``args.warm_calls`` or ``args.warm_await``,
    it prepares for a program that calls tools, or awaits, too (``prepare_for``, if the
    backend has it).
    """
    backend = _prepared.get(args.backend)
    if backend is not None:
        if args.warm_up:
            warm_up(backend, calls=args.warm_calls, awaits=args.warm_await)
        return backend
    try:
        backend = get_backend(args.backend)
        backend.prepare()
    except (LookupError, ImportError) as exc:
        _say(str(exc))
        _ready(args.ready_fd, READY_FAILED + str(exc).encode())
        return None
    return backend


def warm_up(backend: Backend, *, calls: bool, awaits: bool) -> None:
    """Every warm-up, in a template or a child forked ahead: ``backend.prepare()``; its
    ``prepare_for(calls=, awaits=)`` where asked and where it has one (see
    :class:`runner.Backend`); then :func:`rehearse`."""
    backend.prepare()
    prepare_for: Callable[..., object] | None = getattr(backend, "prepare_for", None)
    if prepare_for is not None and (calls or awaits):
        prepare_for(calls=calls, awaits=awaits)
    rehearse()


def rehearse() -> bool:
    """Go through a run's own steps once, on channels of nobody's, before any Start: read
    and decode a Start, flush the program's streams, encode and write a Result.

    The backend's warm-up takes a program from source to value; this takes the runner's
    part around it. In a child of the zygote, those steps wrote first to pages shared with
    it: 0.12 ms and about 35 faults of every run's path here, before this. Best effort:
    a rehearsal that fails (no descriptors to spare, say) costs the run only that time.

    Returns:
        Whether it went through every step.
    """
    pipes: list[int] = []
    try:
        for _ in range(3):
            pipes.extend(os.pipe())
        start_read, start_write, result_read, result_write, calls_read, calls_write = pipes
        runner = Runner(start_read, result_write)
        client = Client(calls_read, calls_write)
        pipes[:] = [start_write, result_read]  # (the runner and the client close theirs)
        try:
            os.write(start_write, _rehearsal_frame())
            start = runner.await_start(1.0)  # (it is there: no wait)
            client.limit_inflight(start.budget.max_inflight)
            _flush_stdio()
            _send(runner, start, b"2", client)
        finally:
            client.close()
            runner.close()
    except (OSError, ProtocolError, TimeoutError):
        return False
    finally:
        for fd in pipes:
            os.close(fd)
    return True


@functools.cache
def _rehearsal_frame() -> bytes:
    """:data:`_REHEARSAL`'s frame, made once: in a template, for all its children (the
    host's side of a Start is no part of a child's run; framing it wrote to 30 pages
    shared with the template, in each)."""
    return bytes(StarterCore().send_start(_REHEARSAL))


#: The Start of :func:`rehearse`: a trivial program, one tool, a budget.
_REHEARSAL: Final = Start(
    v=VERSION,
    program="1 + 1",
    bindings=(StartBinding(name="echo", signature="echo(value)"),),
    budget=StartBudget(wall_clock=1, max_calls=1, max_inflight=1),
    result_id="0" * 32,
    argv=("<program>",),
)


def _confine_before_start(args: Arguments) -> bool:
    """The walls, before the Start (``--ready``); False (the host told why) if they failed."""
    # A supervised runner's PID 1 goes to the zygote, which reports it to the host. What
    # the walls are built from names the host's places of the runner's packages, which the
    # view hides from the program (runner._relocate.enter_view): none of it is kept.
    prepared, args.confinement = args.confinement, None
    failure = (
        _confine(
            args.confine,
            prepared=prepared,
            detach=args.supervised,
            view=args.view,
            pid_one=args.pid_one,
            net=args.net,
        )
        if args.confine
        else _scope()
    )
    if failure is None:
        return True
    # Nothing of the run has arrived; the host is told why.
    _ready(args.ready_fd, READY_FAILED + failure.encode("utf-8", "replace"))
    return False


def _await_start(runner: Runner, timeout: float | None, *, early: bool) -> Start | None:
    """Step 3's second half: the Start, or None (said on stderr) if none came."""
    try:
        return runner.await_start(timeout)
    except TimeoutError:
        _say(f"no Start within {timeout} s")
    except ChannelClosed:
        if not early:  # a warm child that was never used: not worth a line in the logs
            _say("the start channel closed before a Start arrived")
    except (ProtocolError, OSError) as exc:
        _say(f"no usable Start: {exc}")
    return None


def _confine_after_start(args: Arguments, runner: Runner, start: Start, client: Client) -> bool:
    """The walls, after the Start; False (the Result says why) if they failed."""
    failure = _confine(args.confine) if args.confine else _scope()
    if failure is None:
        return True
    # The program must not run without its walls.
    try:
        _send(runner, start, Outcome.failure(Kind.DENIED, failure), client)
    except (ProtocolError, OSError):
        pass
    return False


def _report(
    runner: Runner, start: Start, outcome: Outcome | bytes, client: Client, *, linger: bool
) -> int:
    """Steps 4 (the Result) and 5 (linger); the exit status."""
    try:
        _send(runner, start, outcome, client)
    except (ProtocolError, OSError) as exc:
        _say(f"the Result could not be sent: {exc}")
        client.close()
        runner.close()
        return EXIT_NO_START
    client.close()
    if linger:
        # Hold on (as the subreaper of whatever the program left running) until the parent
        # has dealt with it and closes the start channel; bounded, in case it never does.
        runner.wait_closed(_LINGER_SECONDS)
    runner.close()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the runner with ``argv`` (default ``sys.argv[1:]``) and exit with its status.

    Exits with ``os._exit`` after flushing stdout and stderr, so that nothing the program
    left behind (threads, ``atexit`` handlers, a wedged finalizer) can keep the process
    alive once its Result is sent.
    """
    status = run(sys.argv[1:] if argv is None else argv)
    _flush_stdio()
    os._exit(status)
