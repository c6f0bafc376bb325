"""Edges of the kernel-file parsers, each parser built inside its test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opentelemetry.instrumentation.process.linux.files import (
    KernelFile,
    Key,
    flat_keyed,
    one_key,
    read_all,
)

V1_MEMORY_STAT = "/sys/fs/cgroup/memory/memory.stat"


def test_a_flat_keyed_line_without_its_value_is_said_so(tmp_path: Path) -> None:
    content = b"a 1\nb 2\nlonely\n"
    path = tmp_path / "flat"
    path.write_bytes(content)
    parse = flat_keyed((Key("a", "f"), Key("b", "g")))
    f = KernelFile(str(path), parse, ("f", "g"))
    values, ((failed, exc),) = read_all((f,))
    assert (values, failed) == ({}, f)
    assert str(exc) == f"{path}: a line without its value: {content!r}"
    with pytest.raises(ValueError, match=r"^a line without its value$"):
        parse(content)


def test_the_first_line_of_a_key_given_twice_wins_in_both_parsers() -> None:
    data = b"rss 5\ncache 1\ncache 2\n"
    assert one_key("cache", "f")(data) == {"f": 1}
    assert flat_keyed((Key("cache", "f"),))(data) == {"f": 1}


def test_one_key_finds_its_line_first_after_a_blank_line_and_last() -> None:
    parse = one_key("cache", "f")
    assert parse(b"cache 17\n") == {"f": 17}
    assert parse(b"cache 17\nrss 5\n") == {"f": 17}
    assert parse(b"\ncache 17\n") == {"f": 17}
    assert parse(b"rss 5\ncache 17\n") == {"f": 17}
    with pytest.raises(ValueError, match=r"^no 'cache' line$"):
        parse(b"cach 17\n")


@pytest.mark.skipif(not os.path.exists(V1_MEMORY_STAT), reason="no v1 memory controller here")
def test_one_key_reads_each_line_of_the_kernels_memory_stat() -> None:
    """Every key of a real v1 memory.stat, against the test's own split of the same bytes."""
    with open(V1_MEMORY_STAT, "rb") as f:
        data = f.read()
    lines = [line.split() for line in data.splitlines()]
    assert lines and all(len(words) == 2 for words in lines)
    for key, value in lines:
        assert one_key(key.decode(), "f")(data) == {"f": int(value)}, key
