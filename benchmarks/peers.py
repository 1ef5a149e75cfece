"""Peers in the isolation-overhead study: the alternatives, on the same workloads as ours.

``python -m benchmarks.study --peers`` (or ``sandbox bench --peers``) adds this section to
the study; ``--peers-only`` measures it alone. The peers, each behind one adapter with the
same interface (:class:`Peer`: ``prepare``, ``run(workload) -> value``, ``close``):

* ``monty/reused`` and ``monty/new_worker``: pydantic-monty, a Python interpreter written
  in Rust that runs in a ``monty`` worker process. Its synchronous client: one
  ``Monty()`` pool kept for the whole section and a ``checkout()`` session per run (the
  pool's worker process is reused), or a new ``Monty()`` pool per run (a new worker
  process spawned, used once and shut down within the run).
* ``smolagents``: smolagents' ``LocalPythonExecutor``, an AST-walking interpreter in this
  process; a new executor per run, with its default time limit.
* ``restrictedpython``: RestrictedPython's ``compile_restricted``, then ``exec`` in this
  process with ``safe_builtins`` and the guards a host must supply.
* ``exec``: plain ``compile`` and ``exec``/``eval`` in this process (top-level ``await``
  allowed); no wall at all. A baseline.
* ``bare_spawn``: a bare ``python -I -S -c PROGRAM`` per run, host calls as lines over its
  stdin and stdout. A baseline.

The workloads (:data:`WORKLOADS`) are defined once, as programs whose last expression is
the value, and run as they are by ours and by every peer that can express them; each
value is checked. A peer that cannot be imported or started gets a row that says why; a
workload a peer cannot express is ``n/a`` with the reason, and where a peer needs a
different shape to express one (the bare spawn has no ``asyncio`` host), the closest
honest equivalent is measured and said so.

Samples come in rounds that visit every cell (ours and the peers), the first cell moving
by one each round, and within a cell every workload, the first moving by one each round.
Ours are timed on the host around ``await sandbox.run(...)``; a peer's run is timed around
the one call that makes it, in a thread of this process kept for the peers (its event loop
would otherwise add its own cost), so the hop to that thread is not in the number.

Then, untimed, two probes per cell: does a program read a file the study wrote in the
host's temporary directory, and does it connect to a socket the study listens on at the
host's loopback. With the documented facts (:class:`Isolation`) they make the "what each
isolates" table.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib
import inspect
import os
import platform
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar

import anyio
import anyio.to_thread

import sandbox
import sandbox._engine._levels

from ._machine import version
from .bench_levels import _ENV, ECHO, echo, pstats
from .bench_wire import summarize
from .study import (
    CHILD_LEVELS,
    Recorder,
    _ms,
    _pools,
    _rotated,
    cell_keys,
    describe,
    split_key,
    timed_run,
)

__all__ = [
    "INSTALL_HINT",
    "OURS",
    "PEER_KEYS",
    "PRESETS",
    "WORKLOADS",
    "Isolation",
    "Peer",
    "PeerSizes",
    "PeerUnavailable",
    "Workload",
    "analyse",
    "make_peers",
    "measure_peers",
    "plan",
    "split_program",
]

INSTALL_HINT: Final = "pip install 'sandbox-runtime[peers]'"

# -- workloads ----------------------------------------------------------------------------

#: Host calls in the two call workloads: the protocol's default in-flight cap.
CALLS: Final = 64
#: Iterations of the CPU loop.
CPU_N: Final = 100_000
#: Characters of the 1 MiB result.
BLOB_CHARS: Final = 1 << 20


@dataclass(frozen=True)
class Workload:
    """A program whose last expression is its value, and the value it must return.

    ``calls`` host calls to ``host.echo``; ``asynchronous``: ``host.echo(i)`` is awaited
    (under ``asyncio.gather``), else it is called and returns its value.
    """

    key: str
    label: str
    program: str
    expected: Any
    calls: int = 0
    asynchronous: bool = False

    def check(self, value: Any) -> str | None:
        """None if ``value`` is the expected one, else what is wrong with it."""
        if type(value) is type(self.expected) and value == self.expected:
            return None
        return f"wrong value: {_short(value)} (expected {_short(self.expected)})"


def _short(value: Any) -> str:
    """``repr(value)``, or its type and length when that is long."""
    text = repr(value)
    return text if len(text) <= 80 else f"{type(value).__name__} ({len(text)} characters of repr)"


WORKLOADS: Final = (
    Workload("trivial", "trivial run", "1", 1),
    Workload(
        "seq",
        f"{CALLS} host calls in a row",
        f"s = 0\nfor i in range({CALLS}):\n    s += host.echo(i)\ns",
        sum(range(CALLS)),
        calls=CALLS,
    ),
    Workload(
        "gather",
        f"{CALLS} host calls under asyncio.gather",
        "import asyncio\n"
        f"values = await asyncio.gather(*(host.echo(i) for i in range({CALLS})))\n"
        "sum(values)",
        sum(range(CALLS)),
        calls=CALLS,
        asynchronous=True,
    ),
    Workload(
        "cpu",
        f"CPU loop ({CPU_N:,} iterations)",
        f"x = 0\nfor i in range({CPU_N}):\n    x += i * i % 7\nx",
        sum(i * i % 7 for i in range(CPU_N)),
    ),
    Workload("blob", "1 MiB result", f"'x' * {BLOB_CHARS}", "x" * BLOB_CHARS),
)
WORKLOAD_KEYS: Final = tuple(w.key for w in WORKLOADS)


def split_program(program: str) -> tuple[str, str]:
    """``program`` as (the statements before its last expression, that expression).

    The expression is ``None`` when the program does not end in one. Used by the peers
    that have no "last expression is the value" rule of their own.

    Raises:
        SyntaxError: the program does not parse (top-level ``await`` is allowed).
    """
    tree = ast.parse(program)
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr) or last.col_offset != 0:
        return program, "None"
    lines = program.splitlines()
    expression = ast.get_source_segment(program, last.value)
    if expression is None:  # (not reached: the source is the one parsed)
        raise SyntaxError("the last expression has no source")
    return "\n".join(lines[: last.lineno - 1]) + "\n", expression


# -- what each one isolates ---------------------------------------------------------------


@dataclass(frozen=True)
class Isolation:
    """What stands between a program and the host, by what it does, not by its name.

    Each field begins with ``yes``, ``partly`` or ``no``, then says how.
    """

    process: str
    files: str
    network: str
    memory: str
    time: str


def our_isolation(level: str) -> Isolation:
    """Our level's walls; the memory and time limits as this host can enforce them."""
    gaps = sandbox._engine._levels.unenforceable(sandbox.Level(level))

    def limit(item: str, how: str) -> str:
        return f"no: {gaps[item]}" if item in gaps else how

    if level == "in_process":
        return Isolation(
            process="no: a thread of the host process",
            files="no: the host's, with its rights",
            network="no: the host's",
            memory=limit("max_memory", "yes"),
            time=limit("wall_clock", "yes"),
        )
    memory = limit("max_memory", "yes: rlimits and a per-run memory cgroup; the run is killed")
    time_limit = limit("wall_clock", "yes: wall clock and CPU time; the run's processes are killed")
    if level == "process":
        return Isolation(
            process="yes: a child per run (own session, scrubbed environment, only its "
            "channels inherited, rlimits, dies with the host)",
            files="partly: a private working directory, but the host's files are there "
            "with the host user's rights",
            network="no: the host's",
            memory=memory,
            time=time_limit,
        )
    return Isolation(
        process="yes: a child per run, plus user, PID, IPC, UTS and cgroup namespaces, "
        "seccomp, no capabilities, no_new_privs",
        files="yes: a mount namespace with a read-only view of only what the runner needs, "
        "and Landlock",
        network="yes: a network namespace of its own",
        memory=memory,
        time=time_limit,
    )


