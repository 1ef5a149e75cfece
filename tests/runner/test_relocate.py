"""Where a confined view holds the runner's own code (:mod:`runner._relocate`), and the
view's placed paths (:mod:`runner._namespaces`). What a confined program then reads of
itself is checked end to end in ``tests/sandbox/test_program_view.py``."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from runner import _namespaces, _relocate
from runner._relocate import LIB


def module(name: str, file: str | None) -> types.ModuleType:
    made = types.ModuleType(name)
    if file is not None:
        made.__file__ = file
    return made


def test_places_holds_what_was_loaded_from_beside_the_runners_packages() -> None:
    """Each top-level package or module loaded from a directory that holds one of the
    runner's packages goes to ``/sandbox/lib/<name>``, from the innermost such directory
    (a virtual environment inside the checkout); the standard library and submodules
    are not places of their own."""
    checkout, venv = "/src/app", "/src/app/.venv/lib/python3.11/site-packages"
    loaded = {
        "protocol": module("protocol", f"{checkout}/protocol/__init__.py"),
        "protocol._calls": module("protocol._calls", f"{checkout}/protocol/_calls.py"),
        "runner": module("runner", f"{checkout}/runner/__init__.py"),
        "msgspec": module("msgspec", f"{venv}/msgspec/__init__.py"),
        "typing_extensions": module("typing_extensions", f"{venv}/typing_extensions.py"),
        "json": module("json", "/usr/lib/python3.11/json/__init__.py"),
        "sys": module("sys", None),
    }
    assert _relocate.places(loaded) == {
        f"{checkout}/protocol": f"{LIB}/protocol",
        f"{checkout}/runner": f"{LIB}/runner",
        f"{venv}/msgspec": f"{LIB}/msgspec",
        f"{venv}/typing_extensions.py": f"{LIB}/typing_extensions.py",
    }


def test_places_of_this_process_are_the_runners_packages() -> None:
    """Here: the three packages at least, each a directory that exists, each at its name."""
    found = _relocate.places()
    for name in _relocate.PACKAGES:
        (source,) = [s for s, inside in found.items() if inside == f"{LIB}/{name}"]
        assert os.path.isdir(source)
        assert sys.modules[name].__file__ == os.path.join(source, "__init__.py")


def test_relocate_code_names_every_function_by_its_place(tmp_path: Path) -> None:
    """Functions defined in a placed directory, nested ones and closures made before and
    after included, get code named by the place; others are left alone; running them
    still works."""
    package = tmp_path / "pkg"
    package.mkdir()
    source = package / "mod.py"
    source.write_text(
        "def outer():\n"
        "    def inner():\n"
        "        return 1\n"
        "    return inner\n"
        "class K:\n"
        "    def method(self):\n"
        "        return 2\n"
        "made_before = outer()\n"
    )
    spec = importlib.util.spec_from_file_location("relocate_probe_mod", source)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def elsewhere() -> int:
        return 3

    changed = _relocate.relocate_code({str(package): f"{LIB}/pkg"})
    assert changed >= 2  # outer and method (an inner may come first, or with outer)
    place = f"{LIB}/pkg/mod.py"
    assert mod.outer.__code__.co_filename == place
    assert mod.made_before.__code__.co_filename == place
    assert mod.outer().__code__.co_filename == place  # made after: from the new consts
    assert mod.K.method.__code__.co_filename == place
    assert (mod.outer()(), mod.K().method(), mod.made_before()) == (1, 2, 1)
    assert elsewhere.__code__.co_filename == __file__


@pytest.mark.parametrize(
    ("placed", "message"),
    [
        ([("relative", "/sandbox/lib/x")], "not an absolute path"),
        ([("/nowhere-at-all", "/sandbox/lib/x")], "No such file"),
        ([("/usr", "/usr/lib/x")], "within the view's read-only paths"),
        ([("/usr",)], "not a (host path, path inside) pair"),
        ([("/usr", "/proc/x")], "cannot be bound"),
    ],
    ids=["relative", "missing", "inside-read-only", "not-a-pair", "proc"],
)
def test_a_bad_placed_path_is_refused(placed: list[tuple[str, ...]], message: str) -> None:
    """A placed path that cannot be bound is refused before anything changes, saying why."""
    with pytest.raises(ValueError, match="placed") as info:
        _namespaces._mounts(["/usr"], placed)
    assert message in str(info.value)


def test_a_placed_symbolic_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(ValueError, match="symbolic link"):
        _namespaces._mounts([], [(str(tmp_path / "link"), "/sandbox/lib/x")])


def test_placed_paths_are_bound_from_their_source() -> None:
    """A placed path is mounted at its path inside, from its host path, and keeps the
    stage apart from both."""
    here = os.path.dirname(_relocate.__file__)
    mounts = _namespaces._mounts(["/usr"], [(here, f"{LIB}/runner")])
    placed = mounts[f"{LIB}/runner"]
    assert (placed.source, placed.is_dir, placed.link) == (here, True, None)
    assert mounts["/usr"].source == "/usr"
    assert set(_namespaces._taken(mounts, None)) == {"/usr", f"{LIB}/runner", here}


#: In a fresh interpreter: relocate as the zygote does, then what a ``process`` child
#: reads (source through the loaders, a submodule not imported before), then what a
#: confined runner keeps once it enters its view (without a view: only what it names).
AS_THE_ZYGOTE = """
import json, linecache, os, sys
sys.path[:0] = sys.argv[1:3]
import runner
from runner import _main, _relocate
_relocate.relocate()
code = _main.serve.__code__
seen = {
    "file": _main.__file__,
    "code": code.co_filename,
    "line": linecache.getline(code.co_filename, code.co_firstlineno, vars(_main)),
}
import runner._probe
seen["later"] = runner._probe.__file__
seen["extension"] = _relocate._hook(_relocate.LIB + "/msgspec").find_spec("msgspec._core").origin
_relocate.enter_view()
try:
    _relocate._hook(_relocate.LIB + "/msgspec")
    seen["hook after"] = "a finder"
