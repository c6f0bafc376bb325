"""Reading small kernel files: one open, one read, one close, and a strict parse.

Kernel pseudo-files (cgroup files, /proc/pressure) are produced whole at each
read. A file is opened, read and closed each time: no descriptor is kept.
Every file the kernel writes ends with a newline, so a file without one was
cut short and is rejected as garbage rather than half-read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

Number = int | float
Values = dict[str, Number]
"""Field name -> number. A field the kernel does not give is absent, never 0."""

# Every file read here is one kernel record (one show() call), which the
# first read returns whole when it fits: a short read is the end of the file.
_CHUNK = 16384


def read_bytes(path: str) -> bytes:
    """The whole content of ``path``: one open, one read (more only if the buffer fills), one close.

    Raises OSError: FileNotFoundError when the file vanished, IsADirectoryError
    or PermissionError when it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, _CHUNK)]
        while len(chunks[-1]) == _CHUNK:
            chunks.append(os.read(fd, _CHUNK))
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def complete(data: bytes) -> bytes:
    """``data`` if it ends with a newline; else ValueError (the file was cut short)."""
    if not data.endswith(b"\n"):
        raise ValueError(f"cut short or empty: {excerpt(data)}")
    return data


def excerpt(data: bytes, limit: int = 60) -> str:
    """A bounded, printable excerpt of ``data`` for an error message."""
    text = repr(data[:limit])
    return text + "..." if len(data) > limit else text


@dataclass(frozen=True)
class Key:
    """One line ``<key> <integer>`` of a flat-keyed file, and the field it gives."""

    key: str
    field: str
    divisor: float | None = None
    """The field is the integer divided by this (a unit change); ``None`` keeps the int."""
    required: bool = True
    """A missing line is garbage when required; otherwise the field is just absent."""


def flat_keyed(keys: tuple[Key, ...]) -> Callable[[bytes], Values]:
    """A parser for a flat-keyed file (``key value`` lines), giving only ``keys``.

    The parser raises ValueError on a file cut short, a required line that is
    missing, or a value that is not an integer.
    """
    needles = [(b"\n" + k.key.encode() + b" ", k) for k in keys]

    def parse(data: bytes) -> Values:
        text = b"\n" + complete(data)
        out: Values = {}
        for needle, k in needles:
            at = text.find(needle)
            if at < 0:
                # A key left without its value is garbage, not an absent line.
                if k.required or needle[:-1] + b"\n" in text:
                    raise ValueError(f"no {k.key!r} value in {excerpt(data)}")
                continue
            start = at + len(needle)
            raw = _integer(text[start : text.index(b"\n", start)], k.key)
            out[k.field] = raw / k.divisor if k.divisor else raw
        return out

    return parse


def single_value(field: str) -> Callable[[bytes], Values]:
    """A parser for a file holding one integer, giving it as ``field``."""

    def parse(data: bytes) -> Values:
        return {field: _integer(complete(data)[:-1], field)}

    return parse


def _integer(raw: bytes, what: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{what}: not an integer: {excerpt(raw)}") from None


@dataclass(frozen=True)
class KernelFile:
    """One file read at each collection: where it is, how it parses, what it gives."""

    path: str
    parse: Callable[[bytes], Values]
    fields: tuple[str, ...]
    """The fields it gives. When a read fails, exactly these are missing."""

    def read(self) -> Values:
        """Open, read and close the file once, and parse it.

        Raises OSError when the file vanished or cannot be read, and
        ValueError (naming the file) when it holds garbage.
        """
        data = read_bytes(self.path)
        try:
            return self.parse(data)
        except ValueError as exc:
            raise ValueError(f"{self.path}: {exc}") from None


Failure = tuple[KernelFile, Exception]


def read_all(files: tuple[KernelFile, ...]) -> tuple[Values, list[Failure]]:
    """Every file read once: the union of their fields, and the files that failed.

    A file that fails (OSError: vanished or unreadable; ValueError: garbage)
    gives none of its fields; the others are unaffected. Never raises those.
    """
    values: Values = {}
    failures: list[Failure] = []
    for f in files:
        try:
            values.update(f.read())
        except (OSError, ValueError) as exc:
            failures.append((f, exc))
    return values, failures


def available(files: list[KernelFile]) -> tuple[KernelFile, ...]:
    """The files that give something now, each narrowed to the fields it gives.

    Run once, at discovery: a file the kernel does not provide (absent, or
    without any of the wanted lines) is left out for good. A file that holds
    garbage now is kept with all its fields, so it comes back once repaired.
    """
    kept: list[KernelFile] = []
    for f in files:
        try:
            values = f.read()
        except ValueError:
            kept.append(f)
            continue
        except OSError:
            continue
        if values:
            kept.append(KernelFile(f.path, f.parse, tuple(k for k in f.fields if k in values)))
    return tuple(kept)
