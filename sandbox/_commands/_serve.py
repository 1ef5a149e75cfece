"""``sandbox serve``: an executor (the program tool and a module's tools) served over MCP."""

from __future__ import annotations

import argparse
import math
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from .._budget import Budget
from .._engine import Level, confinement_gaps
from .._engine import Tool as HostTool
from .._errors import ConfinementUnavailable, SandboxError
from ..plane import Descriptor, ProgramTool, Tool
from ._options import (
    EXIT_CODES,
    EXIT_OK,
    EXIT_SANDBOX,
    EXIT_USAGE,
    UsageError,
    budget_from,
    budget_options,
    level_option,
    seconds,
    spawn_of,
    spawn_option,
    tool_objects,
    tools_option,
)
from ._upstream import Held, holding, mcp_options, upstreams_of
from ._version import package_version

__all__ = ["add_serve_parser", "serve", "tools_from"]


def add_serve_parser(sub: Any) -> None:
    s = sub.add_parser(
        "serve",
        help="serve an executor (the sandbox as a tool, and host tools) over MCP",
        description="Serve the program tool (Python run in a sandbox, whose host.<name> calls "
        "are the other tools) and the tools of --tools modules as an MCP executor, on "
        "standard input and output, or over streamable HTTP with --http. The budget options "
        "are ceilings: a session asks for its own budget and gets each item capped at them. "
        "Whoever reaches the HTTP server runs code: on any address but loopback it refuses "
        "to start without a bearer token (--token-file, --token-env) or OAuth "
        "(--oauth-issuer, --oauth-jwks).",
        epilog=EXIT_CODES,
    )
    level_option(s, default=Level.CONFINED, child_levels_only=True)
    tools_option(s)
    spawn_option(s)
    s.add_argument("--no-program", action="store_true", help="serve the --tools tools only")
    s.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve over streamable HTTP at http://HOST:PORT/mcp (port 0: any free port; the "
        "URL is printed on standard error) instead of standard input and output",
    )
    s.add_argument(
        "--idle",
        type=seconds,
        default=300.0,
        metavar="S",
        help="HTTP: close a session that starts no request for this many seconds, ending "
        "its runs (default: %(default)g)",
    )
    s.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="HTTP: another Host header to accept (the served address is); 'name:*' for any "
        "port. Anything else is refused, against DNS rebinding",
    )
    s.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="HTTP: a browser origin to accept (none but the served address is)",
    )
    auth = s.add_argument_group("HTTP authentication and TLS")
    token = auth.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        metavar="PATH",
        help="every request must carry 'Authorization: Bearer TOKEN', TOKEN being this "
        "file's content (at least 16 characters)",
    )
    token.add_argument(
        "--token-env",
        metavar="NAME",
        help="the same, with the token in the environment variable NAME",
    )
    auth.add_argument(
        "--oauth-issuer",
        metavar="URL",
        help="be an OAuth resource server: let in the access tokens (JWTs) this authorization "
        "server issues for this server, checked against its keys (--oauth-jwks)",
    )
    auth.add_argument(
        "--oauth-jwks",
        metavar="URL",
        help="where the issuer publishes its keys (https://..., or file://... on this host)",
    )
    auth.add_argument(
        "--oauth-resource",
        metavar="URL",
        help="this server's URL as the issuer names it in its tokens' audience (default: the "
        "URL served)",
    )
    auth.add_argument(
        "--oauth-scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help="a scope every token must carry; repeatable",
    )
    auth.add_argument(
        "--no-auth",
        action="store_true",
        help="serve an address that is not loopback without authentication (only where "
        "something in front of the server authenticates)",
    )
    auth.add_argument("--tls-cert", metavar="PATH", help="serve HTTPS with this certificate (PEM)")
    auth.add_argument("--tls-key", metavar="PATH", help="the certificate's private key (PEM)")
    s.add_argument(
        "--kind",
        default="host",
        metavar="KIND",
        help="the workspace's kind, as sessions record it (default: %(default)s)",
    )
    s.add_argument(
        "--ref", default="", metavar="REF", help="which workspace (default: this host's name)"
    )
    s.add_argument(
        "--root",
        default="",
        metavar="PATH",
        help="the workspace's root, told to clients (default: not told)",
    )
    budget_options(s)
    mcp_options(s)


