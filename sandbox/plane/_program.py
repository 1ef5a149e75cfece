"""The sandbox as a tool: a call runs a program in a sandbox whose host tools are the
executor's other tools, each call of which the session decides as it decides a direct one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import msgspec

from protocol import CallError, Kind

from .._budget import Budget, given
from .._children import Pool, Spawn
from .._engine import Level, run, with_defaults
from .._engine import Tool as HostTool
from .._model import (
    Annotations,
    Call,
    CallContext,
    Facts,
    Invoke,
    Replay,
    Result,
    ToolInfo,
)
from .._text import size

__all__ = ["ProgramTool", "signature_of"]

_ENCODER = msgspec.json.Encoder()

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "Python source. Its value is its last expression; top-level "
            "await is allowed; host tools are awaitable as host.<name>(...).",
        },
        "args": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The program's command-line arguments, its sys.argv[1:] "
            "(sys.argv[0] is '<program>'). None by default.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


def signature_of(info: ToolInfo) -> str:
    """How a program calls the tool: ``name(a, b=...)`` from its input schema."""
    props = info.input_schema.get("properties") or {}
    required = set(info.input_schema.get("required") or ())
    names = [n for n in props if n in required] + [f"{n}=..." for n in props if n not in required]
    return f"{info.name}({', '.join(names)})"


@final
class ProgramTool:
    """Runs Python in a sandbox. The level, budget and spawn mode are the host's, fixed when
    the tool is made: a caller gives only the code, and the program's command-line
    arguments if it wants (``args``: its ``sys.argv[1:]``; not at ``in_process``, where
    the program shares the host's ``sys.argv``).

    The program's ``host.<name>`` bindings are the executor's other tools (those whose
    names are Python identifiers). Each call a program makes of one goes to the session
    that called the program (its policy decides it as a direct call, and refuses it as
    one), counted against the run's budget; without a session, to the executor itself.

    Args:
        level: the isolation level programs run at.
        budget: each run's budget (by default at most 100 host calls, and the defaults).
        spawn: how children are made (see :func:`sandbox.run`).
        name: the tool's name.
    """

    def __init__(
        self,
        *,
        level: Level | str = Level.CONFINED,
        budget: Budget | None = None,
        spawn: Spawn | str | Pool | None = None,
        name: str = "run_program",
        guide: str = "",
    ) -> None:
        self.level = Level(level)
        self.budget = budget or Budget(max_calls=100)
        self.spawn = spawn
        self._name = name
        self._guide = guide
        self._peers: tuple[ToolInfo, ...] = ()
        self._info = self._make_info()

    def _program(self, arguments: dict[str, Any]) -> tuple[str, list[str] | None]:
        """:func:`_code`, and arguments refused where the program cannot have them.

        Raises:
            ValueError: the arguments are not the tool's, or ``args`` at ``in_process``.
        """
        code, argv = _code(arguments)
        if argv is not None and len(argv) > 1 and self.level is Level.IN_PROCESS:
            raise ValueError(
                "run_program runs at in_process here, where a program has no command-line "
                "arguments of its own: leave out args"
            )
        return code, argv

    def with_budget(self, budget: Budget) -> ProgramTool:
        """The same tool with another budget (a session's, capped at the ceilings)."""
        return ProgramTool(
            level=self.level, budget=budget, spawn=self.spawn, name=self._name, guide=self._guide
        )

    def _make_info(self) -> ToolInfo:
        lines = [
            f"Run a Python program in a sandbox ({self.level.value} level) and return its "
            "value (its last expression), its output and how it ended.",
        ]
        if self._peers:
            lines.append("Host tools it may call (await them, e.g. with asyncio.gather):")
            lines.extend(
                f"- host.{signature_of(p)}: {p.description.split(chr(10))[0]}" for p in self._peers
            )
        b = with_defaults(self.level, self.budget)
        limits = [f"wall clock {b.wall_clock} s"] if b.wall_clock else []
        if b.max_calls is not None:
            limits.append(f"at most {b.max_calls} host calls")
        if (memory := given(b.max_memory)) is not None:
            limits.append(f"{size(memory)} of memory")
        if limits:
            lines.append("Limits: " + ", ".join(limits) + ".")
        if self._guide:
            lines.append(self._guide)
        return ToolInfo(
            name=self._name,
            description="\n".join(lines),
            input_schema=_INPUT_SCHEMA,
            annotations=Annotations(
                title="Run a program", read_only=False, destructive=False, open_world=False
            ),
            factual=True,
            replayable=True,
        )

    @property
    def info(self) -> ToolInfo:
        return self._info

    def peers(self, tools: Sequence[ToolInfo]) -> None:
        self._peers = tuple(t for t in tools if t.name.isidentifier())
        self._info = self._make_info()

    async def facts(self, arguments: dict[str, Any]) -> Facts:
        self._program(arguments)
        tools = tuple(p.name for p in self._peers)
        if self.level is Level.CONFINED:
            return Facts(processes=True, tools=tools, level=self.level.value)
        return Facts(
            reads=("/",),
            writes=("/",),
            network=("*",),
            processes=True,
            tools=tools,
            level=self.level.value,
        )

    async def replay(self, arguments: dict[str, Any]) -> Replay:
        # Confined, a program can change nothing but its own temporary directory; what it
        # can change through the host tools is theirs to say, and only read-only ones are
        # known to change nothing.
        if self.level is Level.CONFINED and all(p.read_only for p in self._peers):
            return Replay.YES
        return Replay.UNKNOWN

    async def call(self, arguments: dict[str, Any], context: CallContext) -> Result:
        try:
            code, argv = self._program(arguments)
        except ValueError as exc:
            return Result(text=str(exc), is_error=True, kind=Kind.INVALID)
        invoke = context.invoke
        host_tools = [
            HostTool.relayed(
                p.name,
                _relay(invoke, p.name),
                signature=signature_of(p),
                description=p.description,
            )
            for p in self._peers
        ]
        r = await run(
            code,
            tools=host_tools,
            budget=self.budget,
            level=self.level,
            spawn=self.spawn,
            argv=argv,
        )
        data: dict[str, Any] = {"ok": r.ok, "value": r.value}
        if not r.ok:
            data.update(kind=r.kind, cause=r.cause, error=r.error)
        data.update(stdout=r.stdout, stderr=r.stderr, calls=r.calls)
        return Result(
            text=_ENCODER.encode(data).decode(),
            data=msgspec.to_builtins(data),
            is_error=not r.ok,
            kind=r.kind,
        )


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


_USAGE = (
    "run_program takes code, a string of Python source, and optionally args, a list of "
    "strings (the program's command-line arguments)"
)


def _code(arguments: dict[str, Any]) -> tuple[str, list[str] | None]:
    """The call's code and the program's ``argv`` (None without ``args``).

    Raises:
        ValueError: a missing or misshapen argument, or one the tool does not take.
    """
    code = arguments.get("code")
    args = arguments.get("args")
    if not isinstance(code, str) or set(arguments) - {"code", "args"}:
        raise ValueError(_USAGE)
    if args is None:
        return code, None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(_USAGE)
    return code, ["<program>", *args]


def _relay(invoke: Invoke | None, name: str) -> Any:
    async def handler(arguments: dict[str, Any]) -> Any:
        if invoke is None:
            raise CallError(Kind.DENIED, f"{name}: no one decides host-tool calls here")
        r = await invoke(Call(tool=name, arguments=arguments))
        if r.is_error:
            raise CallError(r.kind or Kind.RAISED, r.text)
        return r.data if r.data is not None else r.text

    return handler
