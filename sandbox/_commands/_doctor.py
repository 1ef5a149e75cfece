"""``sandbox doctor``: what this host can enforce, level by level, what it lacks, and how
to get what it lacks.

The walls (namespaces, Landlock, seccomp) are probed by the runner's own probe, the cgroups
by the layer that makes them; what each level then refuses (:func:`sandbox.unenforceable`)
or enforces only by a weaker substitute (:func:`sandbox.substitutes`) is the run engine's
word. This module adds the remedies: for each thing missing, what to change on the host
(a sysctl, a boot parameter, systemd's ``Delegate=``), read from the host's own settings
where they say which one is in the way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from .._errors import CgroupSettingError
from ._options import EXIT_OK

if TYPE_CHECKING:
    from .._children import Hierarchy

__all__ = ["doctor"]

#: Where the host's sysctls are (a test points this elsewhere).
_SYSCTL = Path("/proc/sys")
#: The root of the cgroup hierarchies.
_CGROUP = Path("/sys/fs/cgroup")


def _sysctl(name: str) -> str | None:
    """The value of sysctl ``name`` (``user.max_user_namespaces``), None if it has none."""
    try:
        return (_SYSCTL / name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def _persist(setting: str) -> str:
    return (
        f"as root, `sysctl -w {setting}`, and to keep it across reboots, the line "
        f"`{setting}` in a file of /etc/sysctl.d/"
    )


def user_namespace_remedy() -> str:
    """How to let an ordinary user make user namespaces here (the setting in the way)."""
    if _sysctl("user.max_user_namespaces") == "0":
        return _persist("user.max_user_namespaces=15000")
    if _sysctl("kernel.unprivileged_userns_clone") == "0":  # Debian's own switch
        return _persist("kernel.unprivileged_userns_clone=1")
    if _sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":  # Ubuntu 23.10+
        return (
            f"{_persist('kernel.apparmor_restrict_unprivileged_userns=0')}; or an AppArmor "
            f"profile that grants `userns,` to {os.path.realpath(sys.executable)}"
        )
    return (
        "a kernel built with CONFIG_USER_NS; in a container, a seccomp profile that allows "
        "unshare(2) and clone(2) with namespace flags (Docker: "
        "--security-opt seccomp=unconfined)"
    )


#: How to have a cgroup delegated to the host on the unified hierarchy (cgroup v2).
_DELEGATE = (
    "run the host in a systemd unit that delegates its cgroup (`systemd-run --scope -p "
    "Delegate=yes .venv/bin/sandbox ...`, with --user for an ordinary user, or "
    "`Delegate=yes` in the service that runs it): systemd 251 and later mark such a cgroup "
    "(trusted.delegate, user.delegate) and the host finds it; with an older systemd, or a "
    "cgroup delegated some other way, name it in SANDBOX_CGROUP. The host then moves its "
    "processes into sandbox-host below it and makes the runs' cgroups beside that"
)


def _v2_remedy(h: Hierarchy, cgroups: dict[str, str | None]) -> str | None:
    """How to give the runs what they lack on this cgroup v2 host (None: not v2)."""
    from .._children import CgroupV2

    if not isinstance(h, CgroupV2) or h.delegation is None:
        return None
    given = h.delegation
    top = given.cgroup
    if cgroups.get("freezer") is not None:
        return f"the runs' cgroups cannot be made under {h.parent} ({cgroups['freezer']}); " + (
            "check what is in the way there" if given.delegated else _DELEGATE
        )
    lacking = [c for c in ("memory", "pids") if cgroups.get(c) is not None]
    try:
        offered = (top / "cgroup.controllers").read_text().split()
    except OSError:
        offered = []
    unoffered = [c for c in lacking if c not in offered]
    if given.delegated and h.moved is not None and not unoffered:
        reasons = "; ".join(f"{c}: {cgroups[c]}" for c in lacking)
        return (
            f"{top} is delegated to the host and offered {' and '.join(lacking)}, but they "
            f"could not be enabled for the runs ({reasons}): {top}/cgroup.subtree_control "
            f"and {h.parent}/cgroup.subtree_control must be the host's to write"
        )
    if given.delegated:
        if h.moved is None:
            return (
                f"the host could not move the processes of {top} into {top}/sandbox-host "
                "(the reason is above): stop what keeps them there, or move them yourself "
                f"(for p in $(cat {top}/cgroup.procs); do echo $p > "
                f"{top}/sandbox-host/cgroup.procs; done), then start the host again"
            )
        return (
            f"{top} is delegated to the host, but its parent gives it no "
            f"{' or '.join(lacking)} controller (it is not in {top}/cgroup.controllers): "
            f"with systemd, delegate them to the unit (`Delegate={' '.join(lacking)}`, or "
            "`Delegate=yes`; for an ordinary user's manager, a drop-in "
            "/etc/systemd/system/user@.service.d/delegate.conf with `[Service]` and "
            f"`Delegate=cpu {' '.join(lacking)}`, then `systemctl daemon-reload` and a new "
            "login); for a container, enable them in its cgroup's parent"
        )
    if given.how.startswith("the machine's root cgroup"):
        return (
            f"the machine's root cgroup does not offer {' or '.join(lacking)} "
            "(/sys/fs/cgroup/cgroup.controllers): a cgroup v1 hierarchy holds them, or they "
            "are disabled; boot with the unified hierarchy alone (systemd.unified_cgroup_"
            f"hierarchy=1, or cgroup_no_v1={','.join(lacking)}) and without cgroup_disable="
        )
    return (
        f"the host's own cgroup ({top}) holds the host, and the kernel gives no controller "
        "to cgroups below one that holds processes; it is not delegated to the host "
        f"({given.how}), so the host moves nothing out of it. Give the host a delegated "
        f"cgroup: {_DELEGATE}. If {top} is in fact delegated to the host, say so: "
        f"SANDBOX_CGROUP={top}"
        + (
            f". Its parent does not offer it {' or '.join(unoffered)} either (they are not "
            f"in {top}/cgroup.controllers): the cgroup delegated to the host must be "
            "offered them (systemd's Delegate=yes does, where the machine's root cgroup "
            "has them)"
            if unoffered
            else ""
        )
    )


def _cgroup_remedy() -> str:
    """How to give this host per-run cgroups (root or not, cgroup v1 or v2), where the
    hierarchy itself says nothing more precise."""
    unified = (_CGROUP / "cgroup.controllers").exists()
    if os.geteuid() == 0:
        if unified:
            return f"on the unified hierarchy (cgroup v2), {_DELEGATE}"
        return (
            f"mount the cgroup v1 pids, freezer and memory hierarchies under {_CGROUP}, or "
            "boot with the unified hierarchy (systemd.unified_cgroup_hierarchy=1)"
        )
    if unified:
        return f"an ordinary user makes cgroups only in a subtree delegated to it: {_DELEGATE}"
    controllers = "pids freezer memory cpu cpuacct"
    return (
        "cgroup v1 is not delegated to ordinary users: as root, make this user a cgroup of "
        f"its own in each hierarchy (for c in {controllers}; do mkdir "
        f"{_CGROUP}/$c/sandbox-$USER; chown -R $USER {_CGROUP}/$c/sandbox-$USER; done) "
        "and start the host from a shell moved into them (echo $$ | tee "
        f"{_CGROUP}/{{{controllers.replace(' ', ',')}}}/sandbox-$USER/cgroup.procs); or boot "
        "with the unified hierarchy (systemd.unified_cgroup_hierarchy=1), where systemd "
        "delegates one"
    )


def remedies(
    namespaces: dict[str, str | None],
    landlock_abi: int,
    seccomp: str | None,
    cgroups: dict[str, str | None],
    own_uid: str | None,
    hierarchy: Hierarchy | None = None,
) -> dict[str, str]:
    """For each thing this host lacks, how to get it (nothing: it lacks nothing); for the
    cgroups, from what ``hierarchy`` (this host's) found where it says."""
    how: dict[str, str] = {}
    if namespaces.get("user") is not None:
        how["user namespace"] = user_namespace_remedy()
    for name, why in namespaces.items():
        if why is not None and name != "user":
            how[f"{name} namespace"] = (
                f"a kernel built with CONFIG_{name.upper()}_NS; in a container, one allowed "
                "to make namespaces"
            )
    if landlock_abi < 1:
        how["landlock"] = (
            "Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK, with landlock among "
            "the active security modules (/sys/kernel/security/lsm; the lsm= boot parameter)"
        )
    if seccomp is not None:
        how["seccomp"] = (
            "a kernel built with CONFIG_SECCOMP_FILTER; in a container, a seccomp profile "
            "that allows seccomp(2)"
        )
    if any(why is not None for why in cgroups.values()):
        remedy = None if hierarchy is None else _v2_remedy(hierarchy, cgroups)
        how["cgroups"] = (
            f"{remedy or _cgroup_remedy()}. Without them, memory is limited per process, not "
            "per run (see each level's substitutes)"
        )
    if own_uid is not None:
        how["a host uid of its own per run"] = (
            "run the host as root (it gives each confined run an unprivileged uid of its "
            "own); as an ordinary user every run is that user's uid, sharing its per-user "
            "kernel quotas"
        )
    return how


def _survivors(level_value: str, cgroups_ok: bool) -> str:
    """How the level ends every process a run started, here."""
    if level_value == "confined":
        pid_one = (
            "the run's PID namespace: its runner is PID 1, and when PID 1 dies the kernel "
            "kills every process of the namespace"
        )
        return f"the run's cgroups, and {pid_one}" if cgroups_ok else pid_one
    if cgroups_ok:
        return "the run's cgroups"
    return (
        "the runner's process tree: the runner and the zygote are subreapers, so every "
        "process the program starts stays in it, and it is killed until empty"
    )


def _outside(scope_gap: str | None) -> str:
    """Whether the process level keeps a run's signals and traces in (its Landlock scope)."""
    if scope_gap is None:
        return "yes (Landlock's signal scope)"
    return (
        f"no ({scope_gap}): the program can signal and trace every process of its user, "
        "the host's included, as at confined it cannot"
    )


def _others(seccomp_gap: str | None) -> str:
    """Whether the process level keeps a run off other processes' limits and scheduling,
    and off the calls that act on the whole machine."""
    if seccomp_gap is None:
        return "yes (a seccomp filter)"
    return (
        f"no ({seccomp_gap}): the program can change them for every process of its user, "
        "and, running as root, reboot the machine"
    )


def doctor(as_json: bool) -> int:
    """Print the report (as JSON with ``as_json``); the exit code (always 0)."""
    from runner import probe_walls

    from .._children import cgroup_support, hierarchy, uid_usable
    from .._engine import Level, cgroups_usable, confinement_gaps, substitutes, unenforceable

    walls = probe_walls()
    namespaces = walls.namespaces
    # The process level's wall: where the kernel cannot scope signals, why not.
    scope_gap = walls.signal_scope
    # A bad SANDBOX_CGROUP fails every run that needs the host's cgroups: said, not raised.
    h: Hierarchy | None
    try:
        h = hierarchy()
        cgroups = dict(cgroup_support())
        setting_error = None
    except CgroupSettingError as exc:  # the one error a probe raises
        h, setting_error = None, str(exc)
        cgroups = dict.fromkeys(("pids", "freezer", "memory"), setting_error)
    # Who a confined program is on the host: a uid of its own (None), or why not.
    own_uid = uid_usable()
    how = remedies(namespaces, walls.landlock_abi, walls.seccomp, cgroups, own_uid, h)
    if setting_error is not None:
        how["cgroups"] = setting_error  # what is wrong with it, and how to fix it
    cgroups_ok = setting_error is None and cgroups_usable()
    runs = h.describe() if h is not None else f"none: {setting_error}"
    # Whether a run that keeps every CPU busy leaves the host's timers on time, or why not.
    share_gap = setting_error if h is None else h.cpu_share_gap()
    if share_gap is not None:
        share_gap += (
            ": a run that keeps every CPU busy competes with the host for it as an equal, "
            "and a wall clock can fire late on a loaded machine"
        )

    def level_gaps(level: Level) -> tuple[dict[str, str], dict[str, str]]:
        """What ``level`` refuses here, and what it enforces by a substitute."""
        if setting_error is not None and level is not Level.IN_PROCESS:
            return {"every run": f"fails until the setting is fixed: {setting_error}"}, {}
        return unenforceable(level), substitutes(level)

    if as_json:
        # Each probe is `true` where it is available, else the reason it is not (a string).
        def available(reasons: dict[str, str | None]) -> dict[str, str | bool]:
            return {name: True if why is None else why for name, why in reasons.items()}

        report = {
            "namespaces": available(namespaces),
            "own_uid_per_run": True if own_uid is None else own_uid,
            "landlock_abi": walls.landlock_abi,
            "seccomp": True if walls.seccomp is None else walls.seccomp,
            "cgroups": available(cgroups),
            "cgroup_hierarchy": {
                "version": None if h is None else h.version,
                "runs": runs,
                **({} if h is None else h.details()),
                "host_cpu_share": True if share_gap is None else share_gap,
            },
            "levels": {
                level.value: {
                    "available": not confinement_gaps() if level is Level.CONFINED else True,
                    "unenforceable": level_gaps(level)[0],
                    "substitutes": level_gaps(level)[1],
                    **(
                        {
                            "missing_walls": confinement_gaps(),
                            "no_survivors": _survivors(level.value, cgroups_ok),
                        }
                        if level is not Level.IN_PROCESS
                        else {}
                    ),
                    **(
                        {
                            "no_signal_or_trace_outside": True if scope_gap is None else scope_gap,
                            "no_change_to_other_processes": (
                                True if walls.seccomp is None else walls.seccomp
                            ),
                        }
                        if level is Level.PROCESS
                        else {}
                    ),
                }
                for level in Level
            },
            "missing": how,
        }
        print(msgspec.json.format(msgspec.json.encode(report)).decode())
        return EXIT_OK

    def yes(reason: str | None) -> str:
        return "yes" if reason is None else f"no ({reason})"

    print("namespaces:")
    for name, reason in namespaces.items():
        print(f"  {name:8} {yes(reason)}")
    abi = walls.landlock_abi
    print(f"landlock:   {'ABI ' + str(abi) if abi else 'no'}")
    print(f"seccomp:    {yes(walls.seccomp)}")
    print(f"cgroups:    {runs}")
    for name, reason in cgroups.items() if setting_error is None else ():
        print(f"  {name:8} {yes(reason)}")
    print(f"  the host's share of the CPU, held against the runs: {yes(share_gap)}")
    for level in Level:
        gaps, weaker = level_gaps(level)
        print(f"level {level.value}:")
        if level is Level.CONFINED:
            missing = confinement_gaps()
            print(f"  available: {yes('; '.join(f'{k}: {v}' for k, v in missing.items()) or None)}")
            print(f"  a host uid of its own per run: {yes(own_uid)}")
        if level is not Level.IN_PROCESS:
            print(f"  no survivors, by {_survivors(level.value, cgroups_ok)}")
        if level is Level.PROCESS:
            print(f"  no signal or trace to a process outside the run: {_outside(scope_gap)}")
            print(
                "  no change to another process's limits, scheduling or priority, nor to "
                "the machine: " + _others(walls.seccomp)
            )
        for item, reason in gaps.items():
            print(f"  refuses {item}: {reason}")
        for item, reason in weaker.items():
            print(f"  enforces {item} {reason}")
        if not gaps and not weaker:
            print("  enforces every budget item")
    if how:
        print("missing here, and how to get it:")
        for name, remedy in how.items():
            print(f"  {name}: {remedy}")
    else:
        print("missing here: nothing")
    return EXIT_OK
