"""What the figures were measured on: pyperf's own metadata, and what it does not record."""

from __future__ import annotations

import os
import platform
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


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe() -> dict[str, Any]:
    """pyperf's metadata, with what it lacks: hypervisor, cores, memory, OS, versions, TCP hash."""
    import pyperf  # only to measure: a page check runs in the matrix cells, without pyperf

    meta = pyperf.Run([1.0], metadata={"name": "machine", "loops": 1}).get_metadata()
    done = subprocess.run(["lscpu"], capture_output=True, text=True, check=False)
    lscpu = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    pretty = [x for x in _read("/etc/os-release").splitlines() if x.startswith("PRETTY_NAME=")]
    return {
        "cpu_model": meta.get("cpu_model_name", "unknown"),
        "logical_cpus": meta.get("cpu_count", os.cpu_count()),
        "physical_cores": psutil.cpu_count(logical=False),
        "hypervisor": lscpu.get("Hypervisor vendor", "none reported").strip(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": pretty[0].split("=", 1)[1].strip('"') if pretty else meta.get("platform", ""),
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "versions": {name: _version(name) for name in PACKAGES},
        # Buckets of the kernel's TCP established hash: a netlink dump walks them all.
        "tcp_ehash_entries": int(_read("/proc/sys/net/ipv4/tcp_ehash_entries") or 0),
        "loadavg_start": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "argv": " ".join(["python", *sys.argv]),
        "pyperf": meta,
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