except ImportError:
    seen["hook after"] = "ImportError"
seen["path"] = sys.path
seen["kept"] = [_relocate._relocated, _relocate._view, dict(_relocate._HOST)]
print(json.dumps(seen))
"""


def test_relocated_code_reads_its_files_on_the_host_until_the_view() -> None:
    """After :func:`relocate`, the runner's modules and code are named by their places;
    while the process is not confined, their source is read on the host and submodules
    not imported before are found there; :func:`enter_view` leaves ``sys.path`` naming
    the places and keeps nothing that names the host's directories."""
    import json
    import subprocess

    import msgspec

    root = str(Path(_relocate.__file__).resolve().parents[1])
    site = str(Path(msgspec.__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", AS_THE_ZYGOTE, root, site],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["file"] == seen["code"] == f"{LIB}/runner/_main.py"
    assert seen["line"].startswith("def serve(")
    assert seen["later"] == f"{root}/runner/_probe.py"  # at process, named as it is
    assert seen["extension"].startswith(f"{site}/msgspec/_core.")  # any kind of module
    assert seen["hook after"] == "ImportError"  # in the view, the places are the files
    assert LIB in seen["path"]
    assert root not in seen["path"]
    assert site not in seen["path"]
    assert seen["kept"] == [{}, None, {}]


def test_the_program_loader_of_this_interpreter_resolves_in_the_view() -> None:
    """The view holds the program loader ``sys.executable`` names (its ``PT_INTERP``), and
    every link on the way to it, as :func:`runner._namespaces.python_read_only` gives them."""
    real = os.path.realpath(sys.executable)
    loader = _namespaces._elf_interpreter(real)
    assert loader is not None
    assert os.path.exists(loader)
    chain = _namespaces._resolvable(loader)
    assert chain
    assert os.path.realpath(chain[-1]) == os.path.realpath(loader)
    assert not os.path.islink(chain[-1])
    view = _namespaces.python_read_only(())
    for path in chain:
        assert any(path == p or path.startswith(p + "/") for p in view), (path, view)


def test_elf_interpreter_reads_only_elf_executables(tmp_path: Path) -> None:
    """Not an ELF file, a truncated one, an empty one: no loader, no error."""
    for name, data in [("text", b"#!/bin/sh\n"), ("short", b"\x7fELF\x02\x01"), ("empty", b"")]:
        (tmp_path / name).write_bytes(data)
        assert _namespaces._elf_interpreter(str(tmp_path / name)) is None
    assert _namespaces._elf_interpreter(str(tmp_path / "missing")) is None
