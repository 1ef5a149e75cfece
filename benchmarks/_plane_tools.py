"""The tools ``bench_plane`` measures, in process and served by ``sandbox serve --tools``.

``sandbox serve`` loads this file by path (under another module name), so it imports only
the public plane API. Both tools are async: a sync function tool runs in a worker thread
(:class:`sandbox.Tool`), and the benchmark is about the plane's and the
wire's cost, not the thread hop's, which would be the same on both sides of every ratio.
"""

from __future__ import annotations

from typing import Any

import sandbox

__all__ = ["ECHO", "TOOLS", "TOUCH", "echo", "touch_facts"]

#: The plain tool: returns its input.
ECHO = "echo"
#: The same function under another name, with a facts claim.
TOUCH = "touch"


async def echo(x: Any) -> Any:
    """Return ``x`` as it came."""
    return x


def touch_facts(x: Any) -> dict[str, Any]:
    """The claim of ``touch``: it would write one file (whatever ``x`` is)."""
    return {"writes": ["/tmp/x"]}


TOOLS = [
    sandbox.Tool(echo),
    sandbox.Tool(echo, name=TOUCH, facts=touch_facts),
]
