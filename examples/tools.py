"""Example host tools for the sandbox: what a host might expose to generated code.

Run a program with them: ``sandbox run examples/programs/concurrent.py --tools examples/tools.py``.
"""

from __future__ import annotations

import anyio

from sandbox import CallError, Kind, Tool

_DOCS = {
    "anyio": "High-level async concurrency and networking on top of asyncio or trio.",
    "msgspec": "Fast serialization and validation for JSON, MessagePack, YAML and TOML.",
    "psutil": "Cross-platform process and system utilities.",
    "trio": "A friendly library for async concurrency and I/O.",
}


async def search(query: str, limit: int = 3) -> list[dict[str, str]]:
    """Search a small document index; takes 50 ms, like a real backend would."""
    await anyio.sleep(0.05)
    hits = [
        {"name": name, "summary": text}
        for name, text in _DOCS.items()
        if query.lower() in (name + " " + text).lower()
    ]
    return hits[:limit]


def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


def delete_everything(path: str) -> None:
    """A tool no program should be allowed to run: always denied by policy."""
    raise CallError(Kind.DENIED, f"deleting {path!r} is not allowed")


TOOLS = [Tool(search), Tool(word_count, inline=True), Tool(delete_everything)]