# -- the peers ----------------------------------------------------------------------------


class PeerUnavailable(Exception):
    """A peer cannot be used here (not installed, or it does not start); the message says
    why, and becomes the peer's row."""


def _import(module: str) -> Any:
    """``module``, imported lazily (the peers are an optional extra).

    Raises:
        PeerUnavailable: it is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise PeerUnavailable(f"not installed ({exc}): {INSTALL_HINT}") from exc


class _SyncHost:
    """``host`` for a peer in this process: ``host.echo(i)`` returns ``i``."""

    @staticmethod
    def echo(x: Any) -> Any:
        return echo(x)


class _AsyncHost:
    """``host`` whose ``echo`` is a coroutine function, for ``asyncio.gather``."""

    @staticmethod
    async def echo(x: Any) -> Any:
        return echo(x)


def _host_for(workload: Workload) -> type[_SyncHost | _AsyncHost]:
    return _AsyncHost if workload.asynchronous else _SyncHost


class Peer:
    """One alternative to ours, behind the interface every peer shares.

    ``prepare`` imports and starts it (or raises :class:`PeerUnavailable`), ``run`` runs
    one workload from a clean state and returns the program's value (raising if the peer
    reported a failure), ``close`` releases what ``prepare`` made. All three are called
    from one thread.
    """

    key: str = ""
    label: str = ""
    #: Distributions whose versions are recorded.
    distributions: tuple[str, ...] = ()
    #: How the peer is driven: its API, per run.
    how: str = ""
    isolation: Isolation
    #: Workloads the peer cannot express, with the reason.
    unsupported: ClassVar[Mapping[str, str]] = {}
    #: Workloads the peer runs in a shape of its own (the closest equivalent), with how.
    equivalents: ClassVar[Mapping[str, str]] = {}

    def __init__(self) -> None:
        #: What was seen of the peer's processes when it was prepared (for the record).
        self.observed: dict[str, Any] = {}

    def prepare(self) -> None:
        """Import and start the peer.

        Raises:
            PeerUnavailable: it is not installed or does not start.
        """

    def run(self, workload: Workload) -> Any:
        """Run ``workload`` once; its value."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`prepare` made."""

    def versions(self) -> dict[str, str | None]:
        """The versions of :attr:`distributions`; the interpreter's for a peer of none."""
        if not self.distributions:
            return {"Python": platform.python_version()}
        return {name: version(name) for name in self.distributions}


