"""Safe on a shared machine: planted symlinks, another user's directory, read-only and full
file systems all make the group files unusable, with one warning: every process then
reports (shared_metrics="every") and no slot is claimed; nothing is modified."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opentelemetry.instrumentation.process.group import election, rundir, slots
from opentelemetry.instrumentation.process.group.election import Election
from opentelemetry.instrumentation.process.group.keys import group_of
from opentelemetry.instrumentation.process.shared_sources import SharedGate
from opentelemetry.instrumentation.process.sources import SOURCES

from .conftest import log_lines
from .support.groupkids import Kid, claimed_slot
from .support.internals import release_slot
from .support.planted import planted_symlink

VAR = "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"
SERVICE = "service.name=safety-test"
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


@pytest.fixture(autouse=True)
def _fresh(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    rundir.faults._faults.clear()
    release_slot()
    caplog.set_level(logging.WARNING)
    yield
    release_slot()


def in_kid() -> dict[str, object]:
    """A fresh process's view: the election falls back, no slot, what a refresh reads."""
    with log_lines() as said:
        gate = SharedGate("once", SERVICE)
        every = tuple(SOURCES[n] for n in ("system_memory", "process_memory"))
        out = {
            "leader": Election(group_of(SERVICE)).leader(),
            "read": sorted(s.name for s in gate.sources(every)),
            "slot": claimed_slot(),
        }
        gate.close()
    out["warned"] = sum("cannot be used safely" in line for line in said.lines)
    return out


def forget_the_elections() -> None:
    """This process's election state as a new process has it (it holds no descriptor)."""
    election._states.clear()


def falls_back(caplog: pytest.LogCaptureFixture) -> None:
    kid = Kid(in_kid)
    try:
        assert kid.result == {
            "leader": True,
            "read": ["process_memory", "system_memory"],
            "slot": None,
            "warned": 1,
        }
    finally:
        kid.kill()
    # And here: warned once however often it is asked.
    forget_the_elections()
    for _ in range(3):
        assert Election(group_of(SERVICE)).leader() and claimed_slot() is None
        assert slots.recorded_slots(os.getpid()) == {}  # no worker's slot to be read here
    lines = [r for r in caplog.records if "cannot be used safely" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]


def test_a_symlink_planted_as_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    link, target = planted_symlink(tmp_path, "run", "target")
    monkeypatch.setenv(VAR, str(link))
    falls_back(caplog)
    assert list(target.iterdir()) == []


def test_a_symlink_planted_as_the_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    (run / "groups").mkdir(mode=0o700, parents=True)
    run.chmod(0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (run / "groups" / f"{group_of(SERVICE).key}.lock").symlink_to(victim)
    # Slots: a symlink where the slot folder of this process's parent would be.
    (run / "slots").mkdir(mode=0o700)
    from opentelemetry.instrumentation.process.group.keys import parent_key

    monkeypatch.setenv(VAR, str(run))
    forget_the_elections()
    assert Election(group_of(SERVICE)).leader()
    (run / "slots" / parent_key(os.getppid())).symlink_to(tmp_path)
    assert claimed_slot() is None
    assert victim.read_text() == "precious\n"
    assert len([r for r in caplog.records if "cannot be used safely" in r.getMessage()]) == 1


def test_a_directory_owned_by_another_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory away")
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.chown(run, 65534, 65534)
    monkeypatch.setenv(VAR, str(run))
    falls_back(caplog)
    st = run.stat()
    assert (st.st_uid, oct(st.st_mode & 0o777), list(run.iterdir())) == (65534, "0o700", [])
    assert f"(UnsafeError: [Errno 1] owned by uid 65534, not 0: '{run}')" in warning(caplog)


def test_a_directory_open_to_others_is_refused_not_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o755)
    monkeypatch.setenv(VAR, str(run))
    falls_back(caplog)
    assert oct(run.stat().st_mode & 0o777) == "0o755"
    assert f"(UnsafeError: [Errno 1] mode 755 is open to group or others: '{run}')" in warning(
        caplog
    )


def warning(caplog: pytest.LogCaptureFixture) -> str:
    """The one warning that the runtime directory cannot be used."""
    (line,) = [r.getMessage() for r in caplog.records if "cannot be used safely" in r.getMessage()]
    return line


def test_the_default_is_xdg_runtime_dir_only_where_it_is_this_users_directory(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "xdg"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(mine)
    fallback = Path("/tmp") / f"{rundir.DIR_NAME}-{os.geteuid()}"
    assert rundir.default_dir({"XDG_RUNTIME_DIR": str(mine)}) == mine / rundir.DIR_NAME
    assert rundir.default_dir({"XDG_RUNTIME_DIR": str(link)}) == fallback
    assert rundir.default_dir({"XDG_RUNTIME_DIR": "run/user"}) == fallback  # not absolute
    assert rundir.default_dir({}) == fallback
    assert rundir.default_dir({VAR: "/srv/run", "XDG_RUNTIME_DIR": str(mine)}) == Path("/srv/run")
    if os.geteuid() == 0:
        os.chown(mine, 65534, 65534)
        assert rundir.default_dir({"XDG_RUNTIME_DIR": str(mine)}) == fallback


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount")
    where = tmp_path / "mnt"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16k,nr_inodes=64,mode=0700", "tmpfs", str(where)],
        capture_output=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr!r}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(path: Path) -> None:
    """Write to ``path`` until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_only(tmpfs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)


def full(tmpfs: Path) -> None:
    fill(tmpfs / "filler")
    # Use up the inodes too: no file or folder can be created any more.
    n = 0
    try:
        while True:
            (tmpfs / f"i{n}").touch()
            n += 1
    except OSError:
        pass


@pytest.mark.parametrize("spoil", [read_only, full], ids=["read-only", "full"])
def test_a_file_system_where_nothing_can_be_created(
    spoil: Callable[[Path], None],
    tmpfs: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = tmpfs / "run"
    run.mkdir(mode=0o700)  # the directory exists and is safe, but nothing can be created
    spoil(tmpfs)
    monkeypatch.setenv(VAR, str(run))
    falls_back(caplog)


def test_a_full_file_system_with_inodes_left_fails_at_the_pid_write(
    tmpfs: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.instrumentation.process.group.keys import parent_key

    run = tmpfs / "run"
    folder = run / "slots" / parent_key(os.getppid())
    folder.mkdir(mode=0o700, parents=True)
    run.chmod(0o700)
    (run / "slots").chmod(0o700)
    fill(tmpfs / "filler")
    monkeypatch.setenv(VAR, str(run))
    assert claimed_slot() is None
    # The lock taken before the failed write was given back.
    import fcntl

    with open(folder / "0.lock") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert len([r for r in caplog.records if "cannot be used safely" in r.getMessage()]) == 1
