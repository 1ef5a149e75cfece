"""The installed distribution's version, for ``--version`` and what ``serve`` reports."""

from __future__ import annotations

from ._options import DISTRIBUTION

__all__ = ["package_version"]


def package_version() -> str:
    """The installed distribution's version ("unknown" in a checkout never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"
