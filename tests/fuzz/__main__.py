"""Run a fuzz target under atheris (libFuzzer), coverage-guided, for as long as asked.

Usage, from the repository's root (``pip install -e '.[fuzz]'`` installs atheris)::

    python -m tests.fuzz TARGET [CORPUS_DIR ...] [-runs=N] [other libFuzzer flags]
    python -m tests.fuzz all -runs=N      # every target in turn, each in its own process
    python -m tests.fuzz --list

A target that finds a broken promise stops the run with the input, written by libFuzzer
to ``crash-<sha1>``; ``python -m tests.fuzz TARGET crash-<sha1>`` replays it. Defaults added
unless given: ``-max_len=1024`` (a script of operations: hostile frames far larger than
that are built from a few bytes), ``-timeout=60`` (the Server target has its own hang
limit well inside it) and ``-print_final_stats=1``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Final

_DEFAULTS: Final = ["-max_len=1024", "-timeout=60", "-print_final_stats=1"]
_NAMES: Final = ["server_core", "client_core", "starter_core", "runner_core", "server_pipes"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__ or "")
        return 0 if argv else 2
    if argv[0] == "--list":
        sys.stdout.write("\n".join(_NAMES) + "\n")
        return 0
    name, rest = argv[0], argv[1:]
    if name == "all":
        for each in _NAMES:
            sys.stdout.write(f"== {each}\n")
            sys.stdout.flush()
            status = subprocess.call([sys.executable, "-m", "tests.fuzz", each, *rest])
            if status:
                return status
        return 0
    if name not in _NAMES:
        sys.stderr.write(f"unknown target {name!r}; one of: {', '.join(_NAMES)}, all\n")
        return 2
    try:
        import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        sys.stderr.write("atheris is not installed: pip install -e '.[fuzz]'\n")
        return 2
    # Instrument the protocol (only it) for coverage before anything loads it.
    with atheris.instrument_imports(include=["protocol"]):
        import protocol._channel
        import protocol._server
        import protocol._starter  # noqa: F401
    from tests.fuzz.targets import TARGETS

    flags = [*rest]
    for default in _DEFAULTS:
        if not any(arg.startswith(default.split("=")[0] + "=") for arg in flags):
            flags.append(default)
    atheris.Setup([sys.argv[0], *flags], TARGETS[name])
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
