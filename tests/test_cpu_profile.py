"""The study's fourth profile (``benchmarks/cpu_profile.py``): ``perf script`` read as
samples, each sample given its part of the machine and its kind of work, and the whole
divided among the runs that ended while perf recorded."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks import cpu_profile as cp

K = cp.KERNEL_DSO
PY = "/usr/lib/libpython3.11.so.1.0"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"

#: What ``perf script`` prints (each header ends with a space), with a garbled sample.
SCRIPT = f"""\
python 100/100 10.000100:{" "}
\t     fe1cc _PyEval_EvalFrameDefault ({PY})
\t7fba61213200 [unknown] ([unknown])

python 200/200 10.000200:
\tffffffff815c0000 wp_page_copy ({K})
\tffffffff815c1000 do_wp_page ({K})
\tffffffff815c2000 handle_mm_fault ({K})
\tffffffff81000a00 asm_exc_page_fault ({K})
\t      fe1cc _PyObject_Malloc ({PY})

kworker/u8:1+ne 7/7 10.000300:
\tffffffff81900000 unregister_netdevice_many_notify ({K})
\tffffffff81901000 cleanup_net ({K})
\tffffffff81100000 process_one_work ({K})

swapper 0/0 10.000400:
\tffffffff8223a000 pv_native_safe_halt ({K})
\tffffffff8223b000 default_idle ({K})
swapper 0/0 10.000500:
\tffffffff81200000 __do_softirq ({K})
\tffffffff81201000 irq_exit_rcu ({K})

python 100/101 10.000600:
\tffffffff816e0000 do_mkdirat ({K})
\tffffffff816e1000 __x64_sys_mkdir ({K})
\tffffffff8223b5d1 do_syscall_64 ({K})
\t      10a0f7 mkdir ({LIBC})

python 300/300 10.000700:
\tffffffff81300000 copy_page_range ({K})
\tffffffff81301000 copy_process ({K})
\tffffffff81302000 kernel_clone ({K})

some tool 400/400 10.000800:
\t      1234 main (/usr/bin/some-tool)

