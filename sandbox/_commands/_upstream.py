"""The command line's upstream MCP servers: ``--mcp 'COMMAND ARGS'``, ``--mcp-http URL``
(repeatable, each optionally ``NAME=...``) and ``--mcp-read-only`` on ``sandbox run``,
``serve`` and ``agent``, and ``sandbox describe``, which prints their tools as typed
Python stubs. The work is :mod:`sandbox.upstream`'s; this module reads the options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._engine import Toolset, run, run_sync
from .._errors import SandboxError
from .._result import RunResult
from ._options import EXIT_CODES, EXIT_OK, EXIT_SANDBOX, EXIT_USAGE, UsageError, extras_for

if TYPE_CHECKING:
    from ..upstream import Upstream, Upstreams

__all__ = [
    "Held",
    "add_describe_parser",
    "describe",
    "holding",
    "mcp_options",
    "opened",
    "run_with_mcp",
    "upstreams_of",
]

T = TypeVar("T")


def mcp_options(p: argparse.ArgumentParser) -> None:
    """``--mcp``, ``--mcp-http`` and ``--mcp-read-only``."""
    g = p.add_argument_group(
        "upstream MCP servers",
        "Each tool of each server is a host tool, host.<server>__<tool>(**arguments); the "
        "server's name is NAME if given (NAME=...), else the one it gives itself. "
        "'sandbox describe' prints them as typed Python stubs.",
    )
    g.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="[NAME=]COMMAND ARGS",
        help="start an MCP server with this command line (shell-quoted) and speak MCP on its "
        "standard input and output; repeatable",
    )
    g.add_argument(
        "--mcp-http",
        action="append",
        default=[],
        metavar="[NAME=]URL",
        help="an MCP server served over streamable HTTP at URL; repeatable",
    )
    g.add_argument(
        "--mcp-read-only",
        action="store_true",
        help="refuse calls of upstream tools that do not say they are read-only "
        "(readOnlyHint): a program gets a 'denied' CallError",
    )


def upstreams_of(args: argparse.Namespace) -> list[Upstream]:
    """The upstreams the options name.

    Raises:
        UsageError: an option that does not read as a command or a URL.
        MissingExtra: the MCP SDK is not installed.
    """
    if not (args.mcp or args.mcp_http):
        return []
    with extras_for(args.command):
        from ..upstream import parse_mcp

    found: list[Upstream] = []
    for text, over_http in [(t, False) for t in args.mcp] + [(t, True) for t in args.mcp_http]:
        try:
            found.append(parse_mcp(text, over_http=over_http))
        except ValueError as exc:
            option = "--mcp-http" if over_http else "--mcp"
            raise UsageError(f"{option} {text!r}: {exc}") from None
    return found


@asynccontextmanager
async def opened(args: argparse.Namespace) -> AsyncIterator[Upstreams | None]:
    """The options' upstreams, connected for the block (None when there are none).

    Raises:
        UpstreamError: one could not start or did not answer (the message names it).
    """
    specs = upstreams_of(args)
    if not specs:
        yield None
        return
    from ..upstream import Upstreams, read_only

    def warn(line: str) -> None:
        print(f"sandbox: {line}", file=sys.stderr, flush=True)

    policy = read_only if args.mcp_read_only else None
    async with Upstreams(specs, policy=policy, warn=warn) as up:
        yield up


def run_with_mcp(
    args: argparse.Namespace, program: str, *, tools: Toolset, **options: Any
) -> RunResult:
    """:func:`sandbox.run_sync`, with the options' upstream servers' tools added to
    ``tools`` for the run and closed after it.

    Raises:
        UsageError, MissingExtra: as :func:`upstreams_of`.
        UpstreamError: a server could not start or did not answer.
        ToolError: an upstream tool and a ``--tools`` tool have one name.
    """
    if not upstreams_of(args):
        return run_sync(program, tools=tools, **options)

    async def main() -> RunResult:
        async with opened(args) as up:
            assert up is not None
            return await run(program, tools=Toolset([*tools, *up.host_tools()]), **options)

    return anyio.run(main)


def add_describe_parser(sub: Any) -> None:
    d = sub.add_parser(
        "describe",
        help="print the tools of upstream MCP servers as typed Python stubs",
        description="Connect to the upstream MCP servers and print their tools as the typed "
        "Python stubs a model reads before it writes a program that calls them: signatures "
        "from the input schemas, return types from the output schemas, docstrings from the "
        "descriptions. " + EXIT_CODES,
    )
    mcp_options(d)


def describe(args: argparse.Namespace) -> int:
    """``sandbox describe``."""
    return _guarded(args, _describe)


async def _describe(args: argparse.Namespace) -> int:
    if not (args.mcp or args.mcp_http):
        raise UsageError("name at least one server (--mcp 'COMMAND ARGS' or --mcp-http URL)")
    async with opened(args) as up:
        assert up is not None
        sys.stdout.write(up.describe())
    return EXIT_OK


def _guarded(args: argparse.Namespace, main: Callable[[argparse.Namespace], Awaitable[int]]) -> int:
    from ._options import MissingExtra

    try:
        return anyio.run(main, args)
    except UsageError as exc:
        print(f"sandbox {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MissingExtra as exc:
        print(f"sandbox {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except (SandboxError, OSError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return EXIT_SANDBOX


class Held:
    """The upstreams of a long-lived command (``serve``, ``agent``), once connected: their
    tools for each session's executor, and their stubs for a model's prompt."""

    def __init__(self) -> None:
        self.up: Upstreams | None = None

    def tools(self) -> list[Any]:
        """Their tools as last listed (a changed list shows in the next session)."""
        return list(self.up.tools()) if self.up is not None else []

    def stubs(self) -> str:
        """Their typed Python stubs ("" without upstreams), for a server's clients: without
        the command lines or URLs that reach them from this host."""
        return self.up.describe(where=False) if self.up is not None else ""

    def prompt(self) -> str:
        """Their stubs, as a section of a system prompt ("" without upstreams)."""
        if self.up is None:
            return ""
        return (
            "\n\nThe host tools from upstream MCP servers, as Python stubs (call them from "
            "run_program):\n```python\n" + self.up.describe() + "```"
        )


async def holding(args: argparse.Namespace, held: Held, body: Callable[[], Awaitable[T]]) -> T:
    """Runs ``body`` with the options' upstreams connected and in ``held``; closes them
    after.

    Raises:
        UpstreamError: one could not start or did not answer.
    """
    async with opened(args) as up:
        held.up = up
        try:
            return await body()
        finally:
            held.up = None
