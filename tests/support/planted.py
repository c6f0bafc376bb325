"""What an attacker may plant where the package keeps its runtime files: a symlink to a folder."""

from __future__ import annotations

from pathlib import Path


def planted_symlink(folder: Path, name: str, target_name: str) -> tuple[Path, Path]:
    """``folder/name``, a symlink to a new private folder ``folder/target_name``: (link, target)."""
    target = folder / target_name
    target.mkdir(mode=0o700)
    link = folder / name
    link.symlink_to(target)
    return link, target