def tools_from(found: Sequence[Any]) -> list[Tool]:
    """Execution-plane tools from what a tools module offers: tools as they are (a
    :class:`sandbox.Tool` is one), plain functions as a :class:`sandbox.Tool`."""
    out: list[Tool] = []
    for obj in found:
        if isinstance(obj, Tool):
            out.append(obj)
        elif callable(obj):
            out.append(HostTool(obj))
        else:
            raise SandboxError(f"{obj!r} is neither a tool nor a function")
    return out


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--http wants HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def serve(args: argparse.Namespace) -> int:
    from ..plane import ExecutorServer, OAuth, read_token

    try:
        _refuse_bad_usage(args)
        ceilings = budget_from(args)
        found = tool_objects(args.tools)
        tools_from(found)  # refuse a bad module now, not at the first session
        level = Level(args.level)
        if level is Level.CONFINED and (gaps := confinement_gaps()):
            raise ConfinementUnavailable(gaps)
        spawn = spawn_of(args)
        program = not args.no_program
        upstreams_of(args)  # refuse bad --mcp options now, not once serving
        held = Held()
        upstream: list[Tool] = []  # as listed when serving starts: the capability names them

        def make(budget: Budget) -> list[Tool]:
            tools = [*tools_from(found), *upstream]
            if program:
                guide = held.stubs()  # the upstream tools as typed stubs, for the model
                tools.append(ProgramTool(level=level, budget=budget, spawn=spawn, guide=guide))
            return tools

        # The workspace's root is advertised only when given: by default a client learns
        # nothing of the host's paths.
        descriptor = Descriptor(
            kind=args.kind, ref=args.ref or socket.gethostname(), root=args.root
        )

        def serving(run: Callable[[ExecutorServer], Awaitable[None]]) -> None:
            """Connect the upstreams, then build the server (its capability names their
            tools) and serve until the end."""

            async def body() -> None:
                upstream[:] = held.tools()
                server = ExecutorServer(
                    make,
                    ceilings=ceilings,
                    descriptor=descriptor,
                    version=package_version(),
                    level=level.value,
                )
                await run(server)

            anyio.run(holding, args, held, body)

        if args.http is None:
            serving(lambda server: server.serve_stdio())
            return EXIT_OK
        host, port = _address(args.http)
        token = None
        if args.token_file is not None or args.token_env is not None:
            token = read_token(file=args.token_file, env=args.token_env)
        oauth = None
        if args.oauth_issuer is not None:
            oauth = OAuth(
                issuer=args.oauth_issuer,
                jwks=args.oauth_jwks,
                resource=args.oauth_resource,
                scopes=tuple(args.oauth_scope),
            )

        def ready(url: str) -> None:
            print(f"sandbox: serving {url}", file=sys.stderr, flush=True)

        async def main(server: ExecutorServer) -> None:
            await server.serve_http(
                host,
                port,
                idle=args.idle,
                allowed_hosts=args.allow_host,
                allowed_origins=args.allow_origin,
                token=token,
                oauth=oauth,
                require_auth=False if args.no_auth else None,
                tls_cert=args.tls_cert,
                tls_key=args.tls_key,
                ready=ready,
            )

        serving(main)
    except UsageError as exc:
        print(f"sandbox serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (SandboxError, ValueError, OSError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _refuse_bad_usage(args: argparse.Namespace) -> None:
    """Refuses options that do not go together, or a value out of range.

    Raises:
        UsageError: the first such problem.
    """
    if args.http is not None:
        _address(args.http)
    if not (args.idle > 0 and math.isfinite(args.idle)):
        raise UsageError(f"--idle must be a positive number of seconds, got {args.idle:g}")
    if (args.oauth_issuer is None) != (args.oauth_jwks is None):
        raise UsageError("OAuth needs --oauth-issuer and --oauth-jwks, both")
    if args.oauth_issuer is None and (args.oauth_resource is not None or args.oauth_scope):
        raise UsageError("--oauth-resource and --oauth-scope go with --oauth-issuer")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("TLS needs a certificate and its key, both (--tls-cert, --tls-key)")
