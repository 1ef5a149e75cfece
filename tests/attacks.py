"""Code that attacks another process, for the programs the tests run: each function it
defines raises OSError where the attack is refused."""

from __future__ import annotations

__all__ = ["ATTEMPT", "OWN_CHILD", "tracing"]


def tracing(pid: int) -> str:
    """Definitions (at column 0) of ``ptrace_attach()``, ``read_mem()`` and
    ``process_vm_readv()``, three ways of tracing process ``pid``."""
    return f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def ptrace_attach():
    if libc.ptrace(16, {pid}, 0, 0) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, {pid}, 0, 0)  # PTRACE_DETACH
def read_mem():
    with open("/proc/{pid}/mem", "rb") as f:
        f.read(1)
def process_vm_readv():
    buffer = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 8)
    remote = (ctypes.c_void_p * 2)(4096, 8)
    if libc.process_vm_readv({pid}, local, 1, remote, 1, 0) < 0:
        raise OSError(ctypes.get_errno(), "process_vm_readv")
"""


#: Signals the program's own child (forked, waiting), and records it in ``RESULTS`` (the
#: runner-level tests' dictionary): ``own_child`` the call, ``own_child_status`` its end.
OWN_CHILD = """
attempt("self", os.kill, os.getpid(), 0)
pid = os.fork()
if pid == 0:
    signal.pause()
    os._exit(0)
attempt("own_child", os.kill, pid, signal.SIGKILL)
RESULTS["own_child_status"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
"""


#: ``attempt(call, *args)``: what ``call(*args)`` did, ``"ok"`` or its OSError's class name.
ATTEMPT = """
def attempt(call, *args):
    try:
        call(*args)
    except OSError as exc:
        return type(exc).__name__
    return "ok"
"""
