"""The zygote: a warm template process that forks one fresh runner per run.

Process tree::

    host ── keeper ── zygote ── runner (one per run, never two runs)
                             ├─ runner ── the program's processes
                             └─ ...

The host starts the **keeper** with ``python -I -S`` and one end of a ``SOCK_SEQPACKET``
socket pair (the control channel). The keeper is a child subreaper that only reaps: it
forks the zygote first thing, and from then on waits for children. If the zygote dies, its
runners are re-parented to the keeper, go on with their runs (the host still gets every
Result it is owed), and are reaped there. If the host dies, the keeper gives the zygote a
moment to clean up, then kills whatever is left under it, and exits.

The **zygote** imports the runner, its backend, msgspec and the confined level's modules
once, freezes its objects out of the garbage collector's reach (so that forked children
share its pages rather than copying them), tells the host its pid, and serves requests.
It is a subreaper too, and the parent of every runner.

A request is a :class:`ForkRequest` with eight descriptors (:data:`FD_NAMES`): the run's
channels and stdout/stderr ends, a ``ready`` pipe and the run's **report** socket. For each
request the zygote forks once. In the child, before anything of the run arrives, it:

* leaves the zygote behind: closes the zygote's sockets and unwinds the zygote's stack to
  the top (:class:`_Unwind`), taking only its request and descriptors along, which it drops
  in turn once it has used them; so nothing of the zygote's bookkeeping (other runs'
  working directories and cgroups, the host's pid, the host's cgroup paths) is left for
  the program to find (through the stack, :mod:`gc` or module globals);
* joins the run's cgroups (so everything it forks later is counted), starts a session,
  makes the pipes its stdio and channels, closes every other descriptor (the control
  channel included), moves to the run's working directory, takes the run's environment;
* ``warm``: carries on as the runner (:func:`runner._main.serve`), which puts up the
  confined level's walls if asked, writes ``ready``, and waits for its Start;
* ``cold``: executes a fresh ``python -I -S`` runner with the same descriptors instead:
  the reference point that shows what the warm path saves.

A root zygote does three things for a warm confined child beforehand: it forks it PID 1 of
a PID namespace of its own (:func:`runner._namespaces.fork_pid_one`: no second fork); it
hands it a descriptor of the **shared view** (descriptor 8), a mount namespace holding the
read-only view of the host, which a helper process builds once per set of read-only paths
(:func:`_build_shared_view`) and which each child copies rather than building its own
(see :mod:`runner._namespaces`, *The shared view*); and it hands it a **network namespace
made ahead** for that child alone (the next descriptor), its loopback up, which the child
joins rather than making its own. Making one costs the kernel about 0.6 ms, which the
zygote spends while it has no request to serve: once it has forked a confined child, it
keeps up to :data:`_SPARE_NETWORKS` of them (:func:`runner._namespaces.make_network_namespace`),
and a child forked when there is none makes its own. Each is given to one child and
closed in the zygote when it is: no two runs ever share one.

In the zygote, the report socket gets ``forked`` (with a pidfd of the child attached);
for a confined child, ``moved`` (with a pidfd) once the child has forked PID 1 of its
namespace and exited, leaving PID 1, the same session, to the zygote as the run's runner
(right after ``forked``, for a child forked PID 1 at birth: it is the runner);
and, once the zygote has reaped the runner, ``exited`` with its wait status and resource
usage, after which it is closed. Processes a dead runner leaves behind come up to the
zygote (its subreaper) and are killed on sight.

When the control channel reaches EOF (the host closed it, or died), the zygote kills every
runner and everything under them, removes their working directories and cgroups, and exits.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import importlib
import os
import resource
import select
import shutil
import signal
import socket
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, NoReturn

import msgspec

from protocol import (
    CGROUP_PREFIX,
    FD_NAMES,
    FORK_REQUEST_DECODER,
    MAX_FORK_MESSAGE,
    WORKDIR_PREFIX,
    Exited,
    Failed,
    Forked,
    ForkRequest,
    Moved,
    RemoteProtocolError,
    Report,
    RunnerExit,
    decode_fork,
)

if TYPE_CHECKING:
    from . import _confine, _main

__all__ = ["main"]

#: Where the run's channels and ready pipe land in the child (0, 1, 2 are its stdio).
_CHILD_FDS: Final = (3, 4, 5, 6, 7)
#: Where a shared view's mount namespace lands in a confined child (see ``_Job.view``), and
#: after it (or here, without one) the run's network namespace made ahead (``_Job.net``).
_VIEW_FD: Final = 8
#: How many network namespaces a root zygote keeps made ahead for its confined children.
_SPARE_NETWORKS: Final = 4
_PR_SET_CHILD_SUBREAPER: Final = 36
#: How long the zygote waits for a shared view to be built (a few milliseconds, normally).
_SHARED_VIEW_TIMEOUT: Final = 10.0
#: How long the keeper waits for the zygote's own clean-up after the host has died.
_KEEPER_GRACE: Final = 3.0


def _prctl_subreaper() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _children() -> list[int]:
    """This process's live children (every thread's, though the zygote has one)."""
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            kids.extend(int(x) for x in _read_proc(f"/proc/self/task/{tid}/children").split())
    return kids


def _read_proc(path: str) -> bytes:
    """A small file of ``/proc``, whole, read with the system calls alone: the zygote reads
    these between every two forks, where each page it writes is one the last fork made
    shared again, and the file objects of :func:`open` wrote to about forty (the zygote's
    page faults per run forked on demand here: 218-225 without them, 260-267 with).

    Raises:
        OSError: it could not be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kill_everything_below(deadline: float) -> None:
    """SIGKILL every child until there is none left (orphans come up as parents die)."""
    while time.monotonic() < deadline:
        kids = _children()
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        if not kids:
            time.sleep(0.001)


