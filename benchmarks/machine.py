"""What the figures were measured on: recorded automatically with every run."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

PACKAGES = (
    "opentelemetry-instrumentation-process",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-instrumentation-system-metrics",
    "prometheus-client",
    "psutil",
    "pyperf",
)


def _lscpu() -> dict[str, str]:
    if not shutil.which("lscpu"):
        return {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        found[key.strip()] = value.strip()
    return found


def _os_name() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def _ehash() -> int:
    """Buckets of the kernel's TCP established hash: a netlink dump walks them all."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_ehash_entries").read_text())
    except (OSError, ValueError):
        return 0


def describe() -> dict[str, Any]:
    cpu = _lscpu()
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "cpu_model": cpu.get("Model name") or platform.processor() or "unknown",
        "logical_cpus": psutil.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "hypervisor": cpu.get("Hypervisor vendor", "none reported"),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": _os_name(),
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "versions": versions,
        "sysfs_cpufreq": os.path.exists("/sys/devices/system/cpu/cpu0/cpufreq")
        or os.path.exists("/sys/devices/system/cpu/cpufreq/policy0"),
        "strace": shutil.which("strace") or "",
        "tcp_ehash_entries": _ehash(),
        "loadavg_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "argv": " ".join(["python", *sys.argv]),
    }


def src_commit() -> str:
    """The last commit that changed src/ (what the figures measured), and whether it is dirty."""

    def git(*args: str) -> str:
        root = Path(__file__).resolve().parent.parent
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip()

    sha = git("log", "-1", "--format=%h", "--abbrev=10", "--", "src") or "unknown"
    dirty = " with uncommitted changes" if git("status", "--porcelain", "--", "src") else ""
    return f"`{sha}`{dirty}"


def cpu(info: dict[str, Any]) -> str:
    """The CPU, as the machine table names it."""
    found = str(info["cpu_model"])
    if info["hypervisor"] != "none reported":
        found += f" ({info['hypervisor']} guest)"
    return found


def counted_on(info: dict[str, Any]) -> str:
    """The machine, as the counts name it: what decides whether they can be compared."""
    return f"{cpu(info)}, {info['logical_cpus']} CPUs"
