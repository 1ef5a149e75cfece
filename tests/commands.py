"""Running the command line in the test's own process."""

from __future__ import annotations

from sandbox._commands._main import main


def exit_code(argv: list[str]) -> int:
    """The exit code of ``sandbox ARGV``, whether main returns it or argparse raises it."""
    try:
        return main(argv)
    except SystemExit as exc:
        code = exc.code
    assert isinstance(code, int)
    return code