def _send(sock: socket.socket, report: Report, fds: Sequence[int] = ()) -> None:
    data = msgspec.json.encode(report)
    try:
        if fds:
            socket.send_fds(sock, [data], list(fds))
        else:
            sock.send(data)
    except OSError:
        pass  # the host stopped listening to this run: it will find out through its pidfd


def _session_of(pid: int) -> int | None:
    """The session id of ``pid`` (alive or a zombie), from ``/proc``."""
    try:
        data = _read_proc(f"/proc/{pid}/stat")
    except OSError:
        return None
    # pid (comm) state ppid pgrp session ...; comm may hold anything but ends at the last ")".
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[3])


class _Dead:
    """A child the zygote reaped: its pid, the session it was of, and how it ended."""

    __slots__ = ("exited", "pid", "session")

    def __init__(self, pid: int, session: int | None, exited: Exited) -> None:
        self.pid = pid
        self.session = session
        self.exited = exited


def _reap_all() -> list[_Dead]:
    """Reap every dead child of this process.

    Each child's session is read before it is reaped (a zombie still has one): that is how
    a detached PID 1 is told from an orphan.
    """
    dead: list[_Dead] = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return dead
        if info is None:
            return dead
        pid = info.si_pid
        session = _session_of(pid)
        _, status, usage = os.wait4(pid, 0)  # a zombie: returns at once
        exited = Exited(status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss * 1024)
        dead.append(_Dead(pid, session, exited))


def _left_pid1(status: int) -> bool:
    """Whether a confined child's wait ``status`` says it left its PID 1 to the zygote."""
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == RunnerExit.DETACHED


class _Runner:
    """One run's child. Keyed by the pid the zygote forked, which is also its session id.

    A confined child forks PID 1 of its namespace and exits with
    :data:`runner._namespaces.EXIT_DETACHED`; PID 1 (same session) is re-parented to the
    zygote and becomes the run's runner (``pid1``).
    """

    __slots__ = ("cgroups", "confined", "detached", "pid1", "report", "workdir")

    def __init__(self, report: socket.socket, request: ForkRequest) -> None:
        self.report = report
        self.workdir = request.workdir
        self.cgroups = request.cgroups
        self.confined = bool(request.confine)
        self.detached = False
        self.pid1: int | None = None

    def is_pid1(self, pid: int) -> bool:
        """Whether ``pid``, a process of this run's session, is its PID 1 (a PID 1 that died
        before :meth:`_Zygote._detached` could find it is the first of the session to die).
        """
        return self.pid1 == pid or (self.detached and self.pid1 is None)


#: :mod:`signal`'s C module: its ``signal`` is :func:`signal.signal` without the Python
#: wrapper that makes the handler replaced an enum member where it can. The zygote's own is
#: none, and finding that out (an exception raised and caught in :mod:`enum`) took 0.12 ms
#: and 44 page faults of each child's start here. (It takes its own ``SIG_DFL``, not the
#: enum member.)
_c_signal = importlib.import_module("_signal")


