"""A run's child holds nothing of the zygote's bookkeeping: no other run, no host pid, no
host cgroup path.

The zygote forks every child from its own heap. Whatever the zygote held at the fork (its
runners and their working directories and cgroups, the host's pid, the request being
handled and the frames of its loop) is in the child too, readable by the program through
the stack, ``gc`` or module globals, unless the child drops it before the program runs.
These tests walk everything a program can reach and look for it.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import anyio
import msgspec
import pytest

import runner
import sandbox
from protocol import CGROUP_PREFIX, WORKDIR_PREFIX
from sandbox import Budget, Level, Spawn, Tool
from sandbox._children import _supervisor, hierarchy, workdir_bases
from tests.host import child_levels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

LEVELS = child_levels()

#: The walk: from every root a program has (its stack, ``gc.get_objects()`` after
#: ``gc.unfreeze()``, so with the zygote's frozen objects, every module,
#: ``sys.argv``, ``sys.orig_argv``, ``sys.path``, the environment) through every referent,
#: dict keys included (a dict of str keys does not report them as referents). Strings and
#: bytes are searched for the needles, ints compared with the pids, and any object of the
#: zygote's bookkeeping is one too many. The needles come in hex and the walk skips its own
#: objects, so that it does not find them in itself. The child's own working directory is
#: its own to know: its name is taken out before the search.
#:
#: A pid is a small number (``pid_max`` may be 32768), and the same number may well be a
#: constant of the standard library (8192 is ``stat.S_IFCHR``): a pid equal to an int
#: defined in code, or in a module or class outside ``runner`` and ``protocol``, proves
#: nothing and is not counted.
WALK = r"""
import gc, os, sys, types

BOOKKEEPING = {"_Zygote", "_Runner", "ForkRequest"}
OURS = ("runner", "protocol", "__main__")

def walk(hex_needles, hex_pids):
    needles = [(label, bytes.fromhex(h).decode()) for label, h in hex_needles]
    pids = {int(h, 16) for h in hex_pids}
    own = os.path.basename(os.getcwd())  # at process, the host's name for it
    own = own if own.startswith("sandbox-run-") else None
    here = sys._getframe()
    found = []
    suspects = []  # (a pid, where it was found)
    constants = set()  # ints defined as constants
    static = set()  # ids of the dicts of modules and classes not ours
    kept = []  # everything visited stays alive, so that no id is reused during the walk
    seen = set()
    todo = []
    via = {}  # id -> the object it was first reached from, to say where a finding is
    gc.unfreeze()  # what the zygote froze is listed by gc.get_objects() too from here
    roots = [sys.modules, sys.argv, sys.orig_argv, sys.path, os.environ, gc.get_objects()]
    frame = here.f_back
    while frame is not None:
        roots += [frame, frame.f_locals, frame.f_globals]
        via.setdefault(id(roots[-2]), frame)
        frame = frame.f_back
    del frame
    mine = {id(x) for x in (needles, pids, here, found, kept, seen, todo, roots, via)}
    mine.update(id(x) for x in (suspects, constants, static, BOOKKEEPING, OURS))
    mine.update(id(x) for pair in needles for x in pair)
    todo.extend(roots)

    def where(obj):
        path = []
        while id(obj) in via and len(path) < 8:
            obj = via[id(obj)]
            name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
            code = getattr(obj, "f_code", None)
            if code is not None:
                name = code.co_name
            path.append(type(obj).__name__ + (f" {name}" if isinstance(name, str) else ""))
        return " < ".join(path)

    def constant(value, depth=0):
        kind = type(value)
        if kind is int:
            constants.add(value)
        elif depth < 4 and kind in (tuple, frozenset, list, set):
            for item in value:
                constant(item, depth + 1)
        elif depth < 4 and kind is dict:
            for item in value.items():
                constant(item, depth + 1)

    while todo:
        obj = todo.pop()
        if id(obj) in seen or id(obj) in mine:
            continue
        seen.add(id(obj))
        kept.append(obj)
        kind = type(obj)
        if kind is str or kind is bytes or kind is bytearray:
            text = obj if kind is str else bytes(obj).decode("latin-1")
            if own and own in text:
                text = text.replace(own, "")
            for label, needle in needles:
                if needle in text:
                    at = text.index(needle)
                    found.append(f"{label}: {text[max(0, at - 60) : at + 60]!r} in {where(obj)}")
            continue
        if kind is int:
            if obj in pids:
                suspects.append((obj, where(obj)))
            continue
        refs = gc.get_referents(obj)
        if kind.__module__ in ("runner._zygote", "protocol._fork") and kind.__name__ in BOOKKEEPING:
            found.append(f"the zygote's {kind.__name__} in {where(obj)}")
        if kind is dict:
            refs += obj
            if id(obj) in static:
                constant(obj)
        elif kind is types.ModuleType or isinstance(obj, type):
            name = obj.__name__ if kind is types.ModuleType else obj.__module__
            if not str(name).startswith(OURS):
                static.update(id(ref) for ref in refs if type(ref) is dict)
            elif kind is types.ModuleType:
                # Our modules' constants (upper-case names: syscall tables, say) are data
                # from their source, never a pid the zygote kept.
                for attr, value in vars(obj).items():
                    if attr.lstrip("_").isupper():
                        constant(value)
        elif kind is types.CodeType:
            constant(obj.co_consts)
        elif kind is types.FunctionType:
            constant(obj.__defaults__ or ())
            constant(obj.__kwdefaults__ or {})
        for ref in refs:
            via.setdefault(id(ref), obj)
        todo.extend(refs)
    for pid, at in suspects:
        if pid not in constants:
            found.append(f"a pid of the host's: {pid} in {at}")
    return found, len(seen)

