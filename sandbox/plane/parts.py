"""The rest of the execution plane's public pieces, for those who build on it: the protocols
a tool or an executor may implement beyond the basic ones, the capability an executor
server advertises, the verifiers of HTTP authentication, and the plane's default times.

Everyday use needs only :mod:`sandbox.plane`; its exceptions are in
:mod:`sandbox.plane.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._model import Closeable, Factual, Invoke, NeedsPeers, Replayable
from ._capability import CAPABILITY_VERSION, Capability
from ._executor import FACTS_TIMEOUT, Batcher
from ._set import Batch

if TYPE_CHECKING:
    from ._auth import BearerToken, JwtVerifier
    from ._remote import KEEPALIVE, Dialer
    from ._serve import SESSION_IDLE

__all__ = [
    "CAPABILITY_VERSION",
    "FACTS_TIMEOUT",
    "KEEPALIVE",
    "SESSION_IDLE",
    "Batch",
    "Batcher",
    "BearerToken",
    "Capability",
    "Closeable",
    "Dialer",
    "Factual",
    "Invoke",
    "JwtVerifier",
    "NeedsPeers",
    "Replayable",
]

# These load the MCP SDK (most of a second): only when they are asked for.
_LAZY = {
    "BearerToken": "_auth",
    "JwtVerifier": "_auth",
    "KEEPALIVE": "_remote",
    "Dialer": "_remote",
    "SESSION_IDLE": "_serve",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"sandbox.plane.{module}"), name)
    globals()[name] = value
    return value