class _Zygote:
    def __init__(self, control: socket.socket, host: int) -> None:
        self.control = control
        self.host = host
        self.runners: dict[int, _Runner] = {}
        #: Where the host's runs live: temporary directories and cgroup parents seen.
        self.places: set[str] = set()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        #: The shared views built so far (mount namespaces), by their read-only paths; None
        #: where one could not be built (its runs build their own view).
        self.views: dict[_confine.SharedView, int | None] = {}
        #: A root zygote's own PID namespace: it forks each confined runner PID 1 of a new
        #: one (see :func:`runner._namespaces.fork_pid_one`).
        self.pid_namespace: int | None = None
        #: A root zygote's own network namespace, which it goes back to after making each
        #: of the ``spare_networks`` (see :meth:`_make_spare_network`).
        self.net_namespace: int | None = None
        self.spare_networks: list[int] = []
        #: Whether to keep spare network namespaces: once a child was forked that would
        #: take one, unless making one failed.
        self.wants_networks = False
        self.networks_failed = False
        if os.geteuid() == 0:
            with contextlib.suppress(OSError):
                self.pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            with contextlib.suppress(OSError):
                self.net_namespace = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    def serve(self) -> NoReturn:
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        poller = select.poll()
        poller.register(self.control, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        import gc

        gc.collect()
        gc.freeze()  # the children share these pages; no collection will touch them
        _send(self.control, Forked(os.getpid()))  # hello: the host learns our pid
        while True:
            short = self._short_of_networks()
            try:
                events = poller.poll(0 if short else None)
            except InterruptedError:  # pragma: no cover (PEP 475 retries)
                continue
            if not events and short:  # nothing to serve: make a network namespace ahead
                self._make_spare_network()
                continue
            for fd, _ in events:
                if fd == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif not self._receive():
                    self._shutdown()
            self._reap()

    def _receive(self) -> bool:
        """Handle one request; False once the control channel is at EOF (or broken)."""
        try:
            data, fds, _, _ = socket.recv_fds(self.control, MAX_FORK_MESSAGE, len(FD_NAMES))
        except InterruptedError:
            return True
        except OSError:
            return False
        if not data:
            for fd in fds:
                os.close(fd)
            return False
        if len(fds) != len(FD_NAMES):
            for fd in fds:
                os.close(fd)
            return True  # not a request we can answer: nobody to answer it to either
        report = socket.socket(fileno=fds[-1])
        try:
            request = decode_fork(FORK_REQUEST_DECODER, data)
        except RemoteProtocolError as exc:
            for fd in fds[:-1]:
                os.close(fd)
            _send(report, Failed(f"bad request: {exc}"))
            report.close()
            return True
        self._fork(request, fds[:-1], report)
        return True

    def _short_of_networks(self) -> bool:
        return (
            self.wants_networks
            and not self.networks_failed
            and len(self.spare_networks) < _SPARE_NETWORKS
        )

    def _make_spare_network(self) -> None:
        """Make one network namespace ahead (see the module docstring); if that fails, say
        so and make no more (the children make their own)."""
        from . import _namespaces

        assert self.net_namespace is not None
        try:
            self.spare_networks.append(_namespaces.make_network_namespace(self.net_namespace))
        except _namespaces.NetworkNamespaceStuck as exc:
            # In another network namespace for good: the next child forked for a run at the
            # process level would have no network of the host's. Nothing more is forked.
            sys.stderr.write(f"runner: the zygote's network namespace is lost ({exc})\n")
            self._shutdown()
        except OSError as exc:
            sys.stderr.write(f"runner: no network namespaces made ahead ({exc})\n")
            self.networks_failed = True

    def _take_spare_network(self) -> int | None:
        """A network namespace made ahead, for the child about to be forked (the caller
        closes it once forked); None if there is none (the child makes its own)."""
        self.wants_networks = self.net_namespace is not None
        return self.spare_networks.pop(0) if self.spare_networks else None

    def _fork(self, request: ForkRequest, fds: list[int], report: socket.socket) -> None:
        if request.mode == "warm":  # (a cold child executes with the request's own)
            try:
                _set_environ(request.env)  # the child's, which it inherits: see _set_environ
            except (ValueError, OSError) as exc:  # a name or value no environment holds
                for fd in fds:
                    os.close(fd)
                _send(report, Failed(f"the run's environment cannot be set: {exc}"))
                report.close()
                return
        confinement: _confine.Confinement | None = None
        view: int | None = None
        pid_one = False
        net: int | None = None
        if request.confine:
            confinement, view, pid_one = self._prepare_confined(request)
            if pid_one:  # a root zygote's warm child (where a view can be shared too)
                net = self._take_spare_network()
        try:
            pid = self._fork_pid_one() if pid_one else os.fork()
        except OSError as exc:
            for fd in fds if net is None else (*fds, net):
                os.close(fd)
            _send(report, Failed(f"fork: {exc}"))
            report.close()
            from ._namespaces import PidNamespaceStuck

            if isinstance(exc, PidNamespaceStuck):
                self._shutdown()  # its next child would be born in another run's namespace
            return
        if pid == 0:
            own_view = None if view is None else _dup_high(view)
            own_net = None if net is None else _dup_high(net)
            if net is not None:
                os.close(net)
            self._leave(report)
            raise _Unwind(
                _Job(
                    request,
                    fds,
                    confinement=confinement,
                    view=own_view,
                    pid_one=pid_one,
                    net=own_net,
                )
            )
        for fd in fds if net is None else (*fds, net):
            os.close(fd)
        runner = _Runner(report, request)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:  # pragma: no cover (kernels before 5.3)
            _send(report, Failed(f"pidfd_open: {exc}"))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        else:
            _send(report, Forked(pid), [pidfd])
            if pid_one:  # the child is the run's PID 1, and its runner, from birth
                runner.pid1 = pid
                _send(report, Moved(pid), [pidfd])
            os.close(pidfd)
        self.runners[pid] = runner
        self.places.add(os.path.dirname(request.workdir))
        self.places.update(os.path.dirname(os.path.dirname(p)) for p in request.cgroups)

    def _prepare_confined(
        self, request: ForkRequest
    ) -> tuple[_confine.Confinement | None, int | None, bool]:
        """What a confined child of ``request`` takes from the zygote: its walls worked
        out (None: it works them out itself), the shared view to copy (None: it builds its
        own), and whether to fork it PID 1 of its namespace."""
        from . import _confine

        try:  # what every confined child would compute, computed once here
            confinement = _confine.prepare(request.confine)
            _confine.warm(confinement)
            shared = _confine.shared_view(confinement)
        except (ValueError, OSError):
            return None, None, False  # the child will meet the same error, and report it
        if request.mode != "warm":
            return None, None, False  # a cold runner is the reference point: it does it all
        view = None
        if shared is not None:
            if shared not in self.views:
                self.views[shared] = _build_shared_view(shared)
            view = self.views[shared]
        with contextlib.suppress(ValueError, OSError):  # (the child checks it, and says why)
            confinement.check(shared=view is not None)
        return confinement, view, self.pid_namespace is not None

    def _fork_pid_one(self) -> int:
        from . import _namespaces

        assert self.pid_namespace is not None
        return _namespaces.fork_pid_one(self.pid_namespace)

    def _leave(self, report: socket.socket) -> None:
        """In a forked child: let go of what is the zygote's (its sockets, its signals, its
        bookkeeping), before :class:`_Unwind` drops the rest."""
        signal.set_wakeup_fd(-1)
        _c_signal.signal(signal.SIGCHLD, _c_signal.SIG_DFL)
        # Closed here, not when they are freed: by then their numbers may be someone else's.
        # (A close that fails leaves a descriptor the child closes with the others.)
        views = [fd for fd in self.views.values() if fd is not None]
        namespaces = (self.pid_namespace, self.net_namespace, *self.spare_networks)
        for fd in (self.wake_r, self.wake_w, *views, *namespaces):
            if fd is None:
                continue
            with contextlib.suppress(OSError):
                os.close(fd)
        self.views.clear()
        self.pid_namespace = self.net_namespace = None
        self.spare_networks = []
        for sock in (self.control, report, *(r.report for r in self.runners.values())):
            with contextlib.suppress(OSError):
                sock.close()
        self.runners.clear()
        self.places.clear()

    def _reap(self) -> None:
        """Reap every dead child; then report the runners among them.

        Reports go out only after the whole pass, so that when the host reads a runner's
        status, the dead processes that runner left to us are reaped too.
        """
        dead = _reap_all()
        # The children the zygote forked first: a detached one names its PID 1.
        dead.sort(key=lambda d: d.pid not in self.runners)
        reports: list[tuple[_Runner, Exited]] = []
        for one in dead:
            runner = self._run_ended_by(one)
            if runner is not None:
                reports.append((runner, one.exited))
        if reports:
            self._kill_leftovers()
        for runner, exited in reports:
            _send(runner.report, exited)
            runner.report.close()

    def _run_ended_by(self, dead: _Dead) -> _Runner | None:
        """The run whose runner ``dead`` was, taken off the table; None if it was none (an
        orphan, or a confined child that left its PID 1 to us)."""
        forked = self.runners.get(dead.pid)
        if forked is not None and forked.pid1 == dead.pid:  # forked PID 1 (fork_pid_one)
            return self.runners.pop(dead.pid)
        if forked is not None and forked.pid1 is None and not forked.detached:
            return self._forked_ended(dead, forked)
        return self._pid1_ended(dead)

    def _forked_ended(self, dead: _Dead, runner: _Runner) -> _Runner | None:
        """The child the zygote forked for ``runner`` is dead: the run is over, unless it was
        a confined child that left its PID 1 to us (then None: PID 1 is the runner now)."""
        if runner.confined and _left_pid1(dead.exited.status):
            self._detached(dead.pid, runner)
            return None
        return self.runners.pop(dead.pid)

    def _pid1_ended(self, dead: _Dead) -> _Runner | None:
        """The run ``dead`` was PID 1 of, taken off the table; None if it was none."""
        session = dead.session  # a PID 1 is of the session the zygote forked
        if session is None:
            return None
        runner = self.runners.get(session)
        if runner is None or not runner.is_pid1(dead.pid):
            return None
        return self.runners.pop(session)

    def _kill_leftovers(self) -> None:
        """Kill the processes dead runners left to us: they belong to runs that are over.

        (Not a PID 1 on its way to us: it is of a live run's session.)
        """
        known = {*self.runners, *(r.pid1 for r in self.runners.values() if r.pid1)}
        for pid in _children():
            if pid not in known and _session_of(pid) not in self.runners:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _detached(self, forked: int, runner: _Runner) -> None:
        """The child ``forked`` left its PID 1 to us: find it (same session) and report it."""
        runner.detached = True
        for pid in _children():
            if _session_of(pid) == forked:
                runner.pid1 = pid
                try:
                    pidfd = os.pidfd_open(pid)
                except OSError:
                    return  # already dead and reaped: its exit is reported as the runner's
                _send(runner.report, Moved(pid), [pidfd])
                os.close(pidfd)
                return

    def _shutdown(self) -> NoReturn:
        """The host is gone or done: end every run, remove what they made, exit."""
        _kill_everything_below(time.monotonic() + 5.0)
        for runner in self.runners.values():
            shutil.rmtree(runner.workdir, ignore_errors=True)
            for procs in runner.cgroups:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(procs))
        # What the host made for requests it never sent (it died in between).
        for place in self.places:
            for prefix in (WORKDIR_PREFIX, CGROUP_PREFIX):
                for path in glob.glob(os.path.join(glob.escape(place), f"{prefix}{self.host}-*")):
                    if prefix == WORKDIR_PREFIX:
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.rmdir(path)  # empty: nothing ever joined it
        os._exit(0)


