"""The second wire: between the host and its zygote, and what the host asks of a runner.

The host does not start a run's child itself. It asks a warm template process, the
*zygote* (``runner``'s), to fork one, and the zygote reports what became of it. These are
the messages of that conversation, with the conventions both sides rely on; like the four
frames of the call protocol, they live here so that a reader, a fuzzer or a zygote written
in another language finds them in one place.

Transport
---------
Not the length-prefixed frames of the start and call channels: a ``SOCK_SEQPACKET`` unix
socket pair, one JSON document per packet (at most :data:`MAX_FORK_MESSAGE` bytes), so
that descriptors travel beside the message (``SCM_RIGHTS``).

* The *control* socket, host -> zygote: one :class:`ForkRequest` per child, carrying the
  eight descriptors of :data:`FD_NAMES` in that order; the zygote's first packet on it,
  before any request, is its hello, a :class:`Forked` naming its own pid.
* Each run's *report* socket (the last of those descriptors), zygote -> host: the
  :data:`Report` messages of that one child, in order: :class:`Forked` (with a pidfd of
  the child attached), for a confined child :class:`Moved` (with a pidfd of its PID 1),
  and :class:`Exited` once the zygote has reaped the runner; or :class:`Failed` instead,
  when no child could be made. The zygote then closes it.

A ``confined`` child's walls are asked for with a :class:`ConfineRequest`, JSON text in
:attr:`ForkRequest.confine` (and the runner's ``--confine`` option).

Invariants
----------
* Every message decodes whole with its typed decoder, or is refused whole: :func:`decode_fork`
  raises only :class:`~protocol.RemoteProtocolError`, whatever the bytes (nesting too
  deep for the decoder included); reports are told apart by their ``type`` tag.
* The names the host gives what it makes for a run start with :data:`WORKDIR_PREFIX`
  (working directories) and :data:`CGROUP_PREFIX` (cgroups), followed by the host's pid and
  a dash: the zygote of a host that died sweeps what that host made, requests it never
  sent included, by these names.
* A runner's exit status says how it ended (:class:`RunnerExit`); the host reads a failed
  confinement from it.
"""

from __future__ import annotations

import enum
from typing import Annotated, Final, TypeVar

import msgspec

from ._errors import RemoteProtocolError

__all__ = [
    "CGROUP_PREFIX",
    "CONFINE_DECODER",
    "FD_NAMES",
    "FORK_REQUEST_DECODER",
    "MAX_FORK_MESSAGE",
    "REPORT_DECODER",
    "WORKDIR_PREFIX",
    "ConfineRequest",
    "Exited",
    "Failed",
    "ForkRequest",
    "Forked",
    "Moved",
    "Report",
    "RunnerExit",
    "decode_fork",
]

#: Prefix of a run's working directory (``<tmp>/sandbox-run-<host pid>-...``).
WORKDIR_PREFIX: Final = "sandbox-run-"
#: Prefix of a run's cgroups (``run-<host pid>-...``).
CGROUP_PREFIX: Final = "run-"
#: The descriptors a :class:`ForkRequest` carries, in this order: the start channel's and
#: the call channel's child ends (read, write), the ends of the run's stdout and stderr,
#: the ``ready`` pipe's write end, and the run's report socket.
FD_NAMES: Final = ("start_r", "start_w", "call_r", "call_w", "out_w", "err_w", "ready_w", "report")
#: The largest packet either side sends or reads on these sockets.
MAX_FORK_MESSAGE: Final = 1 << 16

_Pid = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
_Id = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 2)]
_Size = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]


class RunnerExit(enum.IntEnum):
    """A runner's exit status, as the host reads it."""

    #: the run went to its end and its Result was sent
    OK = 0
    #: no usable Start arrived (timeout, closed channel, bad frame)
    NO_START = 2
    #: the runner's parent was gone before it started
    ORPHANED = 3
    #: the confined level's walls could not be put up; the program never ran
    NOT_CONFINED = 4
    #: a bad command line
    USAGE = 64
    #: a child the zygote forked could not become a runner (it says why on its ready pipe)
    CHILD_SETUP = 70
    #: a confined child left its PID 1 to the zygote (the zygote reports it as Moved)
    DETACHED = 81


class ConfineRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``confined`` level's walls, as the host asks a runner for them.

    Attributes:
        workdir: the run's working directory (a directory of the run's own file system, at
            this path inside).
        import_paths: more host paths the view holds read-only, at their host paths (the
            interpreter's files; the runner binds its own packages itself, under
            ``/sandbox/lib``: see ``runner._relocate``).
        hostname: the host name inside.
        host_uid: a root host: the unprivileged host uid the program runs as, the run's own.
            An unprivileged host: none (the program is the host's own uid).
        host_gid: the same, for the group id.
        disk_bytes: the size of the run's file system (working directory and ``/tmp``);
            ``None``: no bound but the run's memory. Always given: the host decides.
        disk_files: the files and directories it holds (``None``: the runner's default for
            ``disk_bytes``).
    """

    workdir: str
    disk_bytes: _Size | None
    import_paths: tuple[str, ...] = ()
    hostname: str = "sandbox"
    host_uid: _Id | None = None
    host_gid: _Id | None = None
    disk_files: _Size | None = None


class ForkRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One run's child, as the host asks the zygote for it.

    Attributes:
        mode: ``warm`` (fork and carry on as the runner) or ``cold`` (fork and execute a
            fresh interpreter).
        workdir: the run's private working directory (its ``cwd``, and ``HOME``).
        env: the run's whole environment.
        cgroups: the ``cgroup.procs`` files the child joins first.
        confine: the confined level's :class:`ConfineRequest` (JSON text), or empty for the
            process level.
        start_timeout: seconds the runner waits for its Start; 0 for no limit.
        linger: the runner waits after its Result until the host closes the start
            channel (without cgroups, the host finds the run's processes in its tree).
        argv: ``cold`` only: the interpreter and its options; the descriptors and runner
            options are appended.
        warm_up: ``warm`` only: the runner takes a small program from source to value
            before it says ready (the pages that first run writes are then copied while it
            waits: worth it for a child forked ahead of its run, such as a pool's, not for
            one whose run is waiting for it).
        warm_calls: ``warm`` and ``warm_up`` only: the runner warms up for a program that
            calls tools too (a first call: time and memory a program with no tools does
            not repay).
        warm_await: the same, for a program that awaits (an event loop's first run).
    """

    mode: Annotated[str, msgspec.Meta(pattern="^(warm|cold)$")]
    workdir: str
    env: dict[str, str]
    cgroups: tuple[str, ...] = ()
    confine: str = ""
    start_timeout: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    linger: bool = True
    argv: tuple[str, ...] = ()
    warm_up: bool = True
    warm_calls: bool = False
    warm_await: bool = False


class Forked(msgspec.Struct, frozen=True, tag="forked", forbid_unknown_fields=True):
    """The child was forked (a pidfd of it attached); also the zygote's hello (its pid)."""

    pid: _Pid


class Moved(msgspec.Struct, frozen=True, tag="moved", forbid_unknown_fields=True):
    """A confined runner's PID 1 is now the zygote's child, and the run's runner (a pidfd
    of it attached). Its pid is the :class:`Forked` one's when the zygote forked the child
    PID 1 of its namespace at birth."""

    pid: _Pid


class Exited(msgspec.Struct, frozen=True, tag="exited", forbid_unknown_fields=True):
    """The zygote reaped the runner: its wait status and resource usage (seconds, bytes)."""

    status: Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)]
    utime: Annotated[float, msgspec.Meta(ge=0)]
    stime: Annotated[float, msgspec.Meta(ge=0)]
    maxrss: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class Failed(msgspec.Struct, frozen=True, tag="failed", forbid_unknown_fields=True):
    """No child could be made for the request, and why."""

    error: str


#: What the zygote reports on a run's report socket.
Report = Forked | Moved | Exited | Failed

FORK_REQUEST_DECODER: Final = msgspec.json.Decoder(ForkRequest)
REPORT_DECODER: Final = msgspec.json.Decoder(Report)
CONFINE_DECODER: Final = msgspec.json.Decoder(ConfineRequest)

T = TypeVar("T")


def decode_fork(decoder: msgspec.json.Decoder[T], data: bytes | bytearray | memoryview | str) -> T:
    """One message of this wire, with its typed decoder.

    Raises:
        RemoteProtocolError: it is not a message of that type (whatever the bytes).
    """
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise RemoteProtocolError(f"malformed message: {exc}") from None
