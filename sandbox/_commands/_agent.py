"""``sandbox agent "task"``: the loop against an OpenAI-compatible endpoint, with the sandbox
tool and host tools, its steps shown live and written as JSONL, resumable from the file."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.to_thread
import msgspec

from .. import plane
from .._engine import Level, confinement_gaps
from .._errors import ConfinementUnavailable, SandboxError
from .._text import printable
from ..agent import (
    Agent,
    AgentResult,
    Approval,
    Events,
    Grant,
    ModelError,
    Paused,
    Step,
    ToolCall,
    TrajectoryStore,
    Verdict,
)
from ..agent.parts import CompactionResult, FillCheck, VerifyResult
from ._options import (
    EXIT_OK,
    EXIT_SANDBOX,
    EXIT_USAGE,
    UsageError,
    budget_from,
    budget_options,
    count,
    level_option,
    seconds,
    tool_objects,
    tools_option,
)
from ._upstream import Held, holding, mcp_options, upstreams_of

__all__ = ["add_agent_parser", "agent", "read_trajectory"]

EXIT_UNFINISHED = 1

SYSTEM = """You are an agent that completes tasks by calling tools.
The run_program tool runs Python in an isolated sandbox: its value is its last expression,
top-level await works, and host tools are called as `await host.<name>(...)` (use
asyncio.gather to call several at once). Prefer one program that does the work over many
small calls. When the task is done, call finish with your answer."""


class JsonlTrajectory(TrajectoryStore):
    """Writes each step as a JSON line as soon as it is final, and the end of the run."""

    def __init__(self, out: TextIO, written: int = 0) -> None:
        super().__init__()
        self._out = out
        self._written = written

    def sync(self, steps: Sequence[Step]) -> None:
        super().sync(steps)
        for step in steps[self._written :]:
            self._out.write(msgspec.json.encode({"step": step}).decode() + "\n")
        self._written = len(steps)
        self._out.flush()

    def end(self, result: AgentResult, reason: str) -> None:
        record = {"end": {"finished": result.finished, "output": result.output, "why": reason}}
        self._out.write(msgspec.json.encode(record).decode() + "\n")
        self._out.flush()


def read_trajectory(path: Path) -> list[Step]:
    """The steps of a trajectory file (its ``end`` records are skipped)."""
    steps: list[Step] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = msgspec.json.decode(line, type=dict[str, Any])
            if "step" in record:
                steps.append(msgspec.convert(record["step"], Step))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SandboxError(f"{path}:{n}: not a trajectory record: {exc}") from None
    return steps


class Terminal(Events):
    """Shows the steps as they happen, on standard error."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr

    def _say(self, text: str) -> None:
        # The model's text and the tools' results are not trusted: no terminal controls.
        self.out.write(printable(text) + "\n")
        self.out.flush()

    def step_start(self, step: int) -> None:
        self._say(f"── step {step}")

    def thought(self, step: int, content: str, reasoning: str) -> None:
        if reasoning.strip():
            self._say(f"  (reasoning) {_short(reasoning, 300)}")
        if content.strip():
            self._say(f"  {_short(content, 600)}")

    def tool_call(self, step: int, call: ToolCall) -> None:
        self._say(f"  → {call.name} {_short(call.arguments, 400)}")

    def tool_result(self, step: int, call: ToolCall, observation: str, is_error: bool) -> None:
        mark = "✗" if is_error else "←"
        self._say(f"  {mark} {_short(observation, 600)}")

    def context_compaction(self, result: CompactionResult, reactive: bool) -> None:
        how = "after an overflow" if reactive else ""
        self._say(
            f"  [context compacted {how}: {result.before_percent:.0f}% → "
            f"{result.after_percent:.0f}%]"
        )

    def context_fill(self, check: FillCheck) -> None:
        if check.status != "ok":
            self._say(f"  [context {check.percent:.0f}% full: {check.status}]")

    def diagnostic(self, name: str, detail: str) -> None:
        self._say(f"  [{name}] {_short(detail, 200)}")


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