class _Job:
    """What a forked child takes out of the zygote: its request and descriptors, and which
    descriptor to say why on if it cannot start. :func:`_become_runner` empties it."""

    __slots__ = ("confinement", "fds", "net", "pid_one", "ready", "request", "view")

    def __init__(
        self,
        request: ForkRequest,
        fds: list[int],
        *,
        confinement: _confine.Confinement | None = None,
        view: int | None,
        pid_one: bool,
        net: int | None = None,
    ) -> None:
        self.request: ForkRequest | None = request
        self.fds = fds
        self.ready = fds[6]  # the ready pipe, until the runner owns it
        #: The shared view to copy (see :meth:`_Zygote._prepare_confined`), and whether the
        #: child was forked PID 1 of its namespace.
        self.view = view
        self.pid_one = pid_one
        #: A network namespace made ahead for this child alone (see :class:`_Zygote`).
        self.net = net
        #: The child's walls, worked out by the zygote from its request (None: the child
        #: works them out itself).
        self.confinement = confinement


class _Unwind(BaseException):
    """Raised in a forked child, caught in :func:`main`: it leaves the zygote's frames.

    A forked child is a copy of the zygote in the middle of its loop: the frames up its
    stack hold the zygote's state (its runners, with other runs' working directories and
    cgroups; the host's pid; the request, with the host's cgroup paths), and a program can
    walk up to them (``sys._getframe().f_back``). Unwinding to the top frees them all before
    the child becomes a runner; what the child needs comes down in the :class:`_Job`. So
    nothing between :meth:`_Zygote._fork` and :func:`main` may catch it, nor clean up on
    its way out (a ``finally`` there would run in every child).
    """

    def __init__(self, job: _Job) -> None:
        super().__init__()
        self.job = job


