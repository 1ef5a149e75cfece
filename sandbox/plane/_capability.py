"""What an executor served over MCP says that MCP has no field for, and the client's checks.

The server advertises, under the experimental capability :data:`CAPABILITY_KEY`::

    {"version": 1,
     "descriptor": {"kind": "host", "ref": "build-7", "root": "/srv/work"},
     "tools": [{"name": "lookup", "readOnly": true, "facts": true, "replay": false}, ...],
     "ceilings": {"wall_clock": 30.0, "max_calls": 100, ...},
     "level": "confined"}

with ``tools`` in the executor's order (MCP has no order, and a client's SDK may sort the
listing), and each listed tool carries the same flags in its ``_meta`` under the same key.
The client asks for its own limits under the key in its capabilities at initialize::

    {"budget": {"wall_clock": 10.0, "max_calls": 20}, "invoke": true}

and the server caps them at its ceilings. ``invoke`` says the client decides the calls a
program makes of the other tools (the server sends each back to it, :data:`INVOKE_METHOD`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar, final

import msgspec
from msgspec import UNSET

from .._budget import DEFAULTS, Budget
from .._model import Annotations, Descriptor, Facts, Replay, ToolInfo
from .errors import (
    BadCapability,
    FactsMismatch,
    NoCapability,
    ToolMismatch,
    ToolNamedTwice,
    UnknownVersion,
)

__all__ = [
    "CAPABILITY_KEY",
    "CAPABILITY_VERSION",
    "FACTS_METHOD",
    "INVOKE_METHOD",
    "REPLAY_METHOD",
    "Asked",
    "Capability",
    "ListedTool",
    "ToolFlags",
    "cap_budget",
    "check_server",
]

CAPABILITY_KEY: Final = "io.github.sandbox-runtime/executor"
CAPABILITY_VERSION: Final = 1
#: Custom request methods (client -> server): read facts of a batch, read replay of a call.
FACTS_METHOD: Final = f"{CAPABILITY_KEY}/facts"
REPLAY_METHOD: Final = f"{CAPABILITY_KEY}/replay"
#: Server -> client, while a program call is in flight: a host call the program made.
INVOKE_METHOD: Final = f"{CAPABILITY_KEY}/invoke"


@final
class ToolFlags(msgspec.Struct, frozen=True, rename="camel"):
    """One tool's flags, as the capability and the listing's ``_meta`` carry them."""

    name: str
    read_only: bool = False
    facts: bool = False
    replay: bool = False


@final
class Capability(msgspec.Struct, frozen=True):
    """The server's capability value (version 1)."""

    version: int
    descriptor: Descriptor
    tools: tuple[ToolFlags, ...]
    ceilings: Budget = Budget()
    level: str | None = None


@final
class Asked(msgspec.Struct, frozen=True):
    """What a client asks for under the key at initialize."""

    budget: Budget | None = None
    invoke: bool = False


@final
class ListedTool(msgspec.Struct, frozen=True):
    """A tool as MCP's listing gives it, taken off whatever the SDK's type is."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    annotations: Annotations = Annotations()
    meta: dict[str, Any] = msgspec.field(default_factory=dict)


#: What :func:`_by_name` indexes: the capability's tools, or the listing's.
_Named = TypeVar("_Named", ToolFlags, ListedTool)


def flags_of(info: ToolInfo) -> ToolFlags:
    return ToolFlags(
        name=info.name, read_only=info.read_only, facts=info.factual, replay=info.replayable
    )


def cap_budget(asked: Budget | None, ceilings: Budget) -> Budget:
    """A session's budget: each item as asked, capped at the ceiling.

    Each item of either is a value, ``None`` (no limit) or unset (its default, where the
    level applies it). An item asked for nothing, or asked to be lifted, is the ceiling; an
    item with no ceiling is as asked; a ceiling left at its default caps the ask at that
    default.
    """
    if asked is None:
        return ceilings

    def least(f: str, a: Any, c: Any) -> Any:
        if c is None:  # no ceiling on this item: the session's ask stands
            return a
        if a is None or a is UNSET:  # nothing asked, or more than any ceiling
            return c
        return min(a, DEFAULTS[f] if c is UNSET else c)

    return Budget(
        **{f: least(f, getattr(asked, f), getattr(ceilings, f)) for f in Budget.__struct_fields__}
    )


def check_server(raw: Any, listing: Sequence[ListedTool]) -> tuple[Capability, list[ToolInfo]]:
    """Check a server's capability against its listing; its tools, in the executor's order.

    The checks, in order: the capability is there and decodes, at a version this client
    reads (:func:`_decode`); the capability names each tool once and the listing lists
    each once (:func:`_by_name`), the same tools (:func:`_check_same_tools`); and each
    tool's flags agree across the capability, its listing's ``_meta`` and its annotations
    (:func:`_checked_tool`).

    Raises:
        NoCapability, UnknownVersion, BadCapability, ToolMismatch, ToolNamedTwice,
        FactsMismatch: the server is not an executor this client can trust, and why.
    """
    cap = _decode(raw)
    named = _by_name(cap.tools, "the capability names tool {!r} twice")
    listed = _by_name(listing, "the server lists tool {!r} twice")
    _check_same_tools(named, listed)
    return cap, [_checked_tool(flags, listed[flags.name]) for flags in cap.tools]


def _decode(raw: Any) -> Capability:
    """The capability's value, at the version this client reads."""
    if raw is None:
        raise NoCapability(f"the server does not advertise {CAPABILITY_KEY}: not an executor")
    if not isinstance(raw, Mapping):
        raise BadCapability(f"{CAPABILITY_KEY} is not an object: {raw!r:.200}")
    version = raw.get("version")
    if version != CAPABILITY_VERSION or isinstance(version, bool):
        raise UnknownVersion(
            f"{CAPABILITY_KEY} version {version!r}; this client reads {CAPABILITY_VERSION}"
        )
    try:
        return msgspec.convert(raw, Capability)
    except (msgspec.ValidationError, ValueError) as exc:
        raise BadCapability(f"{CAPABILITY_KEY} does not decode: {exc}") from None


