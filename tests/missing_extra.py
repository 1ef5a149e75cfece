"""``python -m tests.missing_extra MODULE[,MODULE...] ARGS...``: the ``sandbox`` command as
on a host where those modules (an extra's) are not installed.

A meta path finder in front of every other one makes each import of those modules, or of
anything inside them, fail as an absent module does (``ModuleNotFoundError`` with its
``name``), whether or not they are installed here; then ``sandbox ARGS`` runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType


class Absent(importlib.abc.MetaPathFinder):
    """Finds the named top-level modules (and their submodules) absent."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def main() -> int:
    names = set(sys.argv[1].split(","))
    assert not names & set(sys.modules), "already imported: too late to make them absent"
    sys.meta_path.insert(0, Absent(names))
    from sandbox._commands import main as sandbox

    return sandbox(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
