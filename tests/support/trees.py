"""Fixture trees of kernel files in a temporary folder: /sys/fs/cgroup and /proc/self/cgroup."""

from __future__ import annotations

from pathlib import Path


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def fake_proc(root: Path, content: str) -> Path:
    path = root / "proc-self-cgroup"
    path.write_text(content)
    return path