class Asker:
    """The human in the loop on a terminal: asks before each call and at every limit."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr

    async def _ask(self, question: str) -> str:
        self.out.write(question)
        self.out.flush()
        line: str = await anyio.to_thread.run_sync(sys.stdin.readline)
        return line.strip()

    async def approve(self, call: ToolCall, arguments: dict[str, Any]) -> Approval:
        answer = await self._ask(f"run {call.name}? [y]es / [n]o / [e]dit arguments: ")
        if answer.lower().startswith("n"):
            reason = await self._ask("why (told to the model): ")
            return Approval(verdict=Verdict.DENY, reason=reason)
        if answer.lower().startswith("e"):
            raw = await self._ask("arguments as JSON: ")
            try:
                new = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                return Approval(
                    verdict=Verdict.DENY, reason="the user gave arguments that are not JSON"
                )
            if isinstance(new, dict):
                return Approval(verdict=Verdict.MODIFY, arguments=new)
        return Approval()

    async def _grant(self, question: str) -> tuple[Grant, int]:
        answer = (await self._ask(question + " [o]nce / [m]ore N / [a]lways / [d]eny: ")).lower()
        if answer.startswith("o"):
            return Grant.ONCE, 1
        if answer.startswith("m"):
            digits = "".join(ch for ch in answer if ch.isdigit())
            return Grant.MORE, int(digits or 5)
        if answer.startswith("a"):
            return Grant.ALWAYS, 0
        return Grant.DENY, 0

    async def on_step_limit(self, steps: int, limit: int) -> tuple[Grant, int]:
        return await self._grant(f"the step limit ({limit}) is reached. Go on?")

    async def on_breaker(self, breaker: str, detail: str) -> Grant:
        grant, _ = await self._grant(f"breaker {breaker}: {detail}. Go on?")
        return grant


def add_agent_parser(sub: Any) -> None:

    a = sub.add_parser(
        "agent",
        help="run a task with a model that writes programs for the sandbox",
        description="Run TASK with an OpenAI-compatible model (OpenAI, vLLM, llama.cpp "
        "server, Ollama) that may run Python in the sandbox (run_program), whose programs "
        "call the host tools of --tools modules. Steps are shown live on standard error "
        "and written to --trajectory as JSONL; --resume continues from such a file. Exit "
        "codes: 0 finished, 1 not finished (a limit, a breaker, paused), 2 bad usage, 4 the "
        "model or the sandbox failed (or the 'agent' extra is not installed).",
    )
    a.add_argument("task", nargs="?", default="", help="the task (with --resume: optional)")
    a.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL"),
        metavar="URL",
        help="the endpoint (default: $OPENAI_BASE_URL)",
    )
    a.add_argument("--model", required=True, metavar="NAME", help="the model's name there")
    a.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="the environment variable holding the API key (default: %(default)s; "
        "local servers need none)",
    )
    a.add_argument(
        "--max-steps", type=count, default=25, metavar="N", help="steps (default: %(default)s)"
    )
    a.add_argument(
        "--context-tokens",
        type=count,
        default=32768,
        metavar="N",
        help="the model's context window, in tokens (default: %(default)s)",
    )
    a.add_argument(
        "--output-tokens",
        type=count,
        default=4096,
        metavar="N",
        help="the most tokens a response may have (default: %(default)s)",
    )
    level_option(a, default=Level.CONFINED, child_levels_only=True)
    tools_option(a)
    budget_options(a)
    mcp_options(a)
    a.add_argument("--deny", action="append", default=[], metavar="TOOL", help="refuse TOOL")
    a.add_argument("--approve", action="store_true", help="ask before every tool call")
    a.add_argument("--trajectory", type=Path, metavar="FILE", help="write the steps here (JSONL)")
    a.add_argument(
        "--resume", type=Path, metavar="FILE", help="continue the run of this trajectory file"
    )
    a.add_argument(
        "--dump", type=Path, metavar="FILE", help="write every model request and response (JSONL)"
    )
    a.add_argument(
        "--verify",
        metavar="COMMAND",
        help="after a response whose edit succeeded, run COMMAND (a shell command: tests, "
        "lint, a build) and show the model its result; it is yours, never the model's",
    )
    a.add_argument(
        "--verify-timeout",
        type=seconds,
        default=300.0,
        metavar="S",
        help="seconds COMMAND may take (default: %(default)g)",
    )


def agent(args: argparse.Namespace) -> int:
    from ..agent import ContextWindow, DumpCaller, OpenAICaller, PlaneTools
    from ._serve import tools_from

    try:
        if not args.task and args.resume is None:
            raise UsageError("give a task, or --resume a trajectory")
        if args.base_url is None:
            raise UsageError("give --base-url (or set OPENAI_BASE_URL)")
        if args.resume is not None and not args.resume.is_file():
            raise UsageError(f"cannot read {args.resume}: No such file")
        level = Level(args.level)
        if level is Level.CONFINED and (gaps := confinement_gaps()):
            raise ConfinementUnavailable(gaps)
        budget = budget_from(args)
        found = tool_objects(args.tools)
        resumed = read_trajectory(args.resume) if args.resume is not None else []
        task = args.task or _task_of(args.resume)
        upstreams_of(args)  # refuse bad --mcp options before the model is called
    except UsageError as exc:
        print(f"sandbox agent: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (SandboxError, ValueError, OSError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return EXIT_SANDBOX

    denied = set(args.deny)
    held = Held()

    def policy(call: plane.Call, tool: plane.ToolInfo, facts: plane.Facts) -> plane.Decision:
        if call.tool in denied:
            return plane.deny(f"{call.tool} is refused on this host")
        return plane.ALLOW

    async def main() -> int:
        executor = plane.InProcess(
            [*tools_from(found), *held.tools(), plane.ProgramTool(level=level, budget=budget)]
        )
        trajectory_path = args.trajectory or args.resume
        out = _append(trajectory_path or Path(os.devnull))
        dump = _append(args.dump) if args.dump is not None else None
        closing: list[Any] = []
        try:
            if args.trajectory is not None and args.resume is None:
                out.write(msgspec.json.encode({"task": task}).decode() + "\n")
            tools = PlaneTools(await plane.Set.bind(executor, policy=policy))
            raw = OpenAICaller(
                args.model, base_url=args.base_url, api_key=os.environ.get(args.api_key_env)
            )
            closing.append(raw)
            caller: Any = raw
            if dump is not None:
                caller = DumpCaller(caller, dump)
            context = ContextWindow(
                system=SYSTEM + held.prompt(),
                task=task,
                max_tokens=args.context_tokens,
                output_limit=args.output_tokens,
            )
            context.seed_steps(resumed)
            store = JsonlTrajectory(out, written=len(resumed))
            loop = Agent(
                caller,
                tools,
                args.max_steps,
                verify=_verifier(args.verify, args.verify_timeout) if args.verify else None,
                events=Terminal(),
                human=Asker() if args.approve else None,
                resume=resumed,
                trajectory=store,
            )
            try:
                result = await loop.run(tools.specs(), context)
            except Paused as paused:
                result = paused.result
            except ModelError as exc:
                print(f"sandbox: the model failed: {exc}", file=sys.stderr)
                return EXIT_SANDBOX
            store.end(result, "finished" if result.finished else result.output)
            print(printable(result.output))
            return EXIT_OK if result.finished else EXIT_UNFINISHED
        finally:
            for c in closing:
                await c.aclose()
            await executor.aclose()
            out.close()
            if dump is not None:
                dump.close()

    try:
        return anyio.run(holding, args, held, main)
    except KeyboardInterrupt:
        return EXIT_UNFINISHED
    except SandboxError as exc:  # an upstream that could not start
        print(f"sandbox: {exc}", file=sys.stderr)
        return EXIT_SANDBOX


def _verifier(command: str, timeout: float) -> Callable[[], Awaitable[VerifyResult]]:
    """The host's verification: ``command`` in a shell, its output and exit status."""

    async def verify() -> VerifyResult:
        with anyio.move_on_after(timeout) as scope:
            done = await anyio.run_process(
                command, check=False, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            output = done.stdout.decode(errors="replace")
            return VerifyResult(output=output, exit_code=done.returncode)
        assert scope.cancelled_caught
        return VerifyResult(timed_out=True, timeout=timeout)

    return verify


def _append(path: Path) -> TextIO:
    """A file opened for appending, line-buffered (each record is on disk as it is made)."""
    return path.open("a", buffering=1)


def _task_of(path: Path) -> str:
    for line in path.read_text().splitlines():
        try:
            record = msgspec.json.decode(line, type=dict[str, Any])
        except msgspec.DecodeError:
            continue
        if isinstance(record.get("task"), str):
            return str(record["task"])
    raise SandboxError(f"{path} holds no task; give one")
