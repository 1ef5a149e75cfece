"""What this host lets a runner build of the ``confined`` level's walls, and of the
``process`` level's one, asked of the kernel.

The host's side (``sandbox doctor``, the level's availability) asks here rather than
looking into the modules that build the walls: one probe, one report.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Walls", "probe_walls"]


@dataclass(frozen=True, slots=True)
class Walls:
    """What the kernel offers the confined level here, and the process level.

    Attributes:
        namespaces: for each namespace the level creates (``user``, ``mount``, ``net``,
            ``ipc``, ``uts``, ``pid``, ``cgroup``), None if it can be made, else why not.
        landlock_abi: the Landlock ABI version (0: none).
        seccomp: None if a seccomp filter can be installed, else why not.
        signal_scope: the process level's wall (no signal or trace out of a run:
            :func:`runner._landlock.scope_signals`): None if it can be put up, else why not.
    """

    namespaces: dict[str, str | None]
    landlock_abi: int
    seccomp: str | None
    signal_scope: str | None

    def gaps(self) -> dict[str, str]:
        """Each wall that cannot be built here, with the reason."""
        gaps = {f"{name} namespace": why for name, why in self.namespaces.items() if why}
        if self.landlock_abi < 1:
            gaps["landlock"] = "the kernel has no Landlock (or it is disabled)"
        if self.seccomp is not None:
            gaps["seccomp"] = self.seccomp
        return gaps


def probe_walls() -> Walls:
    """Ask the kernel (namespaces are tried in a throwaway child; nothing here changes)."""
    from . import _landlock, _namespaces, _seccomp

    return Walls(
        _namespaces.probe(),
        _landlock.abi_version(),
        _seccomp.supported(),
        _landlock.signal_scope_gap(),
    )
