"""A scripted model (the ModelCaller protocol, in process) and real tools for loop tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

import sandbox
from sandbox import plane
from sandbox.agent import Agent, AgentResult, ContextWindow, PlaneTools, ToolCall
from sandbox.agent.parts import ChatRequest, ChatResponse, StopReason, ToolSpec, Usage

#: The longest a scripted run may take, binding its tools included. The model is a script
#: and the tools answer at once (in a worker thread), so a run that takes this long is
#: stuck: it fails here, at the wait that hung, rather than at the suite's timeout.
RUN_DEADLINE = 30

Entry = ChatResponse | Exception | Callable[[ChatRequest], "ChatResponse | Exception"]
_ids = itertools.count(1)


class Script:
    """Answers each request with the next entry (a response, an exception to raise, or a
    function of the request); running out of entries fails the test loudly."""

    def __init__(self, *entries: Entry) -> None:
        self.entries = list(entries)
        self.requests: list[ChatRequest] = []

    async def call(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if not self.entries:
            raise AssertionError(f"the script ran out at request {len(self.requests)}")
        entry = self.entries.pop(0)
        if callable(entry) and not isinstance(entry, ChatResponse):
            entry = entry(request)
        if isinstance(entry, Exception):
            raise entry
        return entry


def say(text: str, stop: StopReason = StopReason.STOP) -> ChatResponse:
    return ChatResponse(
        content=text, stop_reason=stop, usage=Usage(input_tokens=10, output_tokens=5)
    )


def act(
    *calls: tuple[str, dict[str, Any] | str],
    text: str = "",
    stop: StopReason = StopReason.TOOL_CALLS,
) -> ChatResponse:
    made = tuple(
        ToolCall(
            id=f"call_{next(_ids)}",
            name=name,
            arguments=args if isinstance(args, str) else msgspec.json.encode(args).decode(),
        )
        for name, args in calls
    )
    return ChatResponse(
        content=text,
        tool_calls=made,
        stop_reason=stop,
        usage=Usage(input_tokens=10, output_tokens=5),
    )


def finish(answer: str = "done") -> ChatResponse:
    return act(("finish", {"answer": answer}))


def last_user(request: ChatRequest) -> str:
    return next(m.content for m in reversed(request.messages) if m.role == "user")


class Tools:
    """Real tools in an InProcess executor, counting their calls."""

    def __init__(self, workdir: Path | None = None, *, checklist: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.workdir = workdir
        tools = self

        def echo(text: str) -> str:
            """Echo the text."""
            tools.calls.append(("echo", {"text": text}))
            return text

        def big(lines: int) -> str:
            """Return many lines."""
            tools.calls.append(("big", {"lines": lines}))
            return "".join(f"line {i} ünïcødé {'x' * (i % 7)}\n" for i in range(lines))

        def write_file(path: str, content: str) -> str:
            """Write a file."""
            tools.calls.append(("write_file", {"path": path}))
            if tools.workdir is None:
                raise OSError("no workdir")
            (tools.workdir / path).write_text(content)
            return f"wrote {len(content)} bytes to {path}"

        def update_checklist(items: list[dict[str, Any]]) -> str:
            """Record the checklist."""
            tools.calls.append(("update_checklist", {"items": items}))
            return "checklist updated"

        def search(query: str) -> str:
            """Search (read-only)."""
            tools.calls.append(("search", {"query": query}))
            return f"results for {query}: " + "r" * (60 + len(query))

        read_only = plane.Annotations(read_only=True)
        offered = [
            sandbox.Tool(echo, annotations=read_only),
            sandbox.Tool(big, annotations=read_only),
            sandbox.Tool(write_file),
            sandbox.Tool(search, annotations=read_only),
        ]
        if checklist:  # its gate is on whenever the tool is offered
            offered.append(sandbox.Tool(update_checklist, annotations=read_only))
        self.executor = plane.InProcess(offered)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [a for n, a in self.calls if n == name]


async def agent_for(
    script: Script,
    tools: Tools,
    max_steps: int = 20,
    *,
    policy: Any = None,
    context: Any = None,
    **options: Any,
) -> tuple[Agent, PlaneTools, Any]:
    with anyio.fail_after(RUN_DEADLINE):
        plane_tools = PlaneTools(await plane.Set.bind(tools.executor, policy=policy))
    window = context or ContextWindow(system="system", task="the task", max_tokens=100_000)
    return Agent(script, plane_tools, max_steps, **options), plane_tools, window


async def run_agent(agent: Agent, tools: Sequence[ToolSpec], window: Any) -> AgentResult:
    """``agent.run``, within :data:`RUN_DEADLINE`."""
    with anyio.fail_after(RUN_DEADLINE):
        return await agent.run(tools, window)


async def run(script: Script, tools: Tools, max_steps: int = 20, **options: Any) -> Any:
    agent, plane_tools, window = await agent_for(script, tools, max_steps, **options)
    return await run_agent(agent, plane_tools.specs(), window)
