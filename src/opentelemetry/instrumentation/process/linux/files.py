"""Reading small kernel files: one open, one read, one close, and a strict parse.

Kernel pseudo-files (cgroup files, /proc/pressure) are produced whole at each
read; no descriptor is kept. A file without its final newline was cut short
and is rejected as garbage rather than half-read. The parsers are lean:
positional where the layout allows, checked, never a full split of a long file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeAlias

from ..excerpt import excerpt

# Type aliases as strings: nothing made at import (each alias object would be
# walked by every full garbage collection).
Number: TypeAlias = "int | float"
Values: TypeAlias = "dict[str, Number]"
"""Field name -> number. A field the kernel does not give is absent, never 0."""

# Every file read here is one kernel record (one show() call), which the
# first read returns whole when it fits: a short read is the end of the file.
_CHUNK = 16384
_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def read_bytes(path: str) -> bytes:
    """The whole content of ``path``: one open, one read (more if the buffer fills), one close.

    Raises OSError: FileNotFoundError when the file vanished, IsADirectoryError
    or PermissionError when it cannot be read.
    """
    fd = os.open(path, _FLAGS)
    try:
        data = os.read(fd, _CHUNK)
        if len(data) == _CHUNK:
            data += _rest(fd)
    finally:
        os.close(fd)
    return data


def _rest(fd: int) -> bytes:
    chunks = [os.read(fd, _CHUNK)]
    while chunks[-1]:
        chunks.append(os.read(fd, _CHUNK))
    return b"".join(chunks)


class KernelFile:
    """One file read at each collection: where it is, how it parses, what it gives."""

    __slots__ = ("fields", "parse", "path")

    def __init__(
        self, path: str, parse: Callable[[bytes], Values], fields: tuple[str, ...]
    ) -> None:
        self.path = path
        self.parse = parse
        """Bytes to fields; raises ValueError (or IndexError) on garbage."""
        self.fields = fields
        """The fields it gives. When a read fails, exactly these are missing."""

    def read(self) -> Values:
        """Open, read and close the file once, and parse it.

        Raises OSError when the file vanished or cannot be read, and
        ValueError (naming the file, with an excerpt) when it holds garbage.
        """
        values, failures = read_all((self,))
        if failures:
            raise failures[0][1]
        return values


Failure: TypeAlias = "tuple[KernelFile, Exception]"


def read_all(files: tuple[KernelFile, ...]) -> tuple[Values, list[Failure]]:
    """Every file read once: the union of their fields, and the files that failed.

    A file that fails (OSError: vanished or unreadable; ValueError: garbage)
    gives none of its fields; the others are unaffected. Never raises those.
    """
    values: Values = {}
    failures: list[Failure] = []
    for f in files:
        try:
            data = read_bytes(f.path)
            if data[-1:] != b"\n":
                raise ValueError("cut short or empty")
            values.update(f.parse(data))
        except OSError as exc:
            failures.append((f, exc))
        except (ValueError, IndexError) as exc:
            garbage = ValueError(f"{f.path}: {exc}: {excerpt(data, 60)}")
            failures.append((f, garbage))
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


class Key:
    """One line ``<key> <integer>`` of a flat-keyed file, and the field it gives."""

    __slots__ = ("divisor", "field", "key")

    def __init__(self, key: str, field: str, divisor: float | None = None) -> None:
        self.key = key
        self.field = field
        self.divisor = divisor
        """The field is the integer divided by this (a unit change); ``None`` keeps the int."""


def flat_keyed(keys: tuple[Key, ...]) -> Callable[[bytes], Values]:
    """A parser for a short flat-keyed file (``key value`` lines), giving ``keys``.

    Every key must be there: it raises ValueError on a missing line, a line
    without a value, or a value that is not an integer. Where each key sits
    is learnt at the first read and checked at each one, not searched for.
    """
    wanted = tuple((k.key.encode(), k.field, k.divisor) for k in keys)
    plan: list[tuple[int, bytes, str, float | None]] = []  # (token index, key, ...)

    def parse(data: bytes) -> Values:
        tokens = data.split()
        if len(tokens) % 2:
            raise ValueError("a line without its value")
        out: Values = {}
        for at, key, field, divisor in plan:
            if at >= len(tokens) or tokens[at] != key:
                break
            value = int(tokens[at + 1])
            out[field] = value / divisor if divisor else value
        if len(out) == len(wanted):
            return out
        plan[:] = _positions(tokens, wanted)  # the layout changed, or first read
        return parse(data)

    return parse


def _positions(
    tokens: list[bytes], wanted: tuple[tuple[bytes, str, float | None], ...]
) -> list[tuple[int, bytes, str, float | None]]:
    # Keys sit at even positions, their values just after.
    where = {key: at for at, key in reversed(list(enumerate(tokens[::2])))}
    plan = []
    for key, field, divisor in wanted:
        if key not in where:
            raise ValueError(f"no {key.decode()!r} line")
        plan.append((2 * where[key], key, field, divisor))
    return plan


def flat_keyed_file(
    path: str, keys: tuple[Key, ...], optional: tuple[Key, ...] = ()
) -> KernelFile | None:
    """A flat-keyed file giving ``keys``, and those of ``optional`` it has now.

    Read once, at discovery: ``None`` when the file cannot be read (the
    kernel does not provide it). The optional keys (lines that older kernels
    or a disabled controller leave out) that are absent now are left out.
    """
    try:
        present = set(read_bytes(path).split()[::2])
    except OSError:
        return None
    wanted = keys + tuple(k for k in optional if k.key.encode() in present)
    if not wanted:
        return None
    return KernelFile(path, flat_keyed(wanted), tuple(k.field for k in wanted))


def one_key(key: str, field: str) -> Callable[[bytes], Values]:
    """A parser for one required line of a long flat-keyed file (v1 ``memory.stat``).

    It finds the line instead of splitting the whole file.
    """
    needle = b"\n" + key.encode() + b" "
    first = needle[1:]  # the line when it opens the file

    def parse(data: bytes) -> Values:
        at = data.find(needle)
        if at >= 0:
            start = at + len(needle)
        elif data.startswith(first):
            start = len(first)
        else:
            raise ValueError(f"no {key!r} line")
        return {field: int(data[start : data.index(b"\n", start)])}

    return parse


def single_value(field: str) -> Callable[[bytes], Values]:
    """A parser for a file holding one integer, giving it as ``field``."""

    def parse(data: bytes) -> Values:
        return {field: int(data)}

    return parse


def scaled_value(field: str, divisor: float) -> Callable[[bytes], Values]:
    """A parser for a file holding one integer, giving it divided by ``divisor``."""

    def parse(data: bytes) -> Values:
        return {field: int(data) / divisor}

    return parse
