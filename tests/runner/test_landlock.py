"""Landlock: the filesystem view, TCP and the process scope, tried for real.

Every test restricts a fresh ``python -I -S`` child, never the test process. The child tries
each access once before :func:`runner._landlock.restrict` (which must succeed, or the test
proves nothing) and once after, and prints what happened as JSON. The interpreter itself
needs its prefixes, the repository and msgspec's directory: they are passed read-only, and the
test's files live in a temporary directory outside all of them.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys
import sysconfig
import textwrap
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner import _landlock
from tests.attacks import OWN_CHILD, tracing
from tests.executables import EXIT_CODE, exit_probe, needs_x86_64
from tests.host import skipif_host_cannot

from .helpers import MSGSPEC_DIR, ROOT

ABI = _landlock.abi_version()
TIMEOUT = 60
EACCES = errno.errorcode[errno.EACCES]
EPERM = errno.errorcode[errno.EPERM]


def needs_abi(version: int, what: str) -> pytest.MarkDecorator:
    """Skip unless the kernel's Landlock ABI is at least ``version``, saying why."""
    return pytest.mark.skipif(
        version > ABI,
        reason=f"{what} needs Landlock ABI >= {version}; this kernel has "
        + (f"ABI {ABI}" if ABI else "no Landlock"),
    )


pytestmark = skipif_host_cannot(ABI < 1, "restrict a process with Landlock: this kernel has none")

#: What the interpreter needs to keep running (and importing) after restrict().
INTERPRETER = sorted(
    {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"],
        str(ROOT),
        MSGSPEC_DIR,
    }
)


@dataclass(frozen=True)
class Tree:
    """The test's files: what is allowed, how, and what is not."""

    base: Path
    ro: Path  # a read-only directory holding data.txt
    rw: Path  # a read-write directory
    ro_file: Path  # a file allowed read-only by a rule on the file itself
    rw_file: Path  # a file allowed read-write by a rule on the file itself
    canary: Path  # a file no rule covers

    @property
    def read_only(self) -> list[str]:
        return [*INTERPRETER, str(self.ro), str(self.ro_file)]

    @property
    def read_write(self) -> list[str]:
        return [str(self.rw), str(self.rw_file)]


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    for allowed in INTERPRETER:
        if tmp_path.resolve().is_relative_to(Path(allowed).resolve()):
            pytest.skip(f"the temporary directory is inside {allowed}, which must stay readable")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "data.txt").write_text("data")
    (tmp_path / "rw").mkdir()
    (tmp_path / "ro_file.txt").write_text("ro file")
    (tmp_path / "rw_file.txt").write_text("rw file")
    (tmp_path / "canary.txt").write_text("secret")
    return Tree(
        base=tmp_path,
        ro=tmp_path / "ro",
        rw=tmp_path / "rw",
        ro_file=tmp_path / "ro_file.txt",
        rw_file=tmp_path / "rw_file.txt",
        canary=tmp_path / "canary.txt",
    )


_PRELUDE = """\
import ctypes, errno, json, os, signal, socket, sys
sys.path[:0] = {path!r}
from runner import _landlock

RESULTS = {{}}


def attempt(name, action, *args):
    try:
        value = action(*args)
    except OSError as exc:
        RESULTS[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    else:
        RESULTS[name] = value if isinstance(value, str) else "ok"


def read(path):
    with open(path) as f:
        return f.read()


def append(path, text="+"):
    with open(path, "a") as f:
        f.write(text)


def create(path, text="new"):
    with open(path, "x") as f:
        f.write(text)


def connect(address, family=socket.AF_INET):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(address)


def bind(port):
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def no_new_privs():
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return str(prctl(39, 0, 0, 0, 0))  # PR_GET_NO_NEW_PRIVS


def restrict(read_only={read_only!r}, read_write={read_write!r}, list_only={list_only!r}):
    RESULTS["abi"] = _landlock.restrict(read_only, read_write, list_only)

"""


