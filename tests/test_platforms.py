"""Platform names: each platform psutil knows is spelled as the metric reference spells it.

Only Linux runs here, so the other platforms are faked at the narrowest
point: psutil's ``WINDOWS``/``LINUX`` constants and ``sys.platform``, the two
things :func:`current_platform` reads.
"""

from __future__ import annotations

import sys

import psutil
import pytest

from opentelemetry.instrumentation.process import platforms
from opentelemetry.instrumentation.process.catalog import supported
from opentelemetry.instrumentation.process.metrics import METRICS


def _fake(monkeypatch: pytest.MonkeyPatch, *, windows: bool, linux: bool, name: str) -> None:
    monkeypatch.setattr(psutil, "WINDOWS", windows)
    monkeypatch.setattr(psutil, "LINUX", linux)
    monkeypatch.setattr(sys, "platform", name)


def test_this_host_is_named_as_sys_platform_says() -> None:
    expected = "linux" if sys.platform.startswith("linux") else None
    if expected is None:
        pytest.skip("the names of other hosts are checked with a faked platform below")
    assert platforms.current_platform() == "linux"
    assert platforms.ON_LINUX is True


def test_windows_is_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, windows=True, linux=False, name="win32")
    assert platforms.current_platform() == "windows"
    assert platforms.current_platform() in platforms.WINDOWS


def test_linux_is_linux_whatever_sys_platform_says(monkeypatch: pytest.MonkeyPatch) -> None:
    # psutil decides: sys.platform was "linux2" on old Pythons.
    _fake(monkeypatch, windows=False, linux=True, name="linux2")
    assert platforms.current_platform() == "linux"


@pytest.mark.parametrize(
    ("sys_platform", "name"),
    [
        ("darwin", "darwin"),
        ("freebsd14", "freebsd"),
        ("openbsd7", "openbsd"),
        ("netbsd10", "netbsd"),
        ("sunos5", "sunos"),
        ("aix7", "aix"),
    ],
)
def test_every_posix_platform_gets_its_short_name(
    sys_platform: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(monkeypatch, windows=False, linux=False, name=sys_platform)
    assert platforms.current_platform() == name
    assert name in platforms.POSIX


def test_an_unknown_platform_keeps_its_own_name_and_supports_only_portable_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake(monkeypatch, windows=False, linux=False, name="haiku1")
    assert platforms.current_platform() == "haiku1"
    assert platforms.current_platform() not in platforms.ALL
    # No source declares it: no metric is supported there.
    assert not [m.name for m in METRICS if supported(m)]


def test_metrics_supported_on_a_faked_windows_are_the_windows_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake(monkeypatch, windows=True, linux=False, name="win32")
    here = {m.name for m in METRICS if supported(m)}
    assert here == {m.name for m in METRICS if supported(m, "windows")}
    # POSIX-only and Linux-only rows are gone; a portable one stays.
    assert "process.cpu.time" in here
    assert "process.unix.file_descriptor.count" not in here
    assert "process.signals_pending" not in here
    assert "process.paging.faults" not in here  # a field the source has on POSIX only
