"""The loop's tools: what runs a call (the execution plane, through a session's Set) and the
loop's own finish tool."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from .. import plane
from ._types import ToolCall, ToolOutcome, ToolSpec

__all__ = ["FINISH", "PlaneTools", "ToolExecutor", "finish_spec"]

FINISH = "finish"


def finish_spec() -> ToolSpec:
    """The finish tool: the only way a run completes."""
    return ToolSpec(
        name=FINISH,
        description="Finish the task: give the final answer. Call it once the task is done; "
        "nothing after it runs.",
        parameters={
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "the final answer"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    )


@runtime_checkable
class ToolExecutor(Protocol):
    """Runs the loop's tool calls and says where each tool's output comes from."""

    def specs(self) -> list[ToolSpec]:
        """The tools offered to the model."""
        ...

    async def execute(self, name: str, arguments: dict[str, Any], call_id: str) -> ToolOutcome:
        """Run one call; a failure is an outcome with ``is_error``, never an exception."""
        ...

    def source(self, name: str) -> str:
        """Where the tool runs: ``"core"`` (this process) or the remote executor's name."""
        ...

    def is_untrusted(self, name: str) -> bool:
        """Whether the tool's output comes from outside (a remote or MCP tool): it is
        wrapped so that nothing in it reads as the host's words."""
        ...

    def is_mutating(self, name: str) -> bool:
        """Whether a successful call changes something (for the mutation gate)."""
        ...

    def batch(self, calls: Sequence[ToolCall]) -> contextlib.AbstractContextManager[Any]:
        """Held while one response's calls are decided (their claims read together)."""
        ...


class PlaneTools:
    """A session's :class:`~sandbox.plane.Set` as the loop's tools: every call is decided by
    the Set's policy (and a program's host calls with it), a response's calls are pinned as
    one batch, and the tools of a remote executor are untrusted.

    Args:
        tools: the session's Set.
        untrusted: whether outputs are untrusted; default: when the executor is remote.
    """

    def __init__(self, tools: plane.Set, *, untrusted: bool | None = None) -> None:
        self.set = tools
        remote_module = sys.modules.get("sandbox.plane._remote")
        is_remote = remote_module is not None and isinstance(tools.executor, remote_module.Remote)
        self._untrusted = is_remote if untrusted is None else untrusted
        self._source = "remote" if is_remote else "core"
        if is_remote:
            name, _ = tools.executor.server  # type: ignore[attr-defined]
            self._source = name or "remote"

    def specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(name=t.name, description=t.description, parameters=t.input_schema)
            for t in self.set.tools
        ]

    async def execute(self, name: str, arguments: dict[str, Any], call_id: str) -> ToolOutcome:
        try:
            r = await self.set.call(plane.Call(tool=name, arguments=arguments, id=call_id))
        except plane.errors.Refused as exc:
            return ToolOutcome(
                text=f"refused by policy: {exc.reason or 'no reason given'}", is_error=True
            )
        except plane.errors.FactsUnavailable as exc:
            return ToolOutcome(
                text=f"blocked: what the call would touch cannot be read: {exc}", is_error=True
            )
        except plane.errors.UnknownTool:
            return ToolOutcome(text=f"no tool named {name!r}", is_error=True)
        except plane.PlaneError as exc:
            return ToolOutcome(text=f"{type(exc).__name__}: {exc}", is_error=True)
        return ToolOutcome(text=r.text, is_error=r.is_error)

    def source(self, name: str) -> str:
        return self._source

    def is_untrusted(self, name: str) -> bool:
        return self._untrusted

    def is_mutating(self, name: str) -> bool:
        info = self.set.by_name(name)
        return info is not None and not info.read_only

    @contextlib.contextmanager
    def batch(self, calls: Sequence[ToolCall]) -> Iterator[Any]:
        with self.set.pin_batch(
            [plane.Call(tool=c.name, arguments=_args(c), id=c.id) for c in calls]
        ):
            yield


def _args(call: ToolCall) -> dict[str, Any]:
    try:
        parsed = msgspec.json.decode(call.arguments or "{}")
    except msgspec.DecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
