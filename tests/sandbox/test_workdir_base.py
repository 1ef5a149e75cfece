"""Where the host makes its runs' working directories: a confined run's (which stays
empty) on a memory file system where the host has one every user may use, a ``process``
run's (the program's own) in the temporary directory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from sandbox._children import WORKDIR_PREFIX, workdir_bases
from sandbox._children._workspace import Workspace, confined_base, memory_base


def _mountinfo(mounts: dict[str, str]) -> str:
    """A ``/proc/self/mountinfo`` text with a mount of each file system type at each
    point (``/`` first)."""
    lines = [
        f"{20 + i} 1 0:{i} / {point.replace(' ', chr(92) + '040')} rw,relatime - {fstype} x rw"
        for i, (point, fstype) in enumerate(mounts.items())
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """A directory every user may write in, with its sticky bit, as ``/dev/shm`` is."""
    path = tmp_path / "shm dir"
    path.mkdir()
    path.chmod(0o1777)
    return path


def test_a_sticky_tmpfs_directory_is_a_memory_base(shared_dir: Path) -> None:
    info = _mountinfo({"/": "ext4", str(shared_dir): "tmpfs"})
    assert memory_base(str(shared_dir), info) == os.path.realpath(shared_dir)


def test_a_directory_under_a_tmpfs_mount_is_one_too(shared_dir: Path) -> None:
    info = _mountinfo({"/": "ext4", str(shared_dir.parent): "tmpfs"})
    assert memory_base(str(shared_dir), info) == os.path.realpath(shared_dir)


@pytest.mark.parametrize("fstype", ["ext4", "overlay", "xfs"])
def test_a_directory_on_a_disk_is_not(shared_dir: Path, fstype: str) -> None:
    info = _mountinfo({"/": "tmpfs", str(shared_dir): fstype})
    assert memory_base(str(shared_dir), info) is None


def test_the_deepest_mount_decides(shared_dir: Path) -> None:
    """A disk mounted over a tmpfs hides it."""
    inner = shared_dir / "disk"
    inner.mkdir(mode=0o1777)
    inner.chmod(0o1777)
    info = _mountinfo({"/": "tmpfs", str(shared_dir): "tmpfs", str(inner): "ext4"})
    assert memory_base(str(inner), info) is None


def test_a_world_writable_directory_without_its_sticky_bit_is_not(shared_dir: Path) -> None:
    """There any user could remove the host's directories."""
    shared_dir.chmod(0o777)
    info = _mountinfo({"/": "ext4", str(shared_dir): "tmpfs"})
    assert memory_base(str(shared_dir), info) is None


def test_what_is_missing_or_no_directory_is_not(tmp_path: Path) -> None:
    info = _mountinfo({"/": "tmpfs"})
    assert memory_base(str(tmp_path / "missing"), info) is None
    (tmp_path / "file").write_text("")
    assert memory_base(str(tmp_path / "file"), info) is None


def test_a_link_is_followed_to_its_directory(shared_dir: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(shared_dir)
    info = _mountinfo({"/": "ext4", str(shared_dir): "tmpfs"})
    assert memory_base(str(link), info) == os.path.realpath(shared_dir)


@pytest.mark.parametrize("confined", [True, False], ids=["confined", "process"])
def test_each_run_directory_is_made_in_its_base(confined: bool) -> None:
    """A confined run's directory is made in :func:`confined_base`, a ``process`` run's in
    the temporary directory; both are among :func:`workdir_bases` (where the leak checks
    look), and each is removed with its workspace."""
    workspace = Workspace(confined=confined, use_cgroups=False, disk_bytes=None)
    try:
        where = Path(workspace.workdir)
        assert where.is_dir()
        assert where.name.startswith(f"{WORKDIR_PREFIX}{os.getpid()}-")
        expected = confined_base() if confined else tempfile.gettempdir()
        assert str(where.parent) == expected
        assert str(where.parent) in workdir_bases()
    finally:
        workspace.remove(runner_gone=True)
    assert not where.exists()


def test_this_host_puts_confined_directories_in_memory() -> None:
    """Where this host has ``/dev/shm`` on tmpfs (as Linux hosts mostly do), the confined
    runs' directories are made there: the tests of every confined run use that base."""
    info = Path("/proc/self/mountinfo").read_text()
    shm = memory_base("/dev/shm", info)
    if shm is None:
        pytest.skip("this host has no /dev/shm on tmpfs that every user may use")
    assert confined_base() == shm
    assert workdir_bases() == sorted({tempfile.gettempdir(), shm})
