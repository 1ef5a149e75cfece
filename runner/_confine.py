"""The ``confined`` level's walls, put up by the runner in its own process.

The host asks for them with ``--confine JSON``. They go up after the Start has arrived (it
is only data) and before the program runs, in this order, each a wall of its own:

1. namespaces and the filesystem view (:mod:`runner._namespaces`): mount, network, IPC,
   UTS, PID and cgroup namespaces (and a user namespace, on an unprivileged host); a
   read-only view of the interpreter, the runner's own packages and the system libraries;
   the run's own small file system (not the host's) for its working directory and
   ``/tmp``; a minimal ``/dev``, a ``/proc`` of the run's own processes; every capability
   dropped, ``no_new_privs`` set, and, on a root host, the run's own unprivileged host
   uid and gid. The runner continues as PID 1 of the new PID namespace. A root zygote
   builds the view once and forks each runner PID 1 of its namespace at birth: the runner
   copies that view rather than building its own (:func:`shared_view`). The zygote
   also decodes each child's request and checks its walls against the host before the
   fork (:func:`prepare`, :meth:`Confinement.check`): the child puts them up from that.
   (Forking after the Start is what puts PID 1 in the cgroups and under the rlimits the
   host set up before sending it.)
2. Landlock (:mod:`runner._landlock`): the same view again, enforced by the kernel's own
   access checks (nothing writable can be executed; ``/proc`` can be listed, none of its
   files read), plus no TCP bind or connect, no signals or abstract sockets outside.
3. seccomp (:mod:`runner._seccomp`): an allow list of the system calls a program needs,
   some with their arguments checked; every other call fails.

If any wall cannot be put up, the program does not run: the runner reports the failure.
"""

from __future__ import annotations

import functools
from typing import final

from protocol import CONFINE_DECODER, ConfineRequest, RemoteProtocolError, decode_fork

from . import _landlock, _namespaces, _relocate, _seccomp

__all__ = ["ConfineRequest", "Confinement", "SharedView", "confine", "prepare"]

#: What a shared view holds (:func:`shared_view`): its read-only paths, and its placed
#: ones as ``(host path, path inside)`` pairs.
SharedView = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


def parse(text: str) -> ConfineRequest:
    """Decode ``--confine``'s JSON.

    Raises:
        ValueError: it is not a valid request.
    """
    try:
        return decode_fork(CONFINE_DECODER, text)
    except RemoteProtocolError as exc:
        raise ValueError(f"--confine: {exc}") from None


@functools.cache
def _read_only(import_paths: tuple[str, ...]) -> tuple[str, ...]:
    return _namespaces.python_read_only(import_paths)


@final
class Confinement:
    """A ``--confine`` request decoded, and what its walls are built from worked out
    (:func:`prepare`).

    A template (the zygote) prepares each request before it forks the child, and the
    child puts its walls up from that: decoding the request and working out its walls in
    a freshly forked child took 0.22-0.25 ms of its CPU here (the decoder's and the
    spec's first runs write to pages the child shares with its template), on the path of
    every confined run forked on demand.
    """

    __slots__ = ("plan", "request", "spec")

    def __init__(self, request: ConfineRequest, spec: _namespaces.ConfineSpec) -> None:
        self.request = request
        self.spec = spec
        #: ``spec`` checked against the host (:meth:`check`); None until it is, and then
        #: :func:`confine` checks it.
        self.plan: _namespaces.Plan | None = None

    def check(self, *, shared: bool) -> None:
        """Check the walls against the host now, for a run that copies the shared view
        (``shared``) or builds its own (:func:`runner._namespaces.check`).

        Raises:
            ValueError: they cannot be built here.
            OSError: the host could not be read.
        """
        self.plan = _namespaces.check(self.spec, shared=shared)


def prepare(text: str) -> Confinement:
    """Decode ``--confine``'s JSON and work out its walls.

    Raises:
        ValueError: it is not a valid request.
        OSError: a path the view must hold cannot be read.
    """
    request = parse(text)
    return Confinement(request, _spec(request))


def warm(confinement: Confinement) -> None:
    """Compute, in a template process, what every confined child it forks would compute."""
    spec = confinement.spec
    _seccomp.build_filter(_seccomp._host_arch())
    if _namespaces.shares_view(spec):
        _namespaces.warm_shared_view(spec.read_only, spec.placed)


def shared_view(confinement: Confinement) -> SharedView | None:
    """What the view that runs of ``confinement`` can share holds (what
    :func:`runner._namespaces.build_shared_view` is given), or None if they cannot."""
    spec = confinement.spec
    return (spec.read_only, spec.placed) if _namespaces.shares_view(spec) else None


def _spec(request: ConfineRequest) -> _namespaces.ConfineSpec:
    return _namespaces.ConfineSpec(
        read_only=_read_only(request.import_paths),
        placed=_relocate.placed(),
        workdir=request.workdir,
        hostname=request.hostname,
        host_uid=request.host_uid,
        host_gid=request.host_gid,
        disk_bytes=request.disk_bytes,
        disk_files=request.disk_files,
    )


def confine(
    confinement: Confinement,
    *,
    detach: bool = False,
    view: int | None = None,
    pid_one: bool = False,
    net: int | None = None,
) -> None:
    """Put up every wall (see the module docstring); returns inside them, as PID 1.

    ``detach``: the calling process leaves PID 1 to its supervisor rather than waiting
    outside for it; ``view``: a shared view's mount namespace to copy (closed here);
    ``pid_one``: the process was forked PID 1 already; ``net``: a network namespace made
    for this run (closed here; see :func:`runner._namespaces.enter`).

    Raises:
        ValueError, OSError: a wall could not be put up; the program must not run.
    """
    request, spec = confinement.request, confinement.spec
    _namespaces.enter(
        spec, detach=detach, view=view, pid_one=pid_one, net=net, plan=confinement.plan
    )
    read_only = (*spec.read_only, *(inside for _, inside in spec.placed))
    _landlock.restrict(
        read_only=read_only,
        read_write=(request.workdir, "/tmp", "/dev"),
        # The run's processes and descriptors, and not one file: /proc/<pid>/mountinfo
        # would show the host's devices and the host paths behind the view.
        list_only=("/proc",),
    )
    _seccomp.install()
    _relocate.enter_view()
    _namespaces.forget_shared_views()  # they name the runner's packages' host paths
