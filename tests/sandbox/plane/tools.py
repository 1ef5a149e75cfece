"""Tools for the execution-plane tests: claims that count their readings and can fail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from sandbox import plane


class Counted:
    """A factual, replayable tool whose every facts reading is numbered, so a test sees
    which reading a decision used and how many were made."""

    def __init__(self, name: str = "touch", *, fail: bool = False, slow: float = 0.0) -> None:
        self.readings = 0
        self.calls: list[dict[str, Any]] = []
        self.closed = 0
        self.fail = fail
        self.slow = slow
        self._info = plane.ToolInfo(
            name=name,
            description="Touch a path.",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
            factual=True,
            replayable=True,
        )

    @property
    def info(self) -> plane.ToolInfo:
        return self._info

    async def facts(self, arguments: dict[str, Any]) -> plane.Facts:
        self.readings += 1
        if self.slow:
            await anyio.sleep(self.slow)
        if self.fail:
            raise OSError("the claim cannot be read")
        return plane.Facts(writes=(f"{arguments.get('path')}#{self.readings}",))

    async def replay(self, arguments: dict[str, Any]) -> plane.Replay:
        if self.fail:
            raise OSError("no replay either")
        return plane.Replay.NO

    async def call(self, arguments: dict[str, Any], context: plane.CallContext) -> plane.Result:
        self.calls.append(arguments)
        return plane.Result(text=f"touched {arguments.get('path')}")

    async def aclose(self) -> None:
        self.closed += 1


class Batching:
    """An executor over InProcess that reads facts in batches and counts its requests."""

    def __init__(self, inner: plane.InProcess, *, fail: bool = False) -> None:
        self.inner = inner
        self.batches: list[int] = []
        self.single = 0
        self.fail = fail

    async def tools(self) -> Sequence[plane.ToolInfo]:
        return await self.inner.tools()

    async def facts(self, call: plane.Call) -> plane.Facts:
        self.single += 1
        return await self.inner.facts(call)

    async def batch_facts(self, calls: Sequence[plane.Call]) -> list[plane.Facts | Exception]:
        self.batches.append(len(calls))
        if self.fail:
            raise plane.errors.FactsUnavailable("the batch request failed")
        out: list[plane.Facts | Exception] = []
        for c in calls:
            try:
                out.append(await self.inner.facts(c))
            except Exception as exc:
                out.append(exc)
        return out

    async def replay(self, call: plane.Call) -> plane.Replay:
        return await self.inner.replay(call)

    async def call(
        self, call: plane.Call, context: plane.CallContext | None = None
    ) -> plane.Result:
        return await self.inner.call(call, context)

    @property
    def descriptor(self) -> plane.Descriptor:
        return self.inner.descriptor

    async def aclose(self) -> None:
        await self.inner.aclose()