garbage line without ids
\tffffffff81300000 copy_page_range ({K})
"""

ROLES = cp.Roles(host=100, zygote=300, keeper=299, interpreter="python")


def _samples() -> list[cp.Sample]:
    return list(cp.parse_script(SCRIPT.splitlines()))


def test_perf_script_is_read_as_samples() -> None:
    samples = _samples()
    assert [(s.comm, s.pid, s.tid) for s in samples] == [
        ("python", 100, 100),
        ("python", 200, 200),
        ("kworker/u8:1+ne", 7, 7),
        ("swapper", 0, 0),
        ("swapper", 0, 0),  # (no blank line before it)
        ("python", 100, 101),
        ("python", 300, 300),
        ("some tool", 400, 400),  # a name with a space
    ]
    assert samples[0].time == pytest.approx(10.0001)
    assert samples[0].frames[0] == cp.Frame("_PyEval_EvalFrameDefault", PY)
    assert samples[1].frames[1] == cp.Frame("do_wp_page", K)
    assert samples[1].frames[1].kernel
    assert not samples[1].frames[4].kernel


def test_each_sample_gets_its_part_of_the_machine() -> None:
    roles = [cp.role_of(s, ROLES) for s in _samples()]
    assert roles == [
        cp.HOST_LOOP,
        cp.RUNS,  # another process of the interpreter's name
        cp.KERNEL_THREADS,
        cp.IDLE,
        cp.IDLE,
        cp.HOST_THREADS,
        cp.ZYGOTE,
        cp.OTHER,
    ]
    keeper = cp.Sample("python", 299, 299, 1.0, ())
    perf = cp.Sample("perf", 500, 500, 1.0, (cp.Frame("x", K),))
    assert cp.role_of(keeper, ROLES) == cp.ZYGOTE
    assert cp.role_of(perf, ROLES) == cp.PROFILER
    # Of the interpreter's name, but alive at the end and not the keeper's: not a run's.
    elsewhere = dataclasses.replace(ROLES, others=frozenset({200}))
    assert cp.role_of(_samples()[1], elsewhere) == cp.OTHER


def test_each_sample_gets_its_kind_of_work() -> None:
    kinds = [cp.kind_of(s.frames) for s in _samples()]
    assert kinds == [
        (cp.PYTHON, "libpython3.11.so.1.0"),
        ("fault_cow", ""),
        ("netns_gone", ""),
        ("idle", ""),
        (cp.KERNEL_OTHER, ""),
        (cp.SYSCALL, "mkdir"),
        ("fork", ""),
        (cp.USER_OTHER, "some-tool"),
    ]
    # The first kind listed wins: a fault while a cgroup is made is a fault.
    both = (cp.Frame("do_anonymous_page", K), cp.Frame("cgroup_mkdir", K))
    assert cp.kind_of(both) == ("fault_fresh", "")
    assert cp.kind_of(()) == (cp.KERNEL_OTHER, "")
    assert cp.kind_of((cp.Frame("memcpy", LIBC),)) == (cp.LIBC, "libc.so.6")
    assert all(key in cp.KIND_LABELS for key, _, _ in cp.KINDS)


def test_the_samples_are_divided_among_the_runs_that_ended_meanwhile() -> None:
    tallied = cp.tally(_samples(), ROLES)
    assert tallied["samples"] == 8
    assert tallied["first"] == pytest.approx(10.0001)
    assert tallied["last"] == pytest.approx(10.0008)
    # The idle task's interrupts are the kernel's work, not idle time.
    assert tallied["table"][f"{cp.KERNEL_THREADS}/{cp.KERNEL_OTHER}"] == 1
    assert tallied["table"][f"{cp.IDLE}/idle"] == 1
    assert tallied["syscalls"] == {"mkdir": 1}
    assert tallied["others"] == {"some tool": 1}
    # Two runs ended inside the samples' stretch, one before it and one after.
    out = cp.summarize(tallied, [9.0, 10.0002, 10.0007, 11.0], cpus=2)
    assert out["runs"] == 2
    one = 1 / cp.FREQUENCY * 1e3 / 2  # one sample, per run, in ms
    assert out["table_ms"][f"{cp.ZYGOTE}/fork"] == pytest.approx(one)
    assert out["roles_ms"][cp.HOST_LOOP] == pytest.approx(one)
    assert out["roles_ms"][cp.HOST_THREADS] == pytest.approx(one)
    assert out["kinds_ms"]["idle"] == pytest.approx(one)
    # Busy: every sample but the idle one.
    assert out["busy_ms"] == pytest.approx(7 * one)
    assert sum(out["roles_ms"].values()) == pytest.approx(8 * one)
    assert out["coverage"] == pytest.approx(8 / (cp.FREQUENCY * 2 * 0.0007))
    assert cp.first(out) is not None


def test_no_run_in_the_stretch_is_said() -> None:
    tallied = cp.tally(_samples(), ROLES)
    out = cp.summarize(tallied, [1.0, 20.0], cpus=2)
    assert out["runs"] == 0
    assert out["error"] == "no run ended while perf recorded"
    assert cp.first(out) is None
    assert cp.first({}) is None


def test_the_section_shows_the_table_or_why_not() -> None:
    tallied = cp.tally(_samples(), ROLES)
    out = cp.summarize(tallied, [10.0002, 10.0007], cpus=2) | {"callers": 4}
    lines = cp.render_lines(out)
    assert lines[0] == cp.TITLE
    text = "\n".join(lines)
    assert "| fork: the process and its page tables copied |" in text
    assert cp.ROLE_LABELS[cp.ZYGOTE] in text
    assert "`mkdir`" in text
    assert "`some tool`" in text
    assert cp.render_lines({"error": "perf is not installed"})[2] == (
        "Not measured: perf is not installed"
    )
    assert "predates" in cp.render_lines(None)[2]


def test_the_anchor_is_the_titles() -> None:
    title = cp.TITLE.removeprefix("### ").lower()
    slug = "".join(c for c in title if c.isalnum() or c in " -").replace(" ", "-")
    assert slug == cp.ANCHOR


def test_perf_refusing_is_said_in_its_own_words() -> None:
    refused = (
        "Error:\n"
        "Access to performance monitoring and observability operations is limited.\n"
        "Consider adjusting /proc/sys/kernel/perf_event_paranoid setting to open\n"
        "perf_event_paranoid setting is 2:\n"
        "  -1: Allow use of (almost) all events by all users\n"
    )
    assert cp.perf_error(refused) == (
        "Access to performance monitoring and observability operations is limited. "
        "(perf_event_paranoid setting is 2)"
    )
    assert cp.perf_error("") == "no output"
    assert cp.perf_error("failed to open x.data : Permission denied\n") == (
        "failed to open x.data : Permission denied"
    )