def _child(job: _Job) -> NoReturn:
    """In the forked child, out of the zygote's frames: become the run's runner (see the
    module docstring)."""
    status: int = RunnerExit.CHILD_SETUP
    try:
        from . import _main

        arguments = _become_runner(job)
        job.ready = -1  # the runner's from here: it says ready, or why not, itself
        status = _main.serve(arguments)
        _main._flush_stdio()
    except BaseException as exc:
        # The host learns why on the ready pipe (the child's own stderr may not be in place
        # yet; the ready pipe is, from the fork on), and the zygote's stderr says it too.
        why = f"the zygote's child could not start: {type(exc).__name__}: {exc}"
        if job.ready >= 0:
            with contextlib.suppress(BaseException):
                os.write(job.ready, b"!" + why.encode("utf-8", "replace"))
        with contextlib.suppress(BaseException):
            os.write(2, f"runner: {why}\n".encode())
    os._exit(status)


def _become_runner(job: _Job) -> _main.Arguments:
    """Join the run's cgroups, put its descriptors in place, take its directory and
    environment; then, ``cold``, execute a fresh runner, or, ``warm``, return what the
    runner is told. Nothing of the request outlives this call.
    """
    request, fds = job.request, job.fds
    assert request is not None
    job.request, job.fds = None, []
    _join_cgroups(request.cgroups)
    os.setsid()
    _place_descriptors(job, fds)
    os.chdir(request.workdir)
    arguments = ["3", "4", "5", "6", *_runner_options(request)]  # the channels, then options
    if request.mode == "cold":
        os.execve(request.argv[0], [*request.argv, *arguments], request.env)
    return _warm_runner(request, arguments, job)


