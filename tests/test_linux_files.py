"""Reading small kernel files: real files in a temporary folder, written and checked here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opentelemetry.instrumentation.process.excerpt import excerpt
from opentelemetry.instrumentation.process.linux.files import (
    KernelFile,
    Key,
    available,
    flat_keyed,
    one_key,
    read_all,
    read_bytes,
    scaled_value,
    single_value,
)

V1_MEMORY_STAT = "/sys/fs/cgroup/memory/memory.stat"
CHUNK = 16384  # one read() of a kernel record: a file that fills it is read on


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7])
def test_read_bytes_returns_the_whole_file(tmp_path: Path, size: int) -> None:
    content = bytes(i % 251 for i in range(size))
    path = tmp_path / "f"
    path.write_bytes(content)
    before = sorted(os.listdir("/proc/self/fd"))
    assert read_bytes(str(path)) == content
    assert sorted(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("size", [CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7])
def test_read_all_parses_files_longer_than_one_read(tmp_path: Path, size: int) -> None:
    # A long flat-keyed file with its one wanted line last.
    last = b"wanted 42\n"
    lines = b"k 1\n" * ((size - len(last)) // 4 - 1)
    pad = size - len(last) - len(lines) - len(b"k \n")
    content = b"k " + b"1" * pad + b"\n" + lines + last
    assert len(content) == size
    path = tmp_path / "long"
    path.write_bytes(content)
    parse = one_key("wanted", "field")
    values, failures = read_all((KernelFile(str(path), parse, ("field",)),))
    assert failures == []
    assert values == {"field": 42}


def test_excerpt_of_bytes_is_their_repr_of_at_most_the_limit() -> None:
    assert excerpt(b"", 60) == "b''"
    assert excerpt(b"ab\n", 60) == "b'ab\\n'"
    assert excerpt(b"x" * 57, 60) == "b'" + "x" * 57 + "'"  # 60 characters: whole
    assert excerpt(b"x" * 58, 60) == "b'" + "x" * 53 + "...)'"
    assert excerpt(b"x" * 10**6, 60) == "b'" + "x" * 53 + "...)'"


def _file(tmp_path: Path, content: bytes, parse: object, fields: tuple[str, ...]) -> KernelFile:
    path = tmp_path / "kernel-file"
    path.write_bytes(content)
    return KernelFile(str(path), parse, fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "parse", "why"),
    [
        (b"a 1\nb\n", flat_keyed((Key("a", "f"),)), "a line without its value"),
        (b"a 1\nc 2\n", flat_keyed((Key("a", "f"), Key("b", "g"))), "no 'b' line"),
        (b"a 1\nc 2\n", one_key("b", "g"), "no 'b' line"),
        (b"a x\n", flat_keyed((Key("a", "f"),)), "invalid literal for int() with base 10: b'x'"),
        (b"12", single_value("f"), "cut short or empty"),
        (b"", single_value("f"), "cut short or empty"),
    ],
)
def test_garbage_is_a_value_error_naming_the_file_why_and_an_excerpt(
    tmp_path: Path, content: bytes, parse: object, why: str
) -> None:
    f = _file(tmp_path, content, parse, ("f",))
    values, failures = read_all((f,))
    assert values == {}
    ((failed, exc),) = failures
    assert failed is f
    assert type(exc) is ValueError
    assert str(exc) == f"{f.path}: {why}: {content[:60]!r}"
    with pytest.raises(ValueError) as raised:
        f.read()
    assert str(raised.value) == str(exc)


def test_one_key_finds_its_line_anywhere_even_first(tmp_path: Path) -> None:
    parse = one_key("cache", "f")
    assert parse(b"cache 123\nrss 5\n") == {"f": 123}
    assert parse(b"rss 5\ncache 123\n") == {"f": 123}
    assert parse(b"rss 5\ncache 123\nmapped_file 7\n") == {"f": 123}
    # Alone, first, after a blank line and last.
    assert parse(b"cache 17\n") == {"f": 17}
    assert parse(b"cache 17\nrss 5\n") == {"f": 17}
    assert parse(b"\ncache 17\n") == {"f": 17}
    assert parse(b"rss 5\ncache 17\n") == {"f": 17}
    # Only whole keys: a longer key ending the same is another line.
    assert parse(b"total_cache 9\ncache 123\n") == {"f": 123}
    for other in (b"total_cache 9\n", b"cache_x 9\n", b"cach 17\n"):
        with pytest.raises(ValueError, match=r"^no 'cache' line$"):
            parse(other)


def test_flat_keyed_scales_and_keeps_ints() -> None:
    parse = flat_keyed((Key("usage_usec", "t", 1e6), Key("nr_periods", "n")))
    values = parse(b"usage_usec 1500000\nnr_periods 7\n")
    assert values == {"t": 1.5, "n": 7}
    assert type(values["n"]) is int


def test_single_and_scaled_values() -> None:
    assert single_value("f")(b"4096\n") == {"f": 4096}
    assert scaled_value("f", 1e9)(b"2500000000\n") == {"f": 2.5}


def test_discovery_keeps_what_gives_something_now_in_any_order(tmp_path: Path) -> None:
    (tmp_path / "garbage").write_bytes(b"not a number\n")
    (tmp_path / "good").write_bytes(b"a 1\nb 2\n")
    files = [
        KernelFile(str(tmp_path / "absent"), single_value("x"), ("x",)),  # not provided
        KernelFile(str(tmp_path / "garbage"), single_value("y"), ("y",)),  # back once repaired
        KernelFile(str(tmp_path / "good"), lambda d: dict(flat_keyed_pairs(d)), ("a", "c")),
    ]
    kept = available(files)
    assert [(Path(f.path).name, f.fields) for f in kept] == [("garbage", ("y",)), ("good", ("a",))]


def flat_keyed_pairs(data: bytes) -> list[tuple[str, int]]:
    return [(k.decode(), int(v)) for k, v in (line.split() for line in data.splitlines())]


# -- edges of the parsers, each parser built inside its test -----------------------


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


@pytest.mark.skipif(not os.path.exists(V1_MEMORY_STAT), reason="no v1 memory controller here")
def test_one_key_reads_each_line_of_the_kernels_memory_stat() -> None:
    """Every key of a real v1 memory.stat, against the test's own split of the same bytes."""
    with open(V1_MEMORY_STAT, "rb") as f:
        data = f.read()
    lines = [line.split() for line in data.splitlines()]
    assert lines and all(len(words) == 2 for words in lines)
    for key, value in lines:
        assert one_key(key.decode(), "f")(data) == {"f": int(value)}, key