def _by_name(items: Iterable[_Named], twice: str) -> dict[str, _Named]:
    """``items`` by name, in their order; a name given twice is refused with ``twice``."""
    out: dict[str, _Named] = {}
    for item in items:
        if item.name in out:
            raise ToolNamedTwice(twice.format(item.name))
        out[item.name] = item
    return out


def _check_same_tools(named: Mapping[str, ToolFlags], listed: Mapping[str, ListedTool]) -> None:
    """The capability names the tools the server lists, no more and no fewer."""
    if unnamed := sorted(set(listed) - set(named)):
        raise ToolMismatch(f"listed but not named by the capability: {', '.join(unnamed)}")
    if unlisted := sorted(set(named) - set(listed)):
        raise ToolMismatch(f"named by the capability but not listed: {', '.join(unlisted)}")


def _checked_tool(flags: ToolFlags, t: ListedTool) -> ToolInfo:
    """The tool ``t`` is, once the flags its listing carries and its annotations agree with
    the capability's ``flags``."""
    said = _listed_flags(t)
    if said is None or said.facts != flags.facts:
        raise FactsMismatch(
            f"{t.name}: the capability says facts={flags.facts}, its listing "
            f"{'says nothing' if said is None else f'facts={said.facts}'}"
        )
    if said.replay != flags.replay or said.read_only != flags.read_only:
        raise FactsMismatch(f"{t.name}: the capability's flags {flags} disagree with {said}")
    if t.annotations.read_only != flags.read_only:
        raise FactsMismatch(
            f"{t.name}: readOnly={flags.read_only} but its annotations say "
            f"readOnlyHint={t.annotations.read_only}"
        )
    return ToolInfo(
        name=t.name,
        description=t.description,
        input_schema=t.input_schema,
        annotations=t.annotations,
        factual=flags.facts,
        replayable=flags.replay,
    )


def _listed_flags(t: ListedTool) -> ToolFlags | None:
    """The flags ``t``'s listing carries in its ``_meta``; None if it carries none."""
    meta = t.meta.get(CAPABILITY_KEY)
    try:
        return msgspec.convert(meta, ToolFlags) if meta is not None else None
    except msgspec.ValidationError as exc:
        raise BadCapability(f"{t.name}: its listing's flags do not decode: {exc}") from None


# -- the custom methods' bodies --


@final
class WireCall(msgspec.Struct, frozen=True):
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


@final
class FactsParams(msgspec.Struct, frozen=True):
    calls: tuple[WireCall, ...]


@final
class FactsReading(msgspec.Struct, frozen=True, omit_defaults=True):
    """One call's reading: its facts, or the error that blocks it."""

    facts: Facts | None = None
    error: str | None = None
    unknown_tool: bool = False


@final
class FactsReply(msgspec.Struct, frozen=True):
    readings: tuple[FactsReading, ...]


@final
class ReplayReply(msgspec.Struct, frozen=True):
    replay: Replay = Replay.UNKNOWN


@final
class InvokeParams(msgspec.Struct, frozen=True):
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