def _join_cgroups(procs_files: Sequence[str]) -> None:
    """Join the run's cgroups (their ``cgroup.procs`` files): this process, just forked.

    Moving a process takes a lock of the whole system whose first taking after a quiet
    moment waits for an RCU grace period; a thread that moves only itself does not take
    it. So a process with a single thread (a child of the single-threaded zygote) joins a
    cgroup v1 by writing ``0`` to its ``tasks`` file: itself, which is all of it. Measured
    here, a child forked 20 ms after the last joined its five cgroups in 10.8 ms (p50)
    through ``cgroup.procs``, in 2.4 ms through ``tasks``. A v2 cgroup has no ``tasks``
    file: there, and for a process with more than one thread, the pid goes to
    ``cgroup.procs``.

    Raises:
        OSError: a cgroup could not be joined.
    """
    alone = len(os.listdir("/proc/self/task")) == 1
    for procs in procs_files:
        if alone:
            try:
                fd = os.open(os.path.join(os.path.dirname(procs), "tasks"), os.O_WRONLY)
            except FileNotFoundError:
                pass  # cgroup v2
            else:
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
                continue
        with open(procs, "w") as f:
            f.write(str(os.getpid()))


def _place_descriptors(job: _Job, fds: list[int]) -> None:
    """Make the run's pipes this process's stdio (0-2), channels (3-6) and ready pipe (7),
    with ``/dev/null`` as stdin, then the shared view (if any) 8 and the network namespace
    made ahead (if any) the next; close every other descriptor."""
    start_r, start_w, call_r, call_w, out_w, err_w, ready_w = fds
    null = os.open("/dev/null", os.O_RDWR)
    # Out of the way of 0-7 first, then into place.
    high = [_dup_high(fd) for fd in (null, out_w, err_w, start_r, start_w, call_r, call_w)]
    job.ready = ready_high = _dup_high(ready_w)
    for fd in (*fds, null):
        os.close(fd)
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.dup2(ready_high, 7)
    job.ready = 7
    after = _VIEW_FD
    if job.view is not None:  # a shared view's mount namespace, for the runner to copy
        os.dup2(job.view, after, inheritable=False)
        job.view, after = after, after + 1
    if job.net is not None:  # the run's network namespace, for the runner to join
        os.dup2(job.net, after, inheritable=False)
        job.net, after = after, after + 1
    os.closerange(after, os.sysconf("SC_OPEN_MAX"))


