"""Executables a program can write: tiny static x86_64 ELF files, built here byte by byte.

Each is one ``PT_LOAD`` segment holding a few instructions, with no interpreter and no
library: it runs wherever execution is allowed, and shows by its exit status that it did.
"""

from __future__ import annotations

import platform
import struct

import pytest

__all__ = ["EXIT_CODE", "euid_probe", "exit_probe", "needs_x86_64"]

#: The status :func:`exit_probe` exits with: a run of it, told from a loader's failure.
EXIT_CODE = 42

needs_x86_64 = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the program-written executables are x86_64 code"
)


def _elf(code: bytes) -> bytes:
    """A static x86_64 executable whose entry point is ``code``."""
    base = 0x400000
    entry = base + 64 + 56
    header = struct.pack(
        "<4sBBBBB7xHHIQQQIHHHHHH",
        *(b"\x7fELF", 2, 1, 1, 0, 0),  # 64-bit, little-endian, ELF version 1, System V
        *(2, 0x3E, 1, entry, 64, 0, 0),  # executable, x86_64; the program header follows
        *(64, 56, 1, 0, 0, 0),
    )
    size = 64 + 56 + len(code)
    program = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)  # R+X
    return header + program + code


def euid_probe() -> bytes:
    """Exits with the low byte of its effective uid (0: it ran as root; 254: as nobody)."""
    return _elf(bytes.fromhex("b86b0000000f0589c7b83c0000000f05"))  # geteuid; exit(eax)


def exit_probe() -> bytes:
    """Exits with :data:`EXIT_CODE`."""
    return _elf(bytes.fromhex(f"bf{EXIT_CODE:02x}000000b83c0000000f05"))  # exit(EXIT_CODE)
