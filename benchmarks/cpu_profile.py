"""Profile 4: where the machine's CPU goes while confined runs follow one another.

The study's CPU per run adds up what each process spends (``study.cpu_per_run``); this
profile says on what. While four callers do trivial confined runs from a pool of four (the
study's sustained cell), ``perf record -a -g`` samples every CPU of the machine,
:data:`FREQUENCY` times a second, kernel and user space, with call chains. Each sample gets

* a **role** (:func:`role_of`): the host's event loop (its main thread) or its other
  threads, the zygote, the runs' processes (every other process of the interpreter's name:
  the zygote forks them, and none execs another program here), the kernel's own threads
  (a call chain in the kernel alone), the profiler, the idle CPU, or another process of
  the machine; and
* a **kind of work** (:func:`kind_of`): the first of :data:`KINDS` whose kernel function is
  in its call chain (a page fault, and which: a copy on write, a fresh page, a page of a
  file; a fork; an exit; a network namespace made or torn down; a cgroup made, removed or
  joined; a seccomp filter; Landlock; mounts; other namespaces), else any other system
  call (by name), else kernel work outside a system call (interrupts, the scheduler), else
  user space, by library (``libpython``: the interpreter running Python).

A sample stands for 1/:data:`FREQUENCY` s of one CPU. Milliseconds per run are a role's or
a kind's samples over the runs that ended between the first sample and the last (perf
stamps them with ``CLOCK_MONOTONIC``, the clock the runs are timed with). Beside the sum,
the machine's own count of its busy time over the same stretch (``/proc/stat``): the
check that the samples add up.

``perf`` is Linux's profiler (Debian's ``linux-perf``), not a Python package: where it is
missing, or may not sample the whole machine (not root, ``perf_event_paranoid``), the
profile says so and is not measured; the study goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import psutil

import sandbox
import sandbox._children._supervisor

if TYPE_CHECKING:
    from .study import Recorder

#: Samples per second, per CPU (odd, so as not to beat with the kernel's 1000 Hz tick).
FREQUENCY: Final = 999
#: Callers, and the pool's size: the study's sustained cell.
CALLERS: Final = 4

KERNEL_DSO: Final = "[kernel.kallsyms]"

#: The kinds of work a call chain can show, in the order they are looked for: (key,
#: label, the kernel functions that say it).
KINDS: Final = (
    ("fault_cow", "page faults: copy on write (a page shared, first written)", ("do_wp_page",)),
    ("fault_fresh", "page faults: a fresh page", ("do_anonymous_page",)),
    (
        "fault_file",
        "page faults: a page of a file",
        ("filemap_map_pages", "filemap_fault", "do_read_fault", "do_cow_fault"),
    ),
    (
        "fault_other",
        "page faults: not told apart (the sample caught one on its way in)",
        ("asm_exc_page_fault",),
    ),
    ("fork", "fork: the process and its page tables copied", ("copy_process",)),
    ("exit", "exit: the address space and the rest torn down", ("do_exit",)),
    ("netns_made", "a network namespace made", ("setup_net", "copy_net_ns")),
    ("netns_gone", "a network namespace torn down", ("cleanup_net",)),
    ("cgroup_made", "a cgroup made", ("cgroup_mkdir",)),
    (
        "cgroup_removed",
        "a cgroup removed, and its teardown",
        ("cgroup_rmdir", "css_killed_work_fn", "css_release_work_fn", "css_free_rwork_fn"),
    ),
    (
        "cgroup_joined",
        "a cgroup joined",
        ("cgroup_attach_task", "__cgroup1_procs_write", "__cgroup_procs_write"),
    ),
    ("seccomp", "a seccomp filter installed", ("do_seccomp",)),
    (
        "landlock",
        "Landlock",
        (
            "__x64_sys_landlock_create_ruleset",
            "__x64_sys_landlock_add_rule",
            "__x64_sys_landlock_restrict_self",
        ),
    ),
    (
        "mounts",
        "mounts and mount namespaces",
        (
            "path_mount",
            "copy_mnt_ns",
            "__x64_sys_pivot_root",
            "__x64_sys_umount",
            "__x64_sys_open_tree",
            "__x64_sys_move_mount",
            "__x64_sys_fsmount",
        ),
    ),
    ("namespaces", "other namespaces (unshare, setns)", ("ksys_unshare", "__x64_sys_setns")),
    ("idle", "idle", ("pv_native_safe_halt", "default_idle", "cpuidle_enter", "do_idle")),
)
#: The kinds that are not in :data:`KINDS`' table of markers.
SYSCALL: Final = "syscall"
KERNEL_OTHER: Final = "kernel_other"
PYTHON: Final = "python"
LIBC: Final = "libc"
USER_OTHER: Final = "user_other"
KIND_LABELS: Final = {
    **{key: label for key, label, _ in KINDS},
    SYSCALL: "other system calls",
    KERNEL_OTHER: "kernel, outside a system call (interrupts, the scheduler)",
    PYTHON: "user space: libpython (the interpreter)",
    LIBC: "user space: libc",
    USER_OTHER: "user space: other libraries",
}
_MARKERS: Final = tuple((key, frozenset(markers)) for key, _, markers in KINDS)
_SYSCALL_PREFIXES: Final = ("__x64_sys_", "__do_sys_", "__se_sys_", "__ia32_sys_")

#: Roles, in the table's order.
HOST_LOOP, HOST_THREADS, ZYGOTE, RUNS = "host_loop", "host_threads", "zygote", "runs"
KERNEL_THREADS, PROFILER, IDLE, OTHER = "kernel_threads", "profiler", "idle", "other"
ROLE_LABELS: Final = {
    HOST_LOOP: "host: event loop",
    HOST_THREADS: "host: other threads",
    ZYGOTE: "zygote (and keeper)",
    RUNS: "the runs' processes",
    KERNEL_THREADS: "kernel threads",
    PROFILER: "perf",
    IDLE: "idle",
    OTHER: "other processes",
}


@dataclass(frozen=True)
class Frame:
    """One entry of a call chain: the function (``[unknown]`` if perf has no name for
    it) and what it is in (a library's path, or ``[kernel.kallsyms]``)."""

    symbol: str
    dso: str

    @property
    def kernel(self) -> bool:
        return self.dso == KERNEL_DSO


@dataclass(frozen=True)
class Sample:
    """One sample of ``perf script``: who was on the CPU, when, and its call chain from
    the function running (first) outwards."""

    comm: str
    pid: int
    tid: int
    time: float
    frames: tuple[Frame, ...]


def parse_script(lines: Iterable[str]) -> Iterator[Sample]:
    """The samples of ``perf script -F comm,pid,tid,time,ip,sym,dso`` output: a header
    line (``COMM PID/TID TIME:``) then one indented line per frame (``ADDR SYMBOL
    (DSO)``), a blank line after each. A header that does not read is skipped, with its
    frames."""
    head: tuple[str, int, int, float] | None = None
    frames: list[Frame] = []
    for line in lines:
        if not line.strip():
            if head is not None:
                yield Sample(*head, tuple(frames))
            head, frames = None, []
        elif line[0] in " \t":
            if head is not None:
                frames.append(_frame(line))
        else:
            if head is not None:  # (no blank line before this one)
                yield Sample(*head, tuple(frames))
            head, frames = _header(line), []
    if head is not None:
        yield Sample(*head, tuple(frames))


def _header(line: str) -> tuple[str, int, int, float] | None:
    try:
        rest, stamp = line.rstrip().rstrip(":").rsplit(None, 1)
        comm, ids = rest.rsplit(None, 1)
        pid, tid = ids.split("/")
        return comm, int(pid), int(tid), float(stamp)
    except ValueError:
        return None


def _frame(line: str) -> Frame:
    text = line.strip()
    dso = ""
    if text.endswith(")") and " (" in text:
        text, _, dso = text[:-1].rpartition(" (")
    _, _, symbol = text.partition(" ")
    return Frame(symbol.strip() or "[unknown]", dso)


def kind_of(frames: Sequence[Frame]) -> tuple[str, str]:
    """A call chain's kind of work (see the module docstring), and its detail: a system
    call's name, a library's file name, or ``""``."""
    names = {f.symbol for f in frames if f.kernel}
    for key, markers in _MARKERS:
        if names & markers:
            return key, ""
    for f in frames:
        if f.kernel and f.symbol.startswith(_SYSCALL_PREFIXES):
            name = f.symbol
            for prefix in _SYSCALL_PREFIXES:
                name = name.removeprefix(prefix)
            return SYSCALL, name
    if not frames or frames[0].kernel:
        return KERNEL_OTHER, ""
    library = os.path.basename(frames[0].dso)
    if library.startswith("libpython"):
        return PYTHON, library
    if library.startswith("libc.so"):
        return LIBC, library
    return USER_OTHER, library or "[unknown]"


@dataclass(frozen=True)
class Roles:
    """Who is who on the machine: this host's pid (its event loop runs in its main
    thread, whose id is the pid), the zygote and its keeper, and the name (``comm``) the
    runs' processes have."""

    host: int
    zygote: int | None
    keeper: int | None
    interpreter: str
    #: Processes of the interpreter's name that are none of these (another program of
    #: the machine, a test runner's other workers): alive when perf stopped, and not the
    #: keeper's descendants. (A run's processes are gone by then, or the pool's.)
    others: frozenset[int] = frozenset()


def role_of(sample: Sample, roles: Roles) -> str:
    """Which part of the machine a sample is from (see the module docstring); pid 0 is
    the idle task (:func:`tally` gives the kernel's threads what it did besides idling)."""
    if sample.pid == 0:
        return IDLE
    if sample.pid == roles.host:
        return HOST_LOOP if sample.tid == roles.host else HOST_THREADS
    if sample.pid in (roles.zygote, roles.keeper):
        return ZYGOTE
    if sample.comm in ("perf", "perf-exec"):
        return PROFILER
    if sample.comm == roles.interpreter and sample.pid not in roles.others:
        return RUNS
    if sample.frames and all(f.kernel for f in sample.frames):
        return KERNEL_THREADS
    return OTHER


def tally(samples: Iterable[Sample], roles: Roles) -> dict[str, Any]:
    """Samples counted by role and kind (and the details: system calls, libraries, other
    processes), with the first and last samples' times."""
    table: Counter[tuple[str, str]] = Counter()
    syscalls: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    others: Counter[str] = Counter()
    first = last = None
    count = 0
    for sample in samples:
        count += 1
        first = sample.time if first is None else min(first, sample.time)
        last = sample.time if last is None else max(last, sample.time)
        who = role_of(sample, roles)
        kind, detail = kind_of(sample.frames)
        if who == IDLE and kind != IDLE:  # interrupts taken while the CPU was idle
            who = KERNEL_THREADS
        table[who, kind] += 1
        if kind == SYSCALL:
            syscalls[detail] += 1
        elif kind in (PYTHON, LIBC, USER_OTHER):
            libraries[detail] += 1
        if who == OTHER:
            others[sample.comm] += 1
    return {
        "samples": count,
        "first": first,
        "last": last,
        "table": {f"{who}/{kind}": n for (who, kind), n in table.items()},
        "syscalls": dict(syscalls.most_common()),
        "libraries": dict(libraries.most_common()),
        "others": dict(others.most_common()),
    }


def per_run(counts: dict[str, int], runs: int, frequency: int = FREQUENCY) -> dict[str, float]:
    """Sample counts as milliseconds of CPU per run."""
    return {key: n / frequency * 1e3 / runs for key, n in counts.items()}


def summarize(tallied: dict[str, Any], run_ends: Sequence[float], cpus: int) -> dict[str, Any]:
    """The profile: ``tallied`` (:func:`tally`) per run, over the runs that ended between
    its first sample and its last; with the share of the ``cpus``' time between those two
    that the samples stand for (the check that none were lost)."""
    first, last = tallied["first"], tallied["last"]
    runs = 0 if first is None else sum(1 for t in run_ends if first <= t <= last)
    out: dict[str, Any] = {
        "frequency_hz": FREQUENCY,
        "samples": tallied["samples"],
        "window_s": None if first is None else last - first,
        "runs": runs,
    }
    if not runs:
        out["error"] = "no run ended while perf recorded"
        return out
    table = per_run(tallied["table"], runs)
    roles: dict[str, float] = {}
    kinds: dict[str, float] = {}
    for key, ms in table.items():
        who, kind = key.split("/")
        roles[who] = roles.get(who, 0.0) + ms
        kinds[kind] = kinds.get(kind, 0.0) + ms
    busy = sum(ms for who, ms in roles.items() if who not in (IDLE, PROFILER))
    out |= {
        "table_ms": table,
        "roles_ms": roles,
        "kinds_ms": kinds,
        "busy_ms": busy,
        "coverage": tallied["samples"] / (FREQUENCY * cpus * (last - first))
        if last > first
        else None,
        "syscalls_ms": per_run(tallied["syscalls"], runs),
        "libraries_ms": per_run(tallied["libraries"], runs),
        "others_ms": per_run(tallied["others"], runs),
    }
    return out


def _comm(pid: int) -> str | None:
    """A process's name as perf has it (``comm``: at most 15 characters); None if gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _roles() -> Roles:
    """Who is who, read once perf has stopped (the pool's processes still alive)."""
    zygote = sandbox._children._supervisor.zygote_pid()
    keeper = None
    interpreter: str | None = None
    ours: set[int] = {os.getpid()}
    if zygote is not None:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(zygote)
            interpreter = _comm(zygote)
            parent = process.parent()
            keeper = None if parent is None else parent.pid
            top = process if parent is None else parent
            ours |= {top.pid, *(p.pid for p in top.children(recursive=True))}
    if interpreter is None:  # no zygote: no run's process to tell from the others
        return Roles(os.getpid(), zygote, keeper, "")
    others = {pid for pid in psutil.pids() if pid not in ours and _comm(pid) == interpreter}
    return Roles(os.getpid(), zygote, keeper, interpreter, frozenset(others))


def _record(path: Path, seconds: float) -> None:
    """``perf record`` of the whole machine for ``seconds``, into ``path``.

    Raises:
        RuntimeError: perf failed (why, in its own words).
    """
    argv = ["perf", "record", "-a", "-g", "-F", str(FREQUENCY), "-k", "CLOCK_MONOTONIC"]
    argv += ["-o", str(path), "--", "sleep", str(seconds)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(
            f"perf record failed (exit {done.returncode}): {perf_error(done.stderr)}"
        )


def perf_error(stderr: str) -> str:
    """What perf's own words say went wrong: its first line that is not a heading
    (``Error:``), and the ``perf_event_paranoid`` setting it names, if it names one."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if ln.rstrip(":").lower() not in ("error", "warning")]
    text = said[0][:300] if said else "no output"
    setting = next((ln for ln in lines if ln.startswith("perf_event_paranoid setting is")), None)
    return text if setting is None else f"{text} ({setting.rstrip(':')})"


def _script(path: Path, roles: Roles) -> dict[str, Any]:
    argv = ["perf", "script", "-i", str(path), "-F", "comm,pid,tid,time,ip,sym,dso"]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        tallied = tally(parse_script(proc.stdout), roles)
    if proc.returncode != 0:
        raise RuntimeError(f"perf script failed (exit {proc.returncode})")
    return tallied


def unavailable() -> str | None:
    """Why this machine cannot be sampled whole, or None (it may)."""
    if shutil.which("perf") is None:
        return "perf (Linux's profiler, Debian's linux-perf) is not installed"
    return None


async def measure(rec: Recorder, seconds: float, limit: float) -> dict[str, Any]:
    """The profile, over ``seconds`` of recording in the middle of the load; not measured
    (with why) if perf is missing or fails. Failed runs are the study's failures."""
    from .study import TRIVIAL, _pools, describe, expect_trivial, timed_run

    why = unavailable()
    if why is not None:
        return {"error": why}
    run_ends: list[float] = []
    stop = anyio.Event()
    attempts = 0
    async with _pools(["confined"], CALLERS, limit) as pools:
        pool = pools["confined"]

        async def caller() -> None:
            nonlocal attempts
            while not stop.is_set():
                index = attempts
                attempts += 1
                _, _, problem = await timed_run(TRIVIAL, "confined", pool, expect_trivial, limit)
                if problem is None:
                    run_ends.append(time.monotonic())
                else:
                    rec.fail("profile", "cpu", index, problem)

        with tempfile.TemporaryDirectory(prefix="sandbox-cpu-profile-") as scratch:
            data = Path(scratch) / "perf.data"
            recorded: str | None = None
            async with anyio.create_task_group() as tg:
                for _ in range(CALLERS):
                    tg.start_soon(caller)
                await anyio.sleep(min(1.0, seconds))  # the load under way first
                try:
                    await anyio.to_thread.run_sync(_record, data, seconds)
                except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                    recorded = describe(exc)
                roles = _roles()
                stop.set()
            if recorded is not None:
                return {"error": recorded}
            try:
                tallied = await anyio.to_thread.run_sync(_script, data, roles)
            except (RuntimeError, OSError) as exc:
                return {"error": describe(exc)}
    out = summarize(tallied, run_ends, os.cpu_count() or 1)
    out["seconds"] = seconds
    out["callers"] = CALLERS
    return out


# -- the page -------------------------------------------------------------------------------


def _ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}"


def first(cpu: dict[str, Any]) -> str | None:
    """The largest kind of work in one role, as a reader looks at it first; None if the
    profile was not measured."""
    table: dict[str, float] = cpu.get("table_ms") or {}
    busy = {k: v for k, v in table.items() if k.split("/")[0] not in (IDLE, PROFILER)}
    if not busy:
        return None
    key, ms = max(busy.items(), key=lambda kv: kv[1])
    who, kind = key.split("/")
    return (
        f"the most: {KIND_LABELS.get(kind, kind)} in {ROLE_LABELS.get(who, who)}, "
        f"{_ms(ms)} of {_ms(cpu['busy_ms'])} ms of CPU per run"
    )


ANCHOR: Final = "profile-4-where-the-machines-cpu-goes-under-the-sustained-confined-load"
TITLE: Final = "### Profile 4: where the machine's CPU goes under the sustained confined load"


def render_lines(cpu: dict[str, Any] | None) -> list[str]:
    """The profile's section of the page."""
    lines = [TITLE, ""]
    if not cpu:
        return [*lines, "Not measured in this run (the study predates it).", ""]
    if "error" in cpu:
        return [*lines, f"Not measured: {cpu['error']}", ""]
    roles = [r for r in ROLE_LABELS if cpu["roles_ms"].get(r)]
    kinds = sorted(cpu["kinds_ms"], key=lambda k: -cpu["kinds_ms"][k])
    table: dict[str, float] = cpu["table_ms"]
    coverage = cpu.get("coverage")
    lines += [
        f"ms of CPU per run, by kind of work (rows) and part of the machine (columns): "
        f"{cpu['samples']} samples of every CPU at {cpu['frequency_hz']} Hz (kernel and "
        f"user space, with call chains: `perf record -a -g`) over {cpu['window_s']:.1f} s "
        f"of {cpu['callers']} callers doing trivial confined runs from a pool of "
        f"{cpu['callers']}; {cpu['runs']} runs ended meanwhile. Busy CPU sampled: "
        f"{_ms(cpu['busy_ms'])} ms per run (idle and perf left out); the samples stand "
        f"for {'n/a' if coverage is None else f'{coverage:.1%}'} of the CPUs' time "
        "between the first and the last (the check that none were lost). A kind is the "
        "first of `cpu_profile.KINDS` in the "
        "sample's call chain; the runs' processes are every process of the interpreter's "
        "name other than the host and the zygote.",
        "",
        "| kind of work | " + " | ".join(ROLE_LABELS[r] for r in roles) + " | all |",
        "|---|" + "---|" * (len(roles) + 1),
    ]
    for kind in kinds:
        shares = [table.get(f"{r}/{kind}") for r in roles]
        cells = [_ms(ms) if ms else "" for ms in shares]
        label = KIND_LABELS.get(kind, kind)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_ms(cpu['kinds_ms'][kind])} |")
    totals = " | ".join(f"**{_ms(cpu['roles_ms'][r])}**" for r in roles)
    lines.append(f"| **all** | {totals} | |")
    lines.append("")
    details = []
    for name, key in (("system calls", "syscalls_ms"), ("libraries", "libraries_ms")):
        top = list((cpu.get(key) or {}).items())[:6]
        if top:
            details.append(
                f"The most {name}: " + ", ".join(f"`{n}` {_ms(ms)}" for n, ms in top) + "."
            )
    others = list((cpu.get("others_ms") or {}).items())[:4]
    if others:
        details.append(
            "Other processes: " + ", ".join(f"`{n}` {_ms(ms)}" for n, ms in others) + "."
        )
    if details:
        lines += [" ".join(details), ""]
    return lines