def _runner_options(request: ForkRequest) -> list[str]:
    """The runner's options for ``request``: a cold runner's command line, a warm one's argv."""
    timeout = str(request.start_timeout or "inf")
    options = ["--ready", "7", "--supervised", "--start-timeout", timeout]
    if request.confine:
        options += ["--confine", request.confine]
    if not request.linger:
        options.append("--no-linger")
    return options


def _warm_runner(request: ForkRequest, arguments: list[str], job: _Job) -> _main.Arguments:
    """Become the runner in this process: the command line it would have had
    (``arguments``), and what :func:`runner._main.serve` is told (with what the zygote
    prepared for its walls: ``job``'s view and PID 1). The run's environment is the
    process's already: the zygote set it before the fork (:func:`_set_environ`)."""
    from . import _main

    sys.argv = ["-c", *arguments]
    _main._tie_to_parent(death_signal=False)
    confinement, job.confinement = job.confinement, None  # the runner's alone: see serve
    return _main.Arguments(
        (3, 4),
        (5, 6),
        confine=request.confine,
        confinement=confinement,
        ready_fd=7,
        start_timeout=request.start_timeout or None,
        supervised=True,
        linger=request.linger,
        view=job.view,
        pid_one=job.pid_one,
        net=job.net,
        warm_up=request.warm_up,
        warm_calls=request.warm_calls,
        warm_await=request.warm_await,
    )


def _set_environ(env: dict[str, str]) -> None:
    """Make ``os.environ`` (and the process's environment) ``env``, changing only what
    differs from what it is.

    The zygote sets each warm child's environment on itself, right before the fork, and
    the child inherits it whole: nothing of the zygote uses its environment (each request
    sets all of it again, and a cold child executes with the request's own). Set in the
    child instead, it took 0.08-0.3 ms of a fresh child's CPU here (``os.environ``'s code
    and objects, first written in the child), 0.003 ms once the zygote had."""
    environ = os.environ
    for name in [name for name in environ if name not in env]:
        del environ[name]
    for name, value in env.items():
        if environ.get(name) != value:
            environ[name] = value


def _build_shared_view(shared: _confine.SharedView) -> int | None:
    """A descriptor of a new mount namespace holding the view runs of ``shared`` share
    (:func:`runner._namespaces.build_shared_view`), built by a helper process that exits
    once the zygote holds it; None (said on stderr) if it could not be built.

    The zygote itself never changes namespace: it only holds the descriptor, which keeps the
    namespace (and its mounts) alive after the helper has gone.
    """
    done_r, done_w = os.pipe2(os.O_CLOEXEC)  # the helper says "ok", or why not
    held_r, held_w = os.pipe2(os.O_CLOEXEC)  # EOF: the zygote holds the namespace
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (done_r, done_w, held_r, held_w):
            os.close(fd)
        sys.stderr.write(f"runner: no shared view (fork: {exc})\n")
        return None
    if pid == 0:  # pragma: no cover (the helper's lines run in another process)
        status = 1
        try:
            os.close(done_r)
            os.close(held_w)
            from . import _namespaces

            try:
                _namespaces.build_shared_view(*shared)
                os.write(done_w, b"ok")
                os.read(held_r, 1)
                status = 0
            except (ValueError, OSError) as exc:
                os.write(done_w, str(exc).encode("utf-8", "replace"))
        finally:
            os._exit(status)
    os.close(done_w)
    os.close(held_r)
    view = None
    try:
        if not select.select([done_r], [], [], _SHARED_VIEW_TIMEOUT)[0]:
            os.kill(pid, signal.SIGKILL)
        answer = os.read(done_r, 4096)
        if answer == b"ok":
            view = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        else:
            sys.stderr.write(f"runner: no shared view ({answer.decode('utf-8', 'replace')})\n")
    except OSError as exc:
        sys.stderr.write(f"runner: no shared view ({exc})\n")
    finally:
        os.close(done_r)
        os.close(held_w)
        os.waitpid(pid, 0)
    return view


