"""An ordinary user's host: ``confined`` runs, no process of a run survives it, memory is
limited without cgroups, and ``sandbox doctor`` says what is missing and how to get it.

Each scenario is a host of its own, a Python process that runs as an ordinary user: the
suite's own user when it is one (``make test-nonroot``), else ``$SANDBOX_TEST_USER`` (the
user ``.ci/run`` makes) or ``nobody``, switched to from root. Such a user cannot make the
run's cgroups here; what it gets instead is what :func:`sandbox.substitutes` says.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox._commands import _doctor
from tests.host import ORDINARY_USER, needs_confinement, skip_because_host_cannot

ROOT = Path(__file__).resolve().parents[2]
#: How long one scenario may take (a few runs, a Python start or two).
TIMEOUT = 120.0


def _user() -> tuple[int, int]:
    """The ordinary user the scenarios run as (uid, gid)."""
    if ORDINARY_USER:
        return os.geteuid(), os.getegid()
    entry = pwd.getpwnam(os.environ.get("SANDBOX_TEST_USER", "nobody"))
    return entry.pw_uid, entry.pw_gid


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """A home of the user's own: its working directory, HOME and TMPDIR."""
    uid, gid = _user()
    path = Path(tempfile.mkdtemp(prefix="sandbox-nonroot-"))
    os.chown(path, uid, gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(home: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (Python, with ``sandbox`` importable from this checkout) as the
    ordinary user, in ``home``; ``args`` are its ``sys.argv[1:]``."""
    uid, gid = _user()
    boot = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    argv = [sys.executable, "-I", "-c", boot + textwrap.dedent(code), *args]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home)}
    if ORDINARY_USER:  # the suite's own user is one already
        return subprocess.run(
            argv, cwd=home, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    return subprocess.run(
        argv,
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        user=uid,
        group=gid,
        extra_groups=[],
    )


def report(home: Path, code: str) -> Any:
    """What scenario ``code`` prints as JSON on its last line (it must succeed)."""
    done = as_user(home, code)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def reachable(home: Path) -> Path:
    """``home``, once the ordinary user can run this interpreter and import this checkout
    (the interpreter may live in root's home: ``.ci/run`` makes it reachable)."""
    try:
        done = as_user(home, "import sandbox, anyio, psutil")
        why = done.stderr.strip()[-300:] if done.returncode != 0 else None
    except OSError as exc:
        why = str(exc)
    if why is not None:
        skip_because_host_cannot(f"run {sys.executable} with {ROOT} as uid {_user()[0]}: {why}")
    return home


#: Everything of the user that is a run's (no cgroups here, or none it can make).
CONFINED = """
import json, os, sandbox
from sandbox import Budget
forks = '''
import os, time
made = 0
while made < 1000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    made += 1
made
'''
run = sandbox.run_sync(
    "import os\\nprint('hello')\\n[os.getuid(), os.getpid()]", level="confined"
)
held = sandbox.run_sync(
    forks, level="confined", budget=Budget(max_processes=20, wall_clock=30)
)
print(json.dumps({
    "gaps": sandbox.confinement_gaps(),
    "run": [run.ok, run.value, run.stdout, run.error],
    "held": [held.ok, held.value, held.error],
    "substitutes": sandbox.substitutes("confined"),
}))
"""


@needs_confinement()
def test_confined_runs_as_an_ordinary_user(reachable: Path) -> None:
    """The confined level is available to an ordinary user and runs a program, as uid
    1000 and PID 1 of its own namespaces; ``max_processes`` holds there (a pids cgroup, or
    ``RLIMIT_NPROC``, which counts the run's own user namespace)."""
    seen = report(reachable, CONFINED)
    assert seen["gaps"] == {}
    assert seen["run"] == [True, [1000, 1], "hello\n", ""]
    ok, made, error = seen["held"]
    assert ok, error
    assert 20 - 8 <= made < 20  # the runner and its threads count too


#: A program that leaves a daemon behind: it forks, the child starts a session of its own,
#: ignores every signal it can, forks again and exits, and the grandchild, named
#: ``sys.argv[1]``, tells the program it is up (the host looks for it while the run lasts).
ESCAPES = """
import json, os, sys, sandbox
from sandbox import Budget
marker = sys.argv[1]

def look() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == marker:
                    with open(f"/proc/{pid}/stat") as f:
                        if f.read().rpartition(")")[2].split()[0] not in "ZX":
                            found.append(int(pid))
        except (OSError, ValueError):
            pass
    return found

program = '''
import ctypes, os, signal, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, MARKER, 0, 0, 0)  # PR_SET_NAME
        os.write(w, b"up")
        while True:
            time.sleep(1)
    os._exit(0)
os.read(r, 2)
host.look()
'''.replace("MARKER", repr(marker.encode()))
seen = {}
for level in ("process", "confined"):
    result = sandbox.run_sync(
        program, tools=[look], level=level, budget=Budget(wall_clock=30)
    )
    sandbox._children.shutdown()  # every run's remains cleared, the zygote gone
    seen[level] = [result.ok, result.value, result.error, look()]
print(json.dumps(seen))
"""


@needs_confinement()
def test_no_process_of_a_run_survives_it(reachable: Path) -> None:
    """A daemon the program leaves behind (its own session, signals ignored, its parent
    gone) is alive while the run lasts, and gone once the run is over, at ``process``
    (the runner's tree) and at ``confined`` (the run's PID namespace)."""
    marker = f"sbx-esc-{os.getpid() % 100000}"
    done = as_user(reachable, ESCAPES, marker)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    for level, (ok, during, error, after) in seen.items():
        assert ok, (level, error)
        assert len(during) == 1, level  # the daemon was up: the test can fail
        assert after == [], level


MEMORY = """
import json, sandbox
from sandbox import Budget
past = '''
chunks = []
for _ in range(64):
    chunks.append(bytearray(16 << 20))
len(chunks)
'''
seen = {"substitutes": {lv: sandbox.substitutes(lv) for lv in ("process", "confined")}}
for level in ("process", "confined"):
    budget = Budget(max_memory=128 << 20, wall_clock=30)
    result = sandbox.run_sync(past, level=level, budget=budget)
    within = sandbox.run_sync("len(bytearray(64 << 20))", level=level, budget=budget)
    seen[level] = {
        "past": [result.ok, result.kind, result.cause, result.error],
        "within": [within.ok, within.value, within.error],
        "refused": sorted(sandbox.unenforceable(level)),
    }
print(json.dumps(seen))
"""


@needs_confinement()
def test_memory_is_limited_without_cgroups(reachable: Path) -> None:
    """``max_memory`` is enforced for an ordinary user at ``process`` and ``confined``
    (never refused): a program that allocates past it ends with kind ``limit``, cause
    ``memory``, and one within it runs. Without a memory cgroup, the limit is per process
    (``RLIMIT_DATA``): :func:`sandbox.substitutes` says so, and the error says that the
    sign of it is the program's own ``MemoryError``."""
    seen = report(reachable, MEMORY)
    for level in ("process", "confined"):
        ok, kind, cause, error = seen[level]["past"]
        assert (ok, kind, cause) == (False, "limit", "memory"), error
        assert seen[level]["within"][:2] == [True, 64 << 20], seen[level]["within"][2]
        assert "max_memory" not in seen[level]["refused"]
        if "max_memory" in seen["substitutes"][level]:
            assert "RLIMIT_DATA" in seen["substitutes"][level]["max_memory"]
            assert "per process" in error
            assert "the program's own report" in error


def test_doctor_says_what_is_missing_and_how_to_get_it(reachable: Path) -> None:
    """``sandbox doctor``, as an ordinary user: confined is available where the walls
    are; each thing missing (here at least a uid of its own per run, which only a root
    host gives) comes with how to get it; every level says what it refuses and what it
    enforces only by a substitute."""
    text = as_user(
        reachable, "from sandbox._commands._main import main; raise SystemExit(main())", "doctor"
    )
    assert text.returncode == 0, text.stderr
    as_json = as_user(
        reachable,
        "from sandbox._commands._main import main; raise SystemExit(main())",
        "doctor",
        "--json",
    )
    assert as_json.returncode == 0, as_json.stderr
    found = json.loads(as_json.stdout)
    missing = found["missing"]
    assert "a host uid of its own per run" in missing
    assert "run the host as root" in missing["a host uid of its own per run"]
    assert "missing here, and how to get it:" in text.stdout
    for name, how in missing.items():
        assert f"  {name}: {how}" in text.stdout
    if any(why is not True for why in found["cgroups"].values()):
        assert "Delegate=yes" in missing["cgroups"] or "chown" in missing["cgroups"]
        assert "max_memory" in found["levels"]["confined"]["substitutes"]
        assert "PID 1" in found["levels"]["confined"]["no_survivors"]
    if found["levels"]["confined"]["missing_walls"] == {}:
        assert "level confined:\n  available: yes\n" in text.stdout
    assert "no survivors cannot be guaranteed" not in text.stdout


@needs_confinement()
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve"], ""),  # serves on stdin, which is empty: it ends at once
        # Its model is unreachable: it started, and its first step fails.
        (["agent", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "say hi"], "step 1"),
    ],
    ids=["serve", "agent"],
)
def test_serve_and_agent_start_at_confined(reachable: Path, argv: list[str], says: str) -> None:
    """``sandbox serve`` and ``sandbox agent``, whose level is ``confined`` by default,
    start as an ordinary user."""
    done = as_user(
        reachable, "from sandbox._commands._main import main; raise SystemExit(main())", *argv
    )
    assert "not available" not in done.stderr
    assert says in done.stdout + done.stderr
    if argv[0] == "serve":
        assert done.returncode == 0, done.stderr


# -- the remedies, on any host -----------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("user/max_user_namespaces", "0", "user.max_user_namespaces=15000"),
        ("kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone=1"),
        (
            "kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "kernel.apparmor_restrict_unprivileged_userns=0",
        ),
    ],
)
def test_doctor_names_the_sysctl_that_refuses_user_namespaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, value: str, says: str
) -> None:
    """Where a sysctl keeps an ordinary user from making user namespaces, the remedy names
    it, with the command and the file that keeps it across reboots."""
    (tmp_path / setting).parent.mkdir(parents=True)
    (tmp_path / setting).write_text(value + "\n")
    monkeypatch.setattr(_doctor, "_SYSCTL", tmp_path)
    how = _doctor.remedies({"user": "unshare: EPERM"}, 7, None, {}, None)
    assert list(how) == ["user namespace"]
    assert f"sysctl -w {says}" in how["user namespace"]
    assert "/etc/sysctl.d/" in how["user namespace"]


@pytest.mark.parametrize("unified", [True, False], ids=["cgroup2", "cgroup1"])
def test_doctor_says_how_an_ordinary_user_gets_cgroups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unified: bool
) -> None:
    """Without cgroups, an ordinary user is told how to get a subtree of its own: systemd's
    ``Delegate=`` on the unified hierarchy, a subtree made for it by root on cgroup v1."""
    if unified:
        (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    monkeypatch.setattr(_doctor, "_CGROUP", tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    how = _doctor.remedies({}, 7, None, {"memory": "Permission denied"}, None)
    assert list(how) == ["cgroups"]
    assert ("Delegate=yes" in how["cgroups"]) is unified
    assert ("chown -R $USER" in how["cgroups"]) is not unified
    assert "per process" in how["cgroups"]


def test_doctor_has_nothing_to_say_of_a_host_that_lacks_nothing() -> None:
    """A host with every wall, cgroups and a uid per run has no remedy to offer."""
    assert _doctor.remedies({"user": None, "pid": None}, 7, None, {"memory": None}, None) == {}