walk(HEX_NEEDLES, HEX_PIDS)
"""


def program(needles: dict[str, str], pids: set[int]) -> str:
    hex_needles = [(label, text.encode().hex()) for label, text in needles.items()]
    hex_pids = [f"{pid:x}" for pid in pids]
    return WALK.replace("HEX_NEEDLES", repr(hex_needles)).replace("HEX_PIDS", repr(hex_pids))


def host_pids() -> set[int]:
    """The host's, the zygote's and the keeper's pids."""
    pids = {os.getpid()}
    with _supervisor._lock:
        zygote = _supervisor._current
        if zygote is not None:
            pids.update((zygote.pid, zygote.keeper.pid))
    return pids


@pytest.mark.timeout(120)
@pytest.mark.parametrize("level", LEVELS)
async def test_a_child_sees_nothing_of_the_zygote(level: Level, spawn: Spawn) -> None:
    """While run B is under way, run A walks everything it can reach: it finds neither B's
    working directory nor any cgroup path or name of the host's, nor the pid of the host,
    the zygote or the keeper, nor (confined) where on the host the packages the view
    places are. (At ``process`` the host is not hidden from the program, but nothing of it
    may come from the zygote's memory either.)"""
    held = anyio.Event()
    b_started = anyio.Event()
    other: list[str] = []

    async def started(workdir: str) -> None:
        other.append(workdir)
        b_started.set()

    async def hold() -> None:
        with anyio.fail_after(90):
            await held.wait()

    walked: list[sandbox.RunResult] = []

    async def run_b() -> None:
        b = await sandbox.run(
            "import os\nhost.started(os.getcwd())\nhost.hold()\n'b'",
            tools=[Tool(started), Tool(hold)],
            level=level,
            budget=Budget(wall_clock=100),
        )
        assert b.ok, b.error

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_b)
        try:
            with anyio.fail_after(60):
                await b_started.wait()
            # The host's cgroup places, and the names of B's cgroup and directory.
            needles = {"cgroup mount": "/sys/fs/cgroup"}
            for i, base in enumerate(hierarchy().bases()):
                needles[f"the runs' cgroups ({i})"] = str(base)
            needles["a run's cgroup"] = f"{CGROUP_PREFIX}{os.getpid()}-"
            # B's working directory as the host names it (at confined, B and A both
            # name theirs /tmp/work), and every other the host made so far (a pool's).
            names = {
                Path(d).name
                for base in workdir_bases()
                for d in glob.glob(f"{glob.escape(base)}/{WORKDIR_PREFIX}*")
            }
            assert level is Level.CONFINED or Path(other[0]).name in names
            for i, name in enumerate(sorted(names)):
                needles[f"a working directory of the host's ({i})"] = name
            # A host path no child is given (the host's side of the library).
            needles["the host's package"] = str(Path(sandbox.__file__).parent) + os.sep
            if level is Level.CONFINED:  # where the host has what the view places
                # (A cold runner's interpreter lists msgspec's extension by its file on
                # the host in its table of extension modules: the README says so.)
                placed = (runner,) if spawn is Spawn.COLD else (runner, msgspec)
                for package in placed:
                    needles[f"{package.__name__}'s place on the host"] = str(
                        Path(package.__file__ or "").parent
                    )
            a = await sandbox.run(
                program(needles, host_pids()), level=level, budget=Budget(wall_clock=90)
            )
            walked.append(a)
        finally:
            held.set()
    (a,) = walked
    assert a.ok, a.error
    found, visited = a.value
    assert visited > 10_000  # the walk went through the runner's whole heap
    assert found == [], "\n".join(found)