def observe_process(pid: int) -> dict[str, Any]:
    """What confines process ``pid``, from ``/proc``: its uid, seccomp mode, no_new_privs,
    effective capabilities, address-space limit, and the namespaces it shares with this
    process."""
    fields: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    shared = []
    for ns in ("user", "mnt", "net", "pid", "ipc", "uts"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/ns/{ns}") == os.readlink(f"/proc/self/ns/{ns}"):
                shared.append(ns)
    address_space = None
    for line in Path(f"/proc/{pid}/limits").read_text(encoding="utf-8").splitlines():
        if line.startswith("Max address space"):
            address_space = line.split()[3]
    return {
        "uid": fields.get("Uid", "").split()[0] if fields.get("Uid") else None,
        "seccomp": fields.get("Seccomp"),
        "no_new_privs": fields.get("NoNewPrivs"),
        "cap_eff": fields.get("CapEff"),
        "address_space_limit": address_space,
        "namespaces_shared_with_host": shared,
    }


_MONTY_ISOLATION: Final = Isolation(
    process="partly: a `monty` worker process (for crash isolation) with no OS confinement "
    "of its own (what `/proc` showed of it is under the table); the interpreter is the wall",
    files="yes, in the interpreter: no file access unless the host mounts a directory or "
    "answers its OS calls; the worker process itself has the host user's rights",
    network="yes, in the interpreter: no `socket` module; the worker process is on the "
    "host's network",
    memory="yes: `max_memory` caps the interpreter's heap (not set in these runs)",
    time="yes: `max_feed_duration_secs` (execution time only, not time waiting on the "
    "host), and the pool kills a worker past a grace or `request_timeout`",
)


class Monty(Peer):
    """pydantic-monty through its synchronous client: a ``Monty()`` pool of ``monty``
    worker processes and a ``checkout()`` session per run, either from one pool kept for
    the section (the worker is reused) or from a new pool per run (a new worker).

    Host calls: ``host`` is a ``ClassInstance`` wrapping a host object with ``echo``
    allowed, so ``host.echo(i)`` suspends the worker and the client calls the method. The
    ``asyncio.gather`` workload is driven with ``feed_start``: each call is answered with
    a pending future, and when every sandbox task waits on one, all are resolved in one
    ``resume`` (the synchronous client's way to keep 64 calls in flight; ``AsyncMonty``
    aborted this process at exit now and then, see the README).
    """

    distributions = ("pydantic-monty", "pydantic-monty-runtime")
    isolation = _MONTY_ISOLATION
    equivalents: ClassVar[Mapping[str, str]] = {
        "gather": "driven with `feed_start`: each call answered with a pending future, then "
        "all 64 resolved in one `resume`",
    }

    def __init__(self, reuse: bool) -> None:
        super().__init__()
        self.reuse = reuse
        self.key = "monty/reused" if reuse else "monty/new_worker"
        self.label = "Monty, reused worker" if reuse else "Monty, new worker per run"
        self.how = (
            "one `Monty()` pool for the section; per run `pool.checkout()` and "
            "`session.feed_run(program)` (the worker process is reused across runs)"
            if reuse
            else "per run a new `Monty()` pool (spawns its worker), `checkout()`, "
            "`feed_run(program)`, and the pool closed, all inside the timed run"
        )
        self._m: Any = None
        self._pool: Any = None

    def prepare(self) -> None:
        self._m = _import("pydantic_monty")
        try:
            pool = self._m.Monty()
            pool.__enter__()
        except Exception as exc:  # the worker binary is missing or does not start
            raise PeerUnavailable(f"does not start: {describe(exc)}") from exc
        keep = False
        try:
            with pool.checkout() as session:
                pid = session.worker_pid
                session.feed_run("1")
            if pid is not None:
                self.observed = {"worker": observe_process(pid)}
            keep = self.reuse
        finally:
            if keep:
                self._pool = pool
            else:
                pool.__exit__(None, None, None)

    def run(self, workload: Workload) -> Any:
        if self._pool is not None:
            return self._run_in(self._pool, workload)
        with self._m.Monty() as pool:
            return self._run_in(pool, workload)

    def _run_in(self, pool: Any, workload: Workload) -> Any:
        m = self._m
        with pool.checkout() as session:
            inputs = None
            if workload.calls:
                inputs = {"host": m.ClassInstance(_SyncHost(), allowed_methods={"echo"})}
            if not workload.asynchronous:
                return session.feed_run(workload.program, inputs=inputs)
            snapshot = session.feed_start(workload.program, inputs=inputs)
            pending: dict[int, tuple[Any, ...]] = {}
            while not isinstance(snapshot, m.MontyComplete):
                if isinstance(snapshot, m.FunctionSnapshot) and snapshot.function_name == "echo":
                    pending[snapshot.call_id] = snapshot.args
                    snapshot = snapshot.resume({"future": ...})
                elif isinstance(snapshot, m.FutureSnapshot):
                    snapshot = snapshot.resume(
                        {
                            call: {"return_value": echo(*pending.pop(call))}
                            for call in snapshot.pending_call_ids
                        }
                    )
                else:
                    raise RuntimeError(f"unexpected suspension: {snapshot!r}")
            return snapshot.output

    def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.__exit__(None, None, None)


class Smolagents(Peer):
    """smolagents' ``LocalPythonExecutor``: a new executor per run (``send_tools({})``,
    then ``host`` as a variable), called with the program; its value is
    ``CodeOutput.output``. Its default time limit (30 s) stays on: that is what a user
    gets, and it runs every program in a thread of its own."""

    key = "smolagents"
    label = "smolagents LocalPythonExecutor"
    distributions = ("smolagents",)
    how = (
        "per run `LocalPythonExecutor(additional_authorized_imports=[])`, "
        "`send_tools({})`, `send_variables({'host': ...})`, `executor(program).output`"
    )
    isolation = Isolation(
        process="no: an AST-walking interpreter in the host process (its docs: not a "
        "security sandbox)",
        files="partly: `open` and imports outside an allow-list are refused by the "
        "interpreter; objects handed in are reachable",
        network="partly: `socket` is not an allowed import",
        memory="no",
        time="partly: a timeout (30 s by default) returns an error, but the program "
        "goes on running in its thread; 10M operations and 1M `while` iterations caps",
    )
    unsupported: ClassVar[Mapping[str, str]] = {
        "gather": "its interpreter has no `await`, and `asyncio` is not an allowed import",
    }

    def __init__(self) -> None:
        super().__init__()
        self._executor: Any = None

    def prepare(self) -> None:
        self._executor = _import("smolagents.local_python_executor").LocalPythonExecutor

    def run(self, workload: Workload) -> Any:
        executor = self._executor(additional_authorized_imports=[])
        executor.send_tools({})
        if workload.calls:
            executor.send_variables({"host": _host_for(workload)})
        return executor(workload.program).output


def _inplacevar(op: str, x: Any, y: Any) -> Any:
    """RestrictedPython's ``_inplacevar_`` guard, which the host must supply: ``+=`` only."""
    if op == "+=":
        return x + y
    raise TypeError(f"{op} is not allowed")


class RestrictedPythonPeer(Peer):
    """RestrictedPython: per run, the program's statements and its last expression are
    compiled with ``compile_restricted`` (``exec`` and ``eval`` modes), and run with
    ``safe_builtins``, ``safer_getattr``, ``default_guarded_getiter`` and an
    ``_inplacevar_`` that allows ``+=`` (RestrictedPython ships none)."""

    key = "restrictedpython"
    label = "RestrictedPython"
    distributions = ("RestrictedPython",)
    how = (
        "per run `compile_restricted` of the statements and of the last expression, "
        "then `exec`/`eval` with `safe_builtins` and the guards (`_getattr_`, `_getiter_`, "
        "`_inplacevar_`) in the host process"
    )
    isolation = Isolation(
        process="no: CPython bytecode in the host process",
        files="partly: only what the builtins handed in allow (`safe_builtins` has no `open`)",
        network="partly: no `__import__` in `safe_builtins`, so no `socket`",
        memory="no",
        time="no",
    )
    unsupported: ClassVar[Mapping[str, str]] = {
        "gather": '`compile_restricted` refuses `await` and `async def` ("Await statements '
        'are not allowed")',
    }

    def __init__(self) -> None:
        super().__init__()
        self._rp: Any = None
        self._guards: Any = None
        self._eval: Any = None

    def prepare(self) -> None:
        self._rp = _import("RestrictedPython")
        self._guards = _import("RestrictedPython.Guards")
        self._eval = _import("RestrictedPython.Eval")

    def run(self, workload: Workload) -> Any:
        body, expression = split_program(workload.program)
        body_code = self._rp.compile_restricted(body, "<program>", "exec")
        expression_code = self._rp.compile_restricted(expression, "<program>", "eval")
        namespace: dict[str, Any] = {
            "__builtins__": self._rp.safe_builtins,
            "_getattr_": self._guards.safer_getattr,
            "_getiter_": self._eval.default_guarded_getiter,
            "_inplacevar_": _inplacevar,
        }
        if workload.calls:
            namespace["host"] = _host_for(workload)
        exec(body_code, namespace)
        return eval(expression_code, namespace)


class Exec(Peer):
    """Plain ``exec``: per run, ``compile`` the statements (top-level ``await`` allowed)
    and the last expression; ``eval`` them in a fresh namespace with ``host`` in it; a
    coroutine (the ``gather`` workload) is run on an event loop kept for the section."""

    key = "exec"
    label = "plain exec()"
    how = (
        "per run `compile(..., flags=PyCF_ALLOW_TOP_LEVEL_AWAIT)` and `eval` in a fresh "
        "namespace in the host process; a coroutine runs on one asyncio loop kept for the "
        "section"
    )
    isolation = Isolation(
        process="no: the host process",
        files="no: the host's, with its rights",
        network="no: the host's",
        memory="no",
        time="no",
    )

    def __init__(self) -> None:
        super().__init__()
        self._loop: asyncio.AbstractEventLoop | None = None

    def prepare(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, workload: Workload) -> Any:
        assert self._loop is not None
        body, expression = split_program(workload.program)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        namespace: dict[str, Any] = {"__name__": "__program__"}
        if workload.calls:
            namespace["host"] = _host_for(workload)
        done = eval(compile(body, "<program>", "exec", flags=flags), namespace)
        if inspect.iscoroutine(done):
            self._loop.run_until_complete(done)
        return eval(compile(expression, "<program>", "eval", flags=flags), namespace)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


#: A bare child's ``host``: a call is a line ``c ARG`` on stdout, its answer a line on stdin.
_LINE_HOST: Final = (
    "import sys\n"
    "class host:\n"
    "    @staticmethod\n"
    "    def echo(i):\n"
    "        sys.stdout.write(f'c {i}\\n')\n"
    "        sys.stdout.flush()\n"
    "        return int(sys.stdin.readline())\n"
)


def _pipelined_program(calls: int) -> str:
    """A bare child's closest shape of ``calls`` calls in flight without asyncio: every
    request written at once, then every answer read."""
    return (
        "import sys\n"
        f"sys.stdout.write(''.join(f'c {{i}}\\n' for i in range({calls})))\n"
        "sys.stdout.flush()\n"
        f"values = [int(sys.stdin.readline()) for _ in range({calls})]\n"
        "sys.stdout.write('r ' + repr(sum(values)) + '\\n')\n"
    )


class BareSpawn(Peer):
    """A bare ``python -I -S -c PROGRAM`` per run, from ``Popen`` to reaped exit, the
    value printed as a line ``r repr(value)`` on stdout and read back with
    ``ast.literal_eval``; host calls are lines ``c ARG`` answered on its stdin."""

    key = "bare_spawn"
    label = "bare `python -I -S` spawn"
    how = (
        "per run `Popen([python, '-I', '-S', '-c', program])` to reaped exit; the value "
        "printed with `repr` and read back; a host call is a line out and a line back"
    )
    isolation = Isolation(
        process="partly: a child process and nothing else (`-I -S` only keeps the "
        "environment and site-packages out)",
        files="no: the host's, with the host user's rights",
        network="no: the host's",
        memory="no (none set)",
        time="no (none set; this benchmark kills it at `--timeout`)",
    )
    equivalents: ClassVar[Mapping[str, str]] = {
        "seq": "each call a line `c i` on stdout, answered by a line on stdin (no JSON)",
        "gather": "no asyncio: the child writes the 64 request lines at once, then reads "
        "the 64 answers",
    }

    def __init__(self, timeout: float = 60.0) -> None:
        super().__init__()
        self.timeout = timeout

    def program_for(self, workload: Workload) -> str:
        """The source the child runs for ``workload``."""
        if workload.asynchronous:
            return _pipelined_program(workload.calls)
        body, expression = split_program(workload.program)
        prelude = _LINE_HOST if workload.calls else "import sys\n"
        return f"{prelude}{body}sys.stdout.write('r ' + repr({expression}) + '\\n')\n"

    def run(self, workload: Workload) -> Any:
        argv = [sys.executable, "-I", "-S", "-c", self.program_for(workload)]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_ENV,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        watchdog = threading.Timer(self.timeout, proc.kill)
        watchdog.start()
        value: Any = None
        answered = False
        try:
            for line in proc.stdout:
                if line.startswith(b"c "):
                    proc.stdin.write(f"{echo(int(line[2:]))}\n".encode())
                    proc.stdin.flush()
                elif line.startswith(b"r "):
                    value = ast.literal_eval(line[2:].decode())
                    answered = True
            proc.stdin.close()
            err = proc.stderr.read()
            code = proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    stream.close()
        if code != 0 or not answered:
            raise RuntimeError(f"exited {code}: {err.decode(errors='replace')[-500:]}")
        return value


def make_peers(timeout: float = 60.0) -> list[Peer]:
    """Every peer, in the order of the tables."""
    return [
        Monty(reuse=True),
        Monty(reuse=False),
        Smolagents(),
        RestrictedPythonPeer(),
        Exec(),
        BareSpawn(timeout),
    ]


PEER_KEYS: Final = (
    "monty/reused",
    "monty/new_worker",
    "smolagents",
    "restrictedpython",
    "exec",
    "bare_spawn",
)
#: Our cells in this section: every level and spawn mode of the study.
OURS: Final = tuple(cell_keys())
#: The cells every other cell's time is divided by, per round.
REFERENCES: Final = ("confined/pool", "exec", "bare_spawn")


# -- sizes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeerSizes:
    """How much the peers section measures."""

    rounds: int
    per_round: int  # samples per cell, workload and round
    cpu_per_round: int  # the same for the CPU loop (smolagents takes about a second)
    warmup: int  # uncounted (but checked) samples per cell and workload
    pool_size: int  # each of our pool cells' Pool


PRESETS: Final = {
    "full": PeerSizes(rounds=5, per_round=10, cpu_per_round=3, warmup=1, pool_size=2),
    "quick": PeerSizes(rounds=3, per_round=5, cpu_per_round=2, warmup=1, pool_size=2),
    "smoke": PeerSizes(rounds=1, per_round=2, cpu_per_round=1, warmup=1, pool_size=1),
}


def _samples(sizes: PeerSizes, workload: str) -> int:
    return sizes.cpu_per_round if workload == "cpu" else sizes.per_round


# -- measuring ----------------------------------------------------------------------------

_T = TypeVar("_T")


class _PeerThread:
    """The one thread every peer call runs in (a peer's objects stay on one thread)."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="peers")

    async def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        future = self._executor.submit(fn, *args)
        return await anyio.to_thread.run_sync(future.result)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


def _timed(peer: Peer, workload: Workload) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = peer.run(workload)
    return time.perf_counter() - t0, value


def _expect(workload: Workload) -> Callable[[sandbox.RunResult], str | None]:
    def check(result: sandbox.RunResult) -> str | None:
        if not result.ok:
            return f"kind={result.kind} cause={result.cause}: {result.error[:1500]}"
        if result.calls != workload.calls:
            return f"{result.calls} calls (expected {workload.calls})"
        return workload.check(result.value)

    return check


@dataclass
class _Cell:
    key: str
    peer: Peer | None  # None: one of ours
    status: str = "ok"
    samples: dict[str, list[list[float]]] = field(default_factory=dict)
    probes: dict[str, str] = field(default_factory=dict)

    def reason(self, workload: str) -> str | None:
        """Why this cell has no samples of ``workload``, or None."""
        if self.status != "ok":
            return self.status
        if self.peer is not None:
            return self.peer.unsupported.get(workload)
        return None


class _Probes:
    """A file in the host's temporary directory and a socket listening on the host's
    loopback, with a workload for each that succeeds only if the wall lets it through."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="peers-probe-")
        self.token = secrets.token_hex(8)
        path = Path(self._dir.name) / "secret.txt"
        path.write_text(self.token, encoding="utf-8")
        path.chmod(0o644)
        Path(self._dir.name).chmod(0o755)
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        port = self._listener.getsockname()[1]
        self.workloads = (
            Workload(
                "read_host_file",
                "reads a host file",
                f"with open({str(path)!r}) as f:\n    text = f.read()\ntext",
                self.token,
            ),
            Workload(
                "connect_host_loopback",
                "connects to the host's loopback",
                "import socket\n"
                f"s = socket.create_connection(('127.0.0.1', {port}), 2)\n"
                "s.close()\n"
                "'connected'",
                "connected",
            ),
        )

    def close(self) -> None:
        self._listener.close()
        self._dir.cleanup()


def _outcome(problem: str | None) -> str:
    """A probe's result: "allowed", or "blocked: " and the exception the program met (the
    last line of a traceback; the last reason of an error that chains them)."""
    if problem is None:
        return "allowed"
    lines = [line.strip() for line in problem.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "?"
    if "Traceback" in problem:
        last = next(
            (ln for ln in reversed(lines) if ":" in ln and " " not in ln.split(":")[0]), last
        )
    last = last.rsplit(" due to: ", 1)[-1]
    return "blocked: " + last[:160]


def plan(rec: Recorder, sizes: PeerSizes, keys: Sequence[str] = (*OURS, *PEER_KEYS)) -> None:
    """One progress task per cell of the section (``keys``: every cell's)."""
    per_cell = len(WORKLOADS) * sizes.warmup + sizes.rounds * sum(
        _samples(sizes, w) for w in WORKLOAD_KEYS
    )
    for key in keys:
        rec.add(f"peers/{key}", f"peers     {key}", per_cell + 2)


async def measure_peers(
    rec: Recorder,
    sizes: PeerSizes,
    limit: float,
    peers: Sequence[Peer] | None = None,
    ours: Sequence[str] = OURS,
) -> dict[str, Any]:
    """Our cells and every peer on every workload, interleaved; then the probes.

    ``peers`` (default: :func:`make_peers`) and ``ours`` (default: every level and spawn
    mode) are for the tests. ``limit``: seconds one of our runs, or a bare spawn, may take.
    """
    peers = list(make_peers(limit) if peers is None else peers)
    thread = _PeerThread()
    cells = [_Cell(key, None) for key in ours] + [_Cell(p.key, p) for p in peers]
    pool_levels = [lv for lv in CHILD_LEVELS if f"{lv}/pool" in ours]
    try:
        for cell in cells:
            if cell.peer is None:
                continue
            try:
                await thread.call(cell.peer.prepare)
            except PeerUnavailable as exc:
                cell.status = str(exc)
            except Exception as exc:  # it does not start: its row says why
                cell.status = f"does not start: {describe(exc)}"
            if cell.status != "ok":
                rec.done(f"peers/{cell.key}", cell.status[:60])
        async with _pools(pool_levels, sizes.pool_size, limit) as pools:
            sample = _Sampler(rec, thread, pools, limit)
            for cell in cells:
                for workload in WORKLOADS:
                    cell.samples[workload.key] = []
                    if cell.reason(workload.key) is not None:
                        continue
                    for w in range(sizes.warmup):
                        await sample(cell, workload, -1 - w)
            for r in range(sizes.rounds):
                for cell in _rotated_cells(cells, r):
                    for key in _rotated(WORKLOAD_KEYS, r):
                        workload = WORKLOADS[WORKLOAD_KEYS.index(key)]
                        if cell.reason(key) is not None:
                            continue
                        got = []
                        for i in range(_samples(sizes, key)):
                            index = r * _samples(sizes, key) + i
                            seconds = await sample(cell, workload, index)
                            if seconds is not None:
                                got.append(seconds)
                        cell.samples[key].append(got)
            probes = _Probes()
            try:
                for cell in cells:
                    if cell.status != "ok":
                        continue
                    for workload in probes.workloads:
                        cell.probes[workload.key] = await sample.probe(cell, workload)
            finally:
                probes.close()
    finally:
        for cell in cells:
            if cell.peer is not None and cell.status == "ok":
                with contextlib.suppress(Exception):
                    await thread.call(cell.peer.close)
        thread.shutdown()
    out = analyse(_document(cells, sizes, ours))
    for cell in cells:
        if cell.status == "ok":
            p50 = (out["cells"][cell.key]["workloads"]["trivial"]["stats"] or {}).get("p50")
            rec.done(f"peers/{cell.key}", f"trivial p50 {p50 if p50 is None else f'{p50:.3g}'} ms")
    return out


def _rotated_cells(cells: list[_Cell], shift: int) -> list[_Cell]:
    shift %= len(cells)
    return [*cells[shift:], *cells[:shift]]


class _Sampler:
    """One checked, timed sample of a cell and workload (seconds, or None if it failed)."""

    def __init__(
        self,
        rec: Recorder,
        thread: _PeerThread,
        pools: dict[str, sandbox.Pool],
        timeout: float,
    ) -> None:
        self.rec, self.thread, self.pools, self.timeout = rec, thread, pools, timeout

    async def __call__(self, cell: _Cell, workload: Workload, index: int) -> float | None:
        seconds, problem = await self._once(cell, workload)
        self.rec.advance(f"peers/{cell.key}")
        if problem is not None:
            self.rec.fail("peers", f"{cell.key}/{workload.key}", index, problem)
            return None
        return seconds

    async def probe(self, cell: _Cell, workload: Workload) -> str:
        _, problem = await self._once(cell, workload)
        self.rec.advance(f"peers/{cell.key}")
        return _outcome(problem)

    async def _once(self, cell: _Cell, workload: Workload) -> tuple[float, str | None]:
        if cell.peer is None:
            level, spawn = split_key(cell.key)
            target: str | sandbox.Pool | None = spawn
            if spawn == "pool":
                target = self.pools[level]
                if not await anyio.to_thread.run_sync(target.wait_full, self.timeout):
                    return 0.0, f"the pool was not full within {self.timeout} s"
            tools = (ECHO,) if workload.calls else ()
            seconds, _, problem = await timed_run(
                workload.program, level, target, _expect(workload), self.timeout, tools=tools
            )
            return seconds, problem
        try:
            seconds, value = await self.thread.call(_timed, cell.peer, workload)
        except Exception as exc:  # the peer reported a failure: counted, with its reason
            return 0.0, describe(exc)
        return seconds, workload.check(value)


# -- analysis -----------------------------------------------------------------------------


def _document(cells: list[_Cell], sizes: PeerSizes, ours: Sequence[str]) -> dict[str, Any]:
    """The section's JSON before its ratios: every sample, and what each cell is."""
    out: dict[str, Any] = {
        "sizes": {
            "rounds": sizes.rounds,
            "per_round": sizes.per_round,
            "cpu_per_round": sizes.cpu_per_round,
            "warmup": sizes.warmup,
            "pool_size": sizes.pool_size,
        },
        "workloads": {
            w.key: {
                "label": w.label,
                "program": w.program,
                "calls": w.calls,
                "asynchronous": w.asynchronous,
                "expected": _short(w.expected),
            }
            for w in WORKLOADS
        },
        "ours": list(ours),
        "peers": [c.key for c in cells if c.peer is not None],
        "references": list(REFERENCES),
        "cells": {},
    }
    for cell in cells:
        peer = cell.peer
        entry: dict[str, Any] = {"kind": "ours" if peer is None else "peer", "status": cell.status}
        if peer is None:
            level, spawn = split_key(cell.key)
            isolation = our_isolation(level)
            entry.update(
                label=cell.key if spawn is None else f"{level} / {spawn}",
                how=f"`await sandbox.run(program, level={level!r}"
                + ("" if spawn is None else f", spawn={spawn!r}")
                + ")`, `host.echo` a `sandbox.Tool(echo, inline=True)`",
                versions={"sandbox-runtime": version("sandbox-runtime")},
                equivalents={},
                observed={},
            )
        else:
            isolation = peer.isolation
            entry.update(
                label=peer.label,
                how=peer.how,
                versions=peer.versions(),
                equivalents=dict(peer.equivalents),
                observed=peer.observed,
            )
        entry["isolates"] = {
            "process": isolation.process,
            "files": isolation.files,
            "network": isolation.network,
            "memory": isolation.memory,
            "time": isolation.time,
        }
        entry["probes"] = cell.probes
        entry["workloads"] = {
            key: {
                "unsupported": cell.reason(key),
                "samples_ms": [[_ms(x) for x in r] for r in cell.samples.get(key, [])],
            }
            for key in WORKLOAD_KEYS
        }
        out["cells"][cell.key] = entry
    return out


def analyse(doc: dict[str, Any]) -> dict[str, Any]:
    """Stats per cell and workload, and per-round ratios to each reference cell.

    Works on the JSON (``samples_ms``) alone, so a document can be re-analysed later.
    """
    cells = doc["cells"]
    for cell in cells.values():
        for entry in cell["workloads"].values():
            rounds = [[x / 1e3 for x in r] for r in entry["samples_ms"]]
            pooled = [x for r in rounds for x in r]
            entry["stats"] = pstats(pooled) if pooled else None
            entry["per_round_p50_ms"] = [pstats(r)["p50"] if r else None for r in rounds]
    for cell in cells.values():
        for key, entry in cell["workloads"].items():
            entry["ratios"] = {}
            for ref in doc.get("references", REFERENCES):
                base = cells.get(ref, {}).get("workloads", {}).get(key)
                if base is None:
                    continue
                entry["ratios"][ref] = ratio(entry, base)
    doc["ratio_definition"] = (
        "cell p50 / reference p50 over all samples; per round: that round's p50 / the "
        "same round's reference p50, summarised as median [min-max]"
    )
    return doc


def ratio(entry: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """``entry``'s p50 over ``base``'s, pooled and per round."""
    stats, base_stats = entry.get("stats"), base.get("stats")
    per_round = [
        a / b
        for a, b in zip(
            entry.get("per_round_p50_ms", []), base.get("per_round_p50_ms", []), strict=False
        )
        if a is not None and b
    ]
    return {
        "p50": stats["p50"] / base_stats["p50"] if stats and base_stats else None,
        "per_round": per_round,
        "summary": summarize(per_round) if per_round else None,
    }
