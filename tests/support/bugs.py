"""Known faults of the package, each shown by a test that fails until it is fixed."""

from __future__ import annotations

import pytest


def src_bug(
    what: str, *, where: bool = True, raises: type[BaseException] | None = None
) -> pytest.MarkDecorator:
    """An expected failure for a fault of ``src/`` (``where``: on this Python only).

    Strict: once fixed, the test passes, and the mark must go.
    """
    return pytest.mark.xfail(where, reason=f"src bug: {what}", raises=raises, strict=True)