def _dup_high(fd: int) -> int:
    """A close-on-exec copy of ``fd`` at 64 or above, out of the way of 0-7."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64)


def _keeper(control: socket.socket, host: int) -> NoReturn:
    """The process the host started: fork the zygote, then reap until there is no one."""
    _prctl_subreaper()
    host_fd = os.pidfd_open(host)
    if os.getppid() != host:
        os._exit(3)
    zygote = os.fork()
    if zygote == 0:
        os.close(host_fd)
        _prepare()
        _prctl_subreaper()
        _Zygote(control, host).serve()
    control.close()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    host_gone_at: float | None = None
    while True:
        try:
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
        except ChildProcessError:
            os._exit(0)  # the zygote and everything under it are gone
        timeout = None
        if host_gone_at is None:
            readable, _, _ = select.select([host_fd, wake_r], [], [])
            if host_fd in readable:
                host_gone_at = time.monotonic()
        else:
            timeout = host_gone_at + _KEEPER_GRACE - time.monotonic()
            if timeout <= 0:
                _kill_everything_below(time.monotonic() + 5.0)
                os._exit(0)
            select.select([wake_r], [], [], timeout)
        with contextlib.suppress(BlockingIOError):
            os.read(wake_r, 4096)


def _prepare() -> None:
    """Import what every runner needs, once, so that no child pays for it.

    That includes :mod:`asyncio`, which only a program that awaits uses: imported here it
    costs each child shared pages, imported in the child it costs a program that awaits
    tens of milliseconds (a cold runner, the reference point, still pays that).
    """
    import asyncio  # noqa: F401
    import ctypes  # noqa: F401
    import fcntl  # noqa: F401

    from . import _confine, _main, _relocate  # noqa: F401
    from ._backends import DEFAULT_BACKEND, get_backend

    backend = get_backend(DEFAULT_BACKEND)
    with contextlib.suppress(OSError, AttributeError):
        from . import _libc, _namespaces

        _libc.libc()
        _namespaces._libc()
    with contextlib.suppress(OSError, ValueError):
        from . import _seccomp

        _seccomp.build_process_filter(os.uname().machine)  # the process level's, built once
    # Once everything is imported: the runner's code and modules name the confined view's
    # paths, in every child (runner._relocate); then the warm-ups (of a program that awaits
    # too), whose first run's writes land in the zygote's own pages.
    _relocate.relocate()
    _main.prepare_stdio()
    _main.warm_up(backend, calls=True, awaits=True)
    _main.keep_prepared(DEFAULT_BACKEND, backend)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """``python -I -S -c '... main()' CONTROL_FD``: be the keeper (see the docstring).

    The keeper and the zygote never return from :func:`_start`; a child the zygote forks
    does, with nothing but its :class:`_Job`, and becomes a runner from here.
    """
    _child(_start(sys.argv[1:] if argv is None else list(argv)))


def _start(args: list[str]) -> _Job:
    """Be the keeper, and the zygote it forks; return only in a forked child."""
    try:
        fd = int(args[0])
        control = socket.socket(fileno=fd)
    except (IndexError, ValueError, OSError) as exc:
        sys.stderr.write(f"runner: usage: zygote CONTROL_FD ({exc})\n")
        os._exit(64)
    if control.type != socket.SOCK_SEQPACKET:
        sys.stderr.write("runner: the zygote's control channel must be a SOCK_SEQPACKET\n")
        os._exit(64)
    os.set_inheritable(fd, False)
    # A core dump of a killed program would be host disk nobody asked for: no process of
    # any run dumps one (every child inherits this, across exec too, and a confined
    # program cannot raise it again).
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        _keeper(control, os.getppid())
    except _Unwind as unwind:
        job = unwind.job
    except OSError as exc:
        if exc.errno != errno.EINTR:
            sys.stderr.write(f"runner: the zygote could not start: {exc}\n")
        os._exit(RunnerExit.CHILD_SETUP)
    return job
