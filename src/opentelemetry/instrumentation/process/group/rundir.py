"""A runtime directory private to the user, and files opened in it safely.

:func:`runtime_dir` gives ``$XDG_RUNTIME_DIR/otel-process-metrics`` when that
variable names a directory of this user, else ``/tmp/otel-process-metrics-<uid>``,
or the directory ``OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR`` names. It is
created with mode 0700 and then checked: a directory (not a symlink), owned by
this effective user, with no group or other permission bits. Nothing that fails
the check is modified: another user's directory or a planted symlink makes it
``None``, with one warning, and the callers fall back.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..faultlog import FaultLog

try:
    import fcntl
except ImportError:  # Windows: no flock, so no slots and no election
    fcntl = None  # type: ignore[assignment]

ENV_VAR = "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"
"""Names the runtime directory to use instead of the default one."""

DIR_NAME = "otel-process-metrics"

_logger = logging.getLogger(__name__)
faults = FaultLog(logger=_logger)
"""Rate-limits the warnings of this package's group files (one per fault and period)."""

# ONOFOLLOW: a symlink planted at the last component fails with ELOOP.
NOFOLLOW = getattr(os, "ONOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def euid() -> int:
    """This process's effective user id (-1 where there is none: Windows)."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else -1


class UnsafeError(OSError):
    """A path exists but is not private to this user (owner, type or mode)."""


def default_dir(environ: dict[str, str] | None = None) -> Path:
    """Where the runtime directory is, before any check (see the module docstring)."""
    env = os.environ if environ is None else environ
    override = env.get(ENV_VAR, "").strip()
    if override:
        return Path(override)
    xdg = env.get("XDG_RUNTIME_DIR", "").strip()
    if xdg and os.path.isabs(xdg):
        try:
            st = os.lstat(xdg)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == euid():
            return Path(xdg) / DIR_NAME
    return Path("/tmp") / f"{DIR_NAME}-{euid()}"


def runtime_dir() -> Path | None:
    """The private runtime directory, created if needed; ``None`` (and one warning) if unsafe."""
    path = default_dir()
    if fcntl is None:
        # Windows has no flock: every process reports, as documented; not a fault.
        _logger.debug("process metrics: no flock here; no worker slots, no election")
        return None
    try:
        private_dir(path)
    except OSError as exc:
        warn_unusable(path, exc)
        return None
    return path


def private_dir(path: Path) -> Path:
    """``path``, created with mode 0700 if missing, checked private to this user.

    Raises :class:`UnsafeError` when it is a symlink, not a directory, another
    user's, or open to the group or others; ``OSError`` when it cannot be made.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_private(os.lstat(path), path, want_dir=True)
    return path


def check_private(st: os.stat_result, path: Path, *, want_dir: bool) -> None:
    """Raise :class:`UnsafeError` unless ``st`` is this user's, of the right type, mode 0?00."""
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        what = "a directory" if want_dir else "a regular file"
        raise UnsafeError(errno.EPERM, f"not {what} (a symlink or something else)", str(path))
    if st.st_uid != euid():
        raise UnsafeError(errno.EPERM, f"owned by uid {st.st_uid}, not {euid()}", str(path))
    if st.st_mode & 0o077:
        raise UnsafeError(
            errno.EPERM, f"mode {stat.S_IMODE(st.st_mode):o} is open to group or others", str(path)
        )


def open_private(path: Path, flags: int = os.O_RDWR) -> int:
    """A descriptor of the file ``path``, created with mode 0600, never through a symlink.

    Opened with ``ONOFOLLOW | O_CLOEXEC`` and checked after the open (fstat):
    a regular file of this user, mode 0600 or tighter. Raises ``OSError``.
    """
    fd = os.open(path, flags | os.O_CREAT | NOFOLLOW, 0o600)
    st = os.fstat(fd)  # EBADF: the program closed it by its number; not ours to close
    try:
        check_private(st, path, want_dir=False)
    except UnsafeError:
        if _replaced(path, st):
            # The program put a file of its own under our number (dup2): not ours to
            # close, and nothing wrong with the path.
            raise OSError(errno.EBADF, "the descriptor was replaced", str(path)) from None
        os.close(fd)
        raise
    return fd


def _replaced(path: Path, opened: os.stat_result) -> bool:
    """Whether ``path`` is a private file other than the one ``opened`` now describes."""
    try:
        st = os.stat(path, follow_symlinks=False)
        check_private(st, path, want_dir=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) != (opened.st_dev, opened.st_ino)


def remove_if_free(path: Path, removable: Callable[[int], bool] | None = None) -> bool:
    """Remove the private file ``path`` if no process holds its lock, and ``removable``
    (given the descriptor, while this process holds the lock) agrees.

    The lock is tried, not waited for: a file held by a live process is kept, and so
    is one that is not this user's, or a symlink. Returns whether it was removed.
    Never raises.
    """
    try:
        fd = os.open(path, os.O_RDWR | NOFOLLOW)
    except OSError:
        return False
    try:
        check_private(os.fstat(fd), path, want_dir=False)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if removable is not None and not removable(fd):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False  # held by a live process, or not ours: kept
    finally:
        os.close(fd)


def warn_unusable(path: Path, exc: BaseException) -> None:
    """Say once (per fault period) that group files cannot be used, and what happens instead."""
    faults.warning(
        # One key for every group file: one warning per period, whichever fails first.
        ("rundir",),
        "process metrics: the runtime directory %s cannot be used safely (%s: %s); worker "
        "slots are off and every process reports the shared metrics (shared_metrics='every'). "
        "Set %s to a directory of this user with mode 0700.",
        path,
        type(exc).__name__,
        exc,
        ENV_VAR,
    )
