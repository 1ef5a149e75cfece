"""The execution plane's vocabulary: what a tool is, what a call would touch, what it returned.

Everything here is plain data (msgspec structs), the same in process and on the wire, so
that a session reads a remote executor's tools and claims exactly as it reads its own.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, final, runtime_checkable

import msgspec

from protocol import Kind

__all__ = [
    "Annotations",
    "Call",
    "CallContext",
    "Descriptor",
    "Facts",
    "Invoke",
    "Replay",
    "Result",
    "Tool",
    "ToolInfo",
    "Factual",
    "Replayable",
    "NeedsPeers",
    "Closeable",
    "ZERO_FACTS",
]

_CANONICAL = msgspec.json.Encoder(order="sorted")


@final
class Annotations(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Hints about a tool's behaviour, as MCP's tool annotations have them.

    They are hints from whoever wrote the tool, for people and for the policy's defaults;
    what a call *would* touch is the facts claim, read per call.

    Attributes:
        title: a human-readable name.
        read_only: the tool changes nothing.
        destructive: the tool may destroy or overwrite (meaningful when not read-only).
        idempotent: calling it again with the same arguments has no further effect.
        open_world: the tool reaches outside the executor (network, other systems).
    """

    title: str | None = None
    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True


@final
class Facts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What one call would touch: what a policy decides on, read before the call runs.

    The zero value claims nothing, which is what a tool that makes no claim reads as: a
    policy must not take it for "touches nothing" (see :attr:`ToolInfo.factual`).

    Attributes:
        reads: paths the call would read (``"/"`` for the whole file system).
        writes: paths the call would create, change or delete.
        network: hosts the call would reach (``"*"`` for any).
        processes: whether the call starts processes.
        tools: the host tools the call may call in its turn (a program's bindings).
        level: the isolation level the call's code runs at, for a tool that runs code.
    """

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    network: tuple[str, ...] = ()
    processes: bool = False
    tools: tuple[str, ...] = ()
    level: str | None = None


ZERO_FACTS = Facts()


class Replay(enum.StrEnum):
    """Whether a call may safely run again (after a lost connection, on resume)."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


@final
class Call(msgspec.Struct, frozen=True, kw_only=True):
    """One call of the tool named ``tool``.

    Attributes:
        tool: the tool's name.
        arguments: the call's input, a JSON object.
        id: the caller's id for the call (a model's tool-call id), if it has one.
    """

    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str = ""

    def key(self) -> bytes:
        """The call's identity for pinning: its tool, its id and its canonical arguments."""
        return _CANONICAL.encode((self.tool, self.id, self.arguments))


@final
class Result(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a call returned.

    Attributes:
        text: the result as text (what a model reads).
        data: the result as a JSON value, when the tool gives one (MCP's structured content).
        is_error: the tool ran and failed; ``text`` says why.
        kind: for an error, why (:class:`~protocol.Kind`), when it is known.
    """

    text: str = ""
    data: Any = None
    is_error: bool = False
    kind: Kind | None = None


@final
class Descriptor(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The workspace an executor's tools act in, as a session records it.

    Attributes:
        kind: what the workspace is: ``"host"`` (this machine's files as they are),
            ``"sandbox"``, or whatever the one who serves the executor names it.
        ref: which one: a host name, a container, a sandbox's name.
        root: the directory the tools' relative paths start from.
    """

    kind: str = "host"
    ref: str = ""
    root: str = ""


@final
class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One tool as a session sees it: what the model is offered and what the policy reads.

    Attributes:
        name: the tool's name, unique in its executor.
        description: what it does, for the model.
        input_schema: the JSON schema of its input (a JSON object).
        annotations: its behaviour hints.
        factual: whether it makes the facts claim; one that does not reads as the zero
            :class:`Facts`, which a policy must treat as "unknown", not "nothing".
        replayable: whether it answers whether a call may run again; one that does not
            reads as :attr:`Replay.UNKNOWN`.
    """

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    annotations: Annotations = Annotations()
    factual: bool = False
    replayable: bool = False

    @property
    def read_only(self) -> bool:
        """Whether the tool says it changes nothing."""
        return self.annotations.read_only


#: How a call made from inside another call (a program's ``host.<name>(...)``) is carried
#: out: by the session, through its policy, when there is one.
Invoke = Callable[[Call], Awaitable[Result]]


@final
class CallContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool's call is given besides its arguments.

    Attributes:
        invoke: how the call's own calls of other tools are made. A session sets it so
            that they go through its policy; None means no session decides them, and the
            executor runs them itself.
    """

    invoke: Invoke | None = None


@runtime_checkable
class Tool(Protocol):
    """A tool an :class:`~sandbox.plane.InProcess` executor runs.

    Optional abilities are further protocols: :class:`Factual`, :class:`Replayable`,
    :class:`NeedsPeers`, :class:`Closeable`.
    """

    @property
    def info(self) -> ToolInfo:
        """The tool's definition and flags (``factual`` and ``replayable`` must match the
        abilities the tool has)."""
        ...

    async def call(self, arguments: dict[str, Any], context: CallContext) -> Result:
        """Run one call. A failure the tool expects is a :class:`Result` with
        ``is_error``; an exception is caught by the executor and becomes one."""
        ...


@runtime_checkable
class Factual(Protocol):
    """A tool that says what a call would touch."""

    async def facts(self, arguments: dict[str, Any]) -> Facts: ...


@runtime_checkable
class Replayable(Protocol):
    """A tool that says whether a call may run again."""

    async def replay(self, arguments: dict[str, Any]) -> Replay: ...


@runtime_checkable
class NeedsPeers(Protocol):
    """A tool that works with the other tools of its executor (the program tool binds
    them as ``host.<name>``); told them once, when the executor is built."""

    def peers(self, tools: Sequence[ToolInfo]) -> None: ...


@runtime_checkable
class Closeable(Protocol):
    """A tool that holds something to release when its executor closes."""

    async def aclose(self) -> None: ...


def facts_from(value: Facts | Mapping[str, Any]) -> Facts:
    """A :class:`Facts` from itself or from a mapping of its fields (checked)."""
    return value if isinstance(value, Facts) else msgspec.convert(value, Facts)
