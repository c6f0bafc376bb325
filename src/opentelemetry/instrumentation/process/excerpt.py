"""A bounded ``repr()`` of a value, for error messages and warnings."""

from __future__ import annotations

import itertools


def excerpt(value: object, limit: int = 200) -> str:
    """``repr(value)`` for a message, at most ``limit`` characters, even when repr() fails."""
    # repr() of a huge value costs its whole size: shorten it first.
    if isinstance(value, (str, bytes, list, tuple)) and len(value) > limit:
        value = value[: limit + 1]
    elif isinstance(value, dict) and len(value) > limit:
        value = dict(itertools.islice(value.items(), limit + 1))
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # int over the str limit; nesting too deep
        return f"<{type(value).__name__} that cannot be shown>"
    return text if len(text) <= limit else text[: limit - 5] + "...)" + text[-1]
