"""The wire: a small, language-neutral protocol for a sandboxed program to call host tools.

Frames are a 4-byte big-endian length and that many bytes of UTF-8 JSON. Two channels, two
connections: the *start channel* carries one :class:`Start` (parent -> child) and one
:class:`Result` (child -> parent); the *call channel* carries the program's
:class:`Request` frames and the parent's :class:`Response` frames, matched by id.

Layers:

* the sans-I/O core (frames, messages, kinds, errors, and the role cores
  :class:`ServerCore`, :class:`ClientCore`, :class:`StarterCore`, :class:`RunnerCore`),
  which never touches a descriptor or a clock;
* the child's roles :class:`Client` and :class:`Runner`, standard library only;
* the parent's roles :class:`Server` and :class:`Starter` (and :class:`FdChannel`), on
  anyio. They are loaded on first use, so a child that imports ``protocol`` never loads
  anyio.

Beside it, the second wire: how the host asks its zygote for a run's child and hears what
became of it (:class:`ForkRequest`, the :data:`Report` messages, :class:`ConfineRequest`;
:mod:`protocol._fork`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._calls import CallLimits, CallStats, ClientCore, ServerCore, effective_deadline
from ._child import Client, Runner
from ._constants import DEFAULT_MAX_INFLIGHT, INT64_MAX, MAX_FRAME_BYTES, MAX_NESTING, VERSION
from ._errors import (
    CallError,
    ChannelClosed,
    FrameTooLarge,
    LocalFrameTooLarge,
    LocalProtocolError,
    ProtocolError,
    RemoteFrameTooLarge,
    RemoteProtocolError,
    TruncatedFrame,
    VersionMismatch,
)
from ._fork import (
    CGROUP_PREFIX,
    CONFINE_DECODER,
    FD_NAMES,
    FORK_REQUEST_DECODER,
    MAX_FORK_MESSAGE,
    REPORT_DECODER,
    WORKDIR_PREFIX,
    ConfineRequest,
    Exited,
    Failed,
    Forked,
    ForkRequest,
    Moved,
    Report,
    RunnerExit,
    decode_fork,
)
from ._frames import FrameDecoder, Signal, encode_frame
from ._kinds import Kind
from ._messages import (
    Message,
    Request,
    Response,
    Result,
    Start,
    StartBinding,
    StartBudget,
    frame_message,
)
from ._start import RunnerCore, StarterCore

if TYPE_CHECKING:
    from ._channel import FdChannel
    from ._server import Handler, Pumped, Server
    from ._starter import Starter

__all__ = [
    "DEFAULT_MAX_INFLIGHT",
    "INT64_MAX",
    "MAX_FRAME_BYTES",
    "MAX_NESTING",
    "VERSION",
    # the host-zygote wire (protocol._fork)
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
    # the call protocol
    "CallError",
    "CallLimits",
    "CallStats",
    "ChannelClosed",
    "Client",
    "ClientCore",
    "FdChannel",
    "FrameDecoder",
    "FrameTooLarge",
    "Handler",
    "Kind",
    "LocalFrameTooLarge",
    "LocalProtocolError",
    "Message",
    "ProtocolError",
    "Pumped",
    "RemoteFrameTooLarge",
    "RemoteProtocolError",
    "Request",
    "Response",
    "Result",
    "Runner",
    "RunnerCore",
    "Server",
    "ServerCore",
    "Signal",
    "Start",
    "StartBinding",
    "StartBudget",
    "Starter",
    "StarterCore",
    "TruncatedFrame",
    "VersionMismatch",
    "effective_deadline",
    "encode_frame",
    "frame_message",
]

# Exceptions say they are protocol's, as users import them: tracebacks read
# ``protocol.CallError``, not ``protocol._errors.CallError``. (Only exceptions: msgspec
# resolves a Struct's annotations in the module the Struct names.)
for _name in __all__:
    _obj = globals().get(_name)
    if isinstance(_obj, type) and issubclass(_obj, Exception):
        _obj.__module__ = __name__
del _name, _obj

# The parent's roles import anyio; load them only when asked for (PEP 562).
_LAZY = {
    "FdChannel": "._channel",
    "Handler": "._server",
    "Pumped": "._server",
    "Server": "._server",
    "Starter": "._starter",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
