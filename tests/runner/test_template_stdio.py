"""A template (the zygote) makes the program's write-through streams once, for its children.

``runner._main.prepare_stdio`` makes them for descriptors 1 and 2 as a child has them (the
ends of pipes), puts the template's own descriptors back, and each child forked after
keeps them (``_write_through`` does nothing twice). Each case runs in a fresh interpreter:
it changes that interpreter's ``sys.stdout``, ``sys.stderr`` and ``print``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from .helpers import MSGSPEC_DIR, ROOT

_PRELUDE = f"""
import builtins, json, os, sys
sys.path[:0] = [{str(ROOT)!r}, {MSGSPEC_DIR!r}]
from runner import _main
RESULTS = {{}}
def same_file(fd, stat):
    now = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (stat.st_dev, stat.st_ino)
"""


def _run(body: str, *, stdout: Any = subprocess.PIPE) -> dict[str, Any]:
    """Run ``body`` after :data:`_PRELUDE` in a fresh ``python -I -S``; the RESULTS it
    wrote (as JSON, on descriptor 2's last line: 1 may be a file the case opened)."""
    code = (
        _PRELUDE + textwrap.dedent(body) + "\nos.write(2, b'\\n' + json.dumps(RESULTS).encode())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results: dict[str, Any] = json.loads(proc.stderr.splitlines()[-1])
    return results


def test_a_template_makes_the_streams_for_pipes_and_keeps_its_own_descriptors(
    tmp_path: Any,
) -> None:
    """The template's stdout is a file (it could seek); the streams it makes are its
    children's, made for a pipe's end; its descriptors 1 and 2 are the files they were."""
    with open(tmp_path / "out", "w") as out:
        results = _run(
            """
            before = os.fstat(1), os.fstat(2)
            assert os.lseek(1, 0, os.SEEK_CUR) == 0  # a file: it can seek
            RESULTS["made"] = _main.prepare_stdio()
            RESULTS["same files"] = same_file(1, before[0]) and same_file(2, before[1])
            RESULTS["raw"] = [type(s.buffer).__name__ for s in (sys.stdout, sys.stderr)]
            RESULTS["twins"] = sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__
            RESULTS["seekable"] = sys.stdout.seekable()
            made = sys.stdout, sys.stderr, builtins.print
            _main._write_through()
            RESULTS["kept"] = (sys.stdout, sys.stderr, builtins.print) == made
            print("the template's own line")
            """,
            stdout=out,
        )
    assert results == {
        "made": True,
        "same files": True,
        "raw": ["_Unbuffered", "_Unbuffered"],
        "twins": True,
        "seekable": False,
        "kept": True,
    }
    assert (tmp_path / "out").read_text() == "the template's own line\n"


def test_a_child_of_the_template_keeps_the_streams_and_prints_through_its_pipe() -> None:
    """A forked child with a pipe on 1 and 2 (as each runner has): ``_write_through``
    keeps what the template made, and one ``print`` arrives whole, in one write."""
    results = _run(
        """
        assert _main.prepare_stdio()
        made = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, builtins.print
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.dup2(write, 1)
            os.close(read)
            os.close(write)
            _main._write_through()
            kept = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, builtins.print)
            if kept == made:
                print("a", "b", sep="-", end="!\\n")
            os._exit(0)
        os.close(write)
        RESULTS["first read"] = os.read(read, 100).decode()
        RESULTS["status"] = os.waitpid(pid, 0)[1]
        """
    )
    assert results == {"first read": "a-b!\n", "status": 0}


def test_a_template_that_cannot_make_them_leaves_each_child_to_make_its_own() -> None:
    """No pipe to be had, or no second descriptor: nothing made, nothing changed, nothing
    left open, and ``_write_through`` in a child makes the streams as a cold runner does.
    With descriptor 1 closed, it stays closed (the pipe's end lands there meanwhile) and
    nothing is left open."""
    results = _run(
        """
        streams = sys.stdout, sys.stderr, builtins.print
        real_pipe = os.pipe
        def no_pipe():
            raise OSError(24, "Too many open files")
        os.pipe = no_pipe
        RESULTS["no pipe"] = _main.prepare_stdio()
        os.pipe = real_pipe
        RESULTS["unchanged"] = (sys.stdout, sys.stderr, builtins.print) == streams
        fds = sorted(os.listdir("/proc/self/fd"))
        real_dup = os.dup
        duplicated = []
        def second_fails(fd):
            duplicated.append(fd)
            if len(duplicated) == 2:
                raise OSError(24, "Too many open files")
            return real_dup(fd)
        os.dup = second_fails
        RESULTS["second dup refused"] = _main.prepare_stdio()
        os.dup = real_dup
        RESULTS["unchanged by it"] = (sys.stdout, sys.stderr, builtins.print) == streams
        RESULTS["nothing left by it"] = sorted(os.listdir("/proc/self/fd")) == fds
        saved = os.dup(1)
        os.close(1)
        _main.prepare_stdio()
        try:
            os.fstat(1)
        except OSError:
            RESULTS["1 still closed"] = True
        os.dup2(saved, 1)
        os.close(saved)
        RESULTS["no descriptor left"] = sorted(os.listdir("/proc/self/fd")) == fds
        _main._made_through = None
        _main._write_through()
        RESULTS["made by the child"] = type(sys.stdout.buffer).__name__
        """
    )
    assert results == {
        "no pipe": False,
        "unchanged": True,
        "second dup refused": False,
        "unchanged by it": True,
        "nothing left by it": True,
        "1 still closed": True,
        "no descriptor left": True,
        "made by the child": "_Unbuffered",
    }
