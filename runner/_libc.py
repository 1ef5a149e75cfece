"""The C library, for the few system calls the confined level's walls need from ctypes."""

from __future__ import annotations

import ctypes
import errno
import functools
import os

__all__ = ["libc", "machine"]


@functools.cache
def libc() -> ctypes.CDLL:
    """One handle on the C library, with the prototypes the walls call through.

    Raises:
        OSError: no C library with these functions could be loaded (ENOTSUP).
    """
    try:
        lib = ctypes.CDLL(None, use_errno=True)
        c_str, c_ulong, c_int = ctypes.c_char_p, ctypes.c_ulong, ctypes.c_int
        lib.unshare.argtypes = [c_int]
        lib.mount.argtypes = [c_str, c_str, c_str, c_ulong, c_str]
        lib.umount2.argtypes = [c_str, c_int]
        lib.prctl.argtypes = [c_int, c_ulong, c_ulong, c_ulong, c_ulong]
        lib.prctl.restype = c_int
        lib.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.syscall.restype = ctypes.c_long
    except (OSError, AttributeError) as exc:
        raise OSError(errno.ENOTSUP, f"no usable C library ({exc})") from exc
    return lib


def machine() -> str:
    """The kernel's name for this architecture (``x86_64``, ``aarch64``, ...)."""
    name = os.uname().machine
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)