def run_child(
    body: str,
    *,
    read_only: Sequence[str] = (),
    read_write: Sequence[str] = (),
    list_only: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``body`` in a fresh ``python -I -S`` whose ``restrict()`` allows the given paths,
    and return the RESULTS it printed."""
    code = _PRELUDE.format(
        path=[str(ROOT), MSGSPEC_DIR],
        read_only=list(read_only),
        read_write=list(read_write),
        list_only=list(list_only),
    )
    code += textwrap.dedent(body) + "\nprint(json.dumps(RESULTS))\n"
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return results


def test_abi_version_is_reported() -> None:
    """abi_version() is the kernel's ABI, a positive int here (0 would have skipped)."""
    assert isinstance(ABI, int)
    assert ABI >= 1
    assert _landlock.abi_version() == ABI


@pytest.mark.parametrize(
    ("arch", "header"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        ("aarch64", "/usr/include/asm-generic/unistd.h"),
    ],
)
def test_syscall_numbers_match_the_installed_kernel_headers(arch: str, header: str) -> None:
    """landlock_create_ruleset, landlock_add_rule and landlock_restrict_self are 444, 445 and
    446, as the kernel's uapi headers (where installed) say for each architecture."""
    path = Path(header)
    if not path.exists():
        pytest.skip(f"{header} is not installed here")
    text = path.read_text()
    names = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
    found = []
    for name in names:
        match = re.search(rf"^#define __NR_{name}\s+(\d+)\s*$", text, re.MULTILINE)
        assert match is not None, f"{name} is not in {header}"
        found.append(int(match[1]))
    assert tuple(found) == _landlock._SYSCALLS[arch] == (444, 445, 446)


def test_restrict_returns_the_abi_it_used(tree: Tree) -> None:
    """restrict() returns the kernel's ABI capped at KNOWN_ABI and sets no_new_privs."""
    body = """
    attempt("nnp_before", no_new_privs)
    restrict()
    attempt("nnp_after", no_new_privs)
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["abi"] == min(ABI, _landlock.KNOWN_ABI)
    assert results["nnp_after"] == "1"


def test_a_file_outside_the_allowed_paths_cannot_be_read(tree: Tree) -> None:
    """A canary file no rule covers reads before restrict() and raises PermissionError
    (EACCES) after; its directory can no longer be listed either."""
    body = f"""
    canary, base = {str(tree.canary)!r}, {str(tree.base)!r}
    attempt("read_before", read, canary)
    attempt("list_before", os.listdir, base)
    restrict()
    attempt("read_after", read, canary)
    attempt("list_after", os.listdir, base)
    try:
        open(canary)
    except PermissionError:
        RESULTS["exception"] = "PermissionError"
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["read_before"] == "secret"
    assert results["list_before"] == "ok"
    assert results["read_after"] == EACCES
    assert results["list_after"] == EACCES
    assert results["exception"] == "PermissionError"


def test_a_read_only_path_can_be_read_but_not_changed(tree: Tree) -> None:
    """Under a read-only directory files read and list, but cannot be written, created,
    removed or (ABI >= 3) truncated."""
    body = f"""
    ro = {str(tree.ro)!r}
    data = os.path.join(ro, "data.txt")
    attempt("append_before", append, data, "")
    restrict()
    attempt("read", read, data)
    attempt("list", lambda: ",".join(os.listdir(ro)))
    attempt("append", append, data)
    attempt("create", create, os.path.join(ro, "new.txt"))
    attempt("mkdir", os.mkdir, os.path.join(ro, "sub"))
    attempt("unlink", os.unlink, data)
    attempt("truncate", os.truncate, data, 0)
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["append_before"] == "ok"
    assert results["read"] == "data"
    assert results["list"] == "data.txt"
    for action in ("append", "create", "mkdir", "unlink"):
        assert results[action] == EACCES, action
    if ABI >= 3:
        assert results["truncate"] == EACCES
    assert tree.ro.joinpath("data.txt").read_text() == "data"


def test_a_read_write_path_allows_everything_beneath_it(tree: Tree) -> None:
    """Under a read-write directory files can be created, written, read back, truncated,
    renamed and removed, and directories made and removed."""
    body = f"""
    rw = {str(tree.rw)!r}
    path = os.path.join(rw, "f.txt")
    restrict()
    attempt("create", create, path, "hello")
    attempt("append", append, path, " world")
    attempt("read", read, path)
    attempt("mkdir", os.mkdir, os.path.join(rw, "d"))
    attempt("rename", os.rename, path, os.path.join(rw, "d", "g.txt"))
    attempt("truncate", os.truncate, os.path.join(rw, "d", "g.txt"), 1)
    attempt("read_truncated", read, os.path.join(rw, "d", "g.txt"))
    attempt("unlink", os.unlink, os.path.join(rw, "d", "g.txt"))
    attempt("rmdir", os.rmdir, os.path.join(rw, "d"))
    attempt("escape", os.rename, os.path.join(rw), {str(tree.base / "moved")!r})
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["read"] == "hello world"
    assert results["read_truncated"] == "h"
    for action in ("create", "append", "mkdir", "rename", "truncate", "unlink", "rmdir"):
        assert results[action] == "ok", action
    assert results["escape"] in (EACCES, errno.errorcode[errno.EXDEV])
    assert list(tree.rw.iterdir()) == []


def test_a_rule_on_a_file_covers_that_file_only(tree: Tree) -> None:
    """A path that is a file gets file rights only (the kernel refuses directory rights on
    it): the read-only file reads but does not write, the read-write file also appends, and
    their siblings stay out of reach."""
    body = f"""
    ro_file, rw_file = {str(tree.ro_file)!r}, {str(tree.rw_file)!r}
    restrict()
    attempt("ro_read", read, ro_file)
    attempt("ro_append", append, ro_file)
    attempt("rw_append", append, rw_file)
    attempt("rw_read", read, rw_file)
    attempt("sibling_read", read, {str(tree.canary)!r})
    attempt("sibling_create", create, {str(tree.base / "new.txt")!r})
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["ro_read"] == "ro file"
    assert results["ro_append"] == EACCES
    assert results["rw_append"] == "ok"
    assert results["rw_read"] == "rw file+"
    assert results["sibling_read"] == EACCES
    assert results["sibling_create"] == EACCES


def test_paths_that_do_not_exist_are_skipped(tree: Tree) -> None:
    """Missing paths (and paths under a file) in either list are skipped, grant nothing, and
    do not stop restrict()."""
    missing = tree.base / "missing"
    body = f"""
    restrict()
    attempt("create_missing", os.mkdir, {str(missing)!r})
    attempt("read", read, {str(tree.ro / "data.txt")!r})
    """
    results = run_child(
        body,
        read_only=[*tree.read_only, str(missing), str(tree.canary / "below")],
        read_write=[str(missing / "deeper"), *tree.read_write],
    )
    assert results["abi"] >= 1
    assert results["create_missing"] == EACCES
    assert results["read"] == "data"


def test_children_inherit_the_restriction(tree: Tree) -> None:
    """A forked child is as restricted as its parent, and a program outside the allowed
    paths cannot be executed."""
    if any(Path("/bin/true").resolve().is_relative_to(Path(p).resolve()) for p in INTERPRETER):
        pytest.skip("/bin/true lies under a path the interpreter needs")
    body = f"""
    import subprocess
    restrict()
    pid = os.fork()
    if pid == 0:
        try:
            read({str(tree.canary)!r})
        except PermissionError:
            os._exit(13)
        os._exit(0)
    RESULTS["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    attempt("exec", subprocess.run, ["/bin/true"])
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["fork"] == 13
    assert results["exec"] == EACCES


@needs_x86_64
def test_what_a_read_write_path_holds_cannot_be_executed(tree: Tree) -> None:
    """An executable under a read-write directory (or a read-write file) runs before
    restrict() and not after, whatever its mode and its mount; a read-only one still runs."""
    for path in (tree.rw / "true", tree.rw_file, tree.ro / "true", tree.ro_file):
        path.write_bytes(exit_probe())
        path.chmod(0o755)
    paths = {
        "rw_dir": str(tree.rw / "true"),
        "rw_file": str(tree.rw_file),
        "ro_dir": str(tree.ro / "true"),
        "ro_file": str(tree.ro_file),
    }
    body = f"""
    import subprocess
    def run(path):
        return str(subprocess.run([path]).returncode)
    for name, path in {paths!r}.items():
        attempt("before_" + name, run, path)
    restrict()
    for name, path in {paths!r}.items():
        attempt(name, run, path)
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert {results[f"before_{name}"] for name in paths} == {str(EXIT_CODE)}
    assert (results["rw_dir"], results["rw_file"]) == (EACCES, EACCES)
    assert (results["ro_dir"], results["ro_file"]) == (str(EXIT_CODE), str(EXIT_CODE))


def test_a_list_only_path_can_be_walked_and_nothing_under_it_opened(tree: Tree) -> None:
    """Under a list-only directory, directories can be listed (and walked), and no file can
    be read, written or executed."""
    (tree.ro / "sub").mkdir()
    (tree.ro / "sub" / "deeper.txt").write_text("deeper")
    body = f"""
    ro = {str(tree.ro)!r}
    restrict(read_only=[p for p in {INTERPRETER!r}], list_only=[ro])
    attempt("list", lambda: ",".join(sorted(os.listdir(ro))))
    attempt("list_sub", lambda: ",".join(os.listdir(os.path.join(ro, "sub"))))
    attempt("read", read, os.path.join(ro, "data.txt"))
    attempt("read_deeper", read, os.path.join(ro, "sub", "deeper.txt"))
    attempt("append", append, os.path.join(ro, "data.txt"))
    attempt("create", create, os.path.join(ro, "new.txt"))
    """
    results = run_child(body)
    assert results["list"] == "data.txt,sub"
    assert results["list_sub"] == "deeper.txt"
    for action in ("read", "read_deeper", "append", "create"):
        assert results[action] == EACCES, action


@needs_abi(4, "TCP restrictions")
def test_tcp_connect_and_bind_are_denied(tree: Tree) -> None:
    """After restrict(), connecting to a TCP port the test listens on and binding any TCP
    port (0 included) fail with EACCES; both worked before."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        body = f"""
        attempt("connect_before", connect, ("127.0.0.1", {port}))
        attempt("bind_before", bind, 0)
        restrict()
        attempt("connect_after", connect, ("127.0.0.1", {port}))
        attempt("bind_any_after", bind, 0)
        attempt("bind_port_after", bind, {port + 1 if port < 65535 else port - 1})
        """
        results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["connect_before"] == "ok"
    assert results["bind_before"] == "ok"
    assert results["connect_after"] == EACCES
    assert results["bind_any_after"] == EACCES
    assert results["bind_port_after"] == EACCES


@needs_abi(6, "signal scoping")
def test_signals_to_processes_outside_the_domain_are_denied(tree: Tree) -> None:
    """After restrict(), a signal to the test process fails with EPERM, while the child can
    still signal itself and the children it forks inside the domain."""
    body = f"""
    attempt("outside_before", os.kill, {os.getpid()}, 0)
    restrict()
    attempt("outside_after", os.kill, {os.getpid()}, 0)
    attempt("outside_term", os.kill, {os.getpid()}, signal.SIGTERM)
    """
    body = textwrap.dedent(body) + OWN_CHILD
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["outside_before"] == "ok"
    assert results["outside_after"] == EPERM
    assert results["outside_term"] == EPERM
    assert results["self"] == "ok"
    assert results["own_child"] == "ok"
    assert results["own_child_status"] == -9


@needs_abi(6, "abstract unix socket scoping")
def test_abstract_unix_sockets_outside_the_domain_are_unreachable(tree: Tree) -> None:
    """After restrict(), connecting to an abstract unix socket the test listens on fails with
    EPERM; it worked before."""
    name = f"\0sandbox-landlock-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(name)
        server.listen()
        body = f"""
        attempt("before", connect, {name!r}, socket.AF_UNIX)
        restrict()
        attempt("after", connect, {name!r}, socket.AF_UNIX)
        """
        results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["before"] == "ok"
    assert results["after"] == EPERM


def test_a_bare_string_is_refused_before_anything_happens(tree: Tree) -> None:
    """restrict("/usr", ...) raises TypeError (a string is a sequence of one-letter paths) and
    leaves the process unrestricted."""
    body = f"""
    for args in (({str(tree.ro)!r}, []), ([], {str(tree.rw)!r})):
        try:
            _landlock.restrict(*args)
        except TypeError:
            RESULTS["error"] = RESULTS.get("error", "") + "TypeError;"
    attempt("read", read, {str(tree.canary)!r})
    attempt("nnp", no_new_privs)
    """
    results = run_child(body)
    assert results["error"] == "TypeError;TypeError;"
    assert results["read"] == "secret"
    assert results["nnp"] == "0"


@pytest.mark.skipif(ABI >= 8, reason="ABI >= 8 restricts every thread (TSYNC) instead")
def test_a_process_with_other_threads_is_refused(tree: Tree) -> None:
    """With another thread running (which ABI < 8 would leave unconfined), restrict() raises
    RuntimeError and changes nothing."""
    body = f"""
    import threading
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        restrict()
    except RuntimeError as exc:
        RESULTS["error"] = "threads" in str(exc)
    stop.set()
    thread.join()
    attempt("read", read, {str(tree.canary)!r})
    attempt("nnp", no_new_privs)
    """
    results = run_child(body, read_only=tree.read_only, read_write=tree.read_write)
    assert results["error"] is True
    assert results["read"] == "secret"
    assert results["nnp"] == "0"


def test_an_unavailable_landlock_raises_a_clear_oserror() -> None:
    """When the kernel offers no Landlock, restrict() raises OSError(EOPNOTSUPP) carrying the
    reason, and abi_version() is 0."""
    body = """
    _landlock._probe = lambda: (0, "the kernel has no Landlock (test)")
    RESULTS["abi"] = _landlock.abi_version()
    try:
        _landlock.restrict([], [])
    except OSError as exc:
        RESULTS["errno"] = errno.errorcode[exc.errno]
        RESULTS["message"] = str(exc)
    """
    results = run_child(body)
    assert results["abi"] == 0
    assert results["errno"] in ("EOPNOTSUPP", "ENOTSUP")
    assert "unavailable" in results["message"]
    assert "(test)" in results["message"]


@needs_abi(_landlock.SCOPE_ABI, "signal scoping")
def test_scope_signals_keeps_signals_and_tracing_inside_and_files_as_they_were(
    tree: Tree,
) -> None:
    """After scope_signals() (the ``process`` level's wall), neither a signal, by any of the
    calls that send one, nor a trace (``ptrace``, ``/proc/<pid>/mem``, ``process_vm_readv``)
    reaches the test process; the child still signals itself and its own children, and
    reads and writes files as before."""
    host = os.getpid()
    body = f"""
    os.setsid()  # as a runner is: out of the test's process group
    attempt("before", os.kill, {host}, 0)
    RESULTS["abi"] = _landlock.scope_signals()
    attempt("nnp", no_new_privs)
    attempt("kill", os.kill, {host}, 0)
    attempt("killpg", os.killpg, os.getpgid({host}), 0)
    pidfd = os.pidfd_open({host})
    attempt("pidfd_send_signal", signal.pidfd_send_signal, pidfd, 0)
    proc_dir = os.open("/proc/{host}", os.O_RDONLY | os.O_DIRECTORY)
    attempt("proc_dir_send_signal", signal.pidfd_send_signal, proc_dir, 0)
    attempt("mem", read_mem)
    attempt("process_vm_readv", process_vm_readv)
    attempt("ptrace", ptrace_attach)
    attempt("cmdline", lambda: read("/proc/{host}/cmdline") and "readable")
    attempt("read", read, {str(tree.canary)!r})
    attempt("write", create, {str(tree.rw / "after-scope.txt")!r})
    """
    body = tracing(host) + textwrap.dedent(body) + OWN_CHILD
    results = run_child(body)
    assert results["before"] == "ok"
    assert results["abi"] == min(ABI, _landlock.KNOWN_ABI)
    assert results["nnp"] == "1"
    for name in (
        "kill",
        "killpg",
        "pidfd_send_signal",
        "proc_dir_send_signal",
        "ptrace",
        "process_vm_readv",
    ):
        assert results[name] == EPERM, name
    assert results["mem"] in (EACCES, EPERM)
    assert results["cmdline"] == "readable"  # what the process level does not hide
    assert results["self"] == "ok"
    assert results["own_child"] == "ok"
    assert results["own_child_status"] == -9
    assert results["read"] == "secret"
    assert results["write"] == "ok"
    assert (tree.rw / "after-scope.txt").read_text() == "new"


def test_signal_scope_gap_names_what_the_kernel_lacks() -> None:
    """signal_scope_gap() is None where scope_signals() can work; on a kernel without
    Landlock or with an older ABI it says why, and scope_signals() raises EOPNOTSUPP with
    that reason, changing nothing."""
    assert (_landlock.signal_scope_gap() is None) == (ABI >= _landlock.SCOPE_ABI)
    body = """
    for abi in (0, 5):
        _landlock._probe = lambda abi=abi: (abi, "no Landlock (test)" if not abi else "")
        RESULTS[f"gap{abi}"] = _landlock.signal_scope_gap()
        try:
            _landlock.scope_signals()
        except OSError as exc:
            RESULTS[f"errno{abi}"] = errno.errorcode[exc.errno]
    attempt("nnp", no_new_privs)
    """
    results = run_child(body)
    assert results["gap0"] == "no Landlock (test)"
    assert "ABI 5" in results["gap5"]
    assert "ABI 6" in results["gap5"]
    assert results["errno0"] in ("EOPNOTSUPP", "ENOTSUP")
    assert results["errno5"] in ("EOPNOTSUPP", "ENOTSUP")
    assert results["nnp"] == "0"
