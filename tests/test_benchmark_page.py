"""The benchmark page against a run: its exact counts cell by cell, its date against src/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
PAGE = (BENCHMARKS.parent / "docs" / "benchmarks.md").read_text()
TEMPLATE = (BENCHMARKS / "docs_template.md").read_text()


@pytest.fixture(scope="module")
def page_check() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import page_check

        yield page_check
    finally:
        sys.path.remove(str(BENCHMARKS))


def _count(subject: str, calls: dict[str, int]) -> Any:
    from counts import Count

    return Count(subject, "ours", 0, {}, {}, calls, 0)


def _here(page_check: ModuleType) -> dict[str, Any]:
    """The machine the page was counted on, as machine.describe() would give it."""
    name = page_check.machine_of(PAGE)
    cpu, cpus = name.rsplit(", ", 1)
    model, _, rest = cpu.partition(" (")
    return {
        "cpu_model": model,
        "hypervisor": rest.removesuffix(" guest)") if rest else "none reported",
        "logical_cpus": int(cpus.split()[0]),
    }


def _table(page: str) -> str:
    body = page.split("## Exact counts", 1)[1]
    lines = body.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    return "\n".join(lines[start:end])


def test_the_page_names_when_and_where_each_kind_of_figure_was_made() -> None:
    assert "{{run_when}}" in TEMPLATE and "{{counts_when}}" in TEMPLATE
    assert "| Run | " in PAGE  # the timed run's row in the machine table
    assert "Timed figures**: from one full run (`make bench`)" in PAGE


def test_the_same_counts_match(page_check: ModuleType) -> None:
    ok, measured = page_check.counts_check(PAGE, _table(PAGE), [], _here(page_check))
    rows = len([r for r in page_check.rows_of(_table(PAGE)) if r["Group"] == "ours"])
    assert rows >= 15
    assert (ok, measured) == (True, f"{rows} of {rows} rows match")


def test_one_changed_count_fails_and_says_how_to_regenerate(page_check: ModuleType) -> None:
    table = _table(PAGE)
    row = next(line for line in table.splitlines() if line.startswith("| `default` |"))
    cells = row.split(" | ")
    cells[5] = "99 (99 distinct)"  # psutil calls
    changed = table.replace(row, " | ".join(cells))
    ok, measured = page_check.counts_check(PAGE, changed, [], _here(page_check))
    assert not ok
    assert "`default` psutil calls: page " in measured and "run 99 (99 distinct)" in measured
    assert "--counts-only benchmarks/results/results.json" in measured


def test_opens_of_a_read_that_walks_every_process_are_not_compared(
    page_check: ModuleType,
) -> None:
    table = _table(PAGE)
    row = next(line for line in table.splitlines() if line.startswith("| `connections_psutil` |"))
    cells = row.split(" | ")
    cells[2], cells[3] = "12345", "12346"  # both opens columns
    changed = table.replace(row, " | ".join(cells))
    walking = [_count("connections_psutil", {"psutil.net_connections": 1})]
    ok, _ = page_check.counts_check(PAGE, changed, walking, _here(page_check))
    assert ok
    ok, _ = page_check.counts_check(PAGE, changed, [], _here(page_check))
    assert not ok


def test_another_machine_is_not_compared(page_check: ModuleType) -> None:
    elsewhere = {**_here(page_check), "logical_cpus": 512}
    ok, measured = page_check.counts_check(PAGE, "| Subject |\n|---|\n", [], elsewhere)
    assert ok and measured.startswith("not compared: the page was counted on ")


def test_a_page_older_than_src_warns(page_check: ModuleType, monkeypatch: Any) -> None:
    made = page_check.run_date(PAGE)
    assert made is not None and made < time.time()
    monkeypatch.setattr(page_check, "last_src_change", lambda: (made + 60, "abc1234"))
    line = page_check.staleness(PAGE)
    assert line.startswith("WARNING: docs/benchmarks.md's timed figures are from ")
    assert "older than the last change to src/" in line and "abc1234" in line
    monkeypatch.setattr(page_check, "last_src_change", lambda: (made - 60, "abc1234"))
    assert "newer than the last change to src/" in page_check.staleness(PAGE)
    monkeypatch.setattr(page_check, "last_src_change", lambda: None)
    assert "not dated against src/" in page_check.staleness(PAGE)


def test_the_peers_rows_are_neither_compared_nor_rewritten(page_check: ModuleType) -> None:
    """A change to this package cannot touch them; their counts move with the host."""
    table = _table(PAGE)
    row = next(line for line in table.splitlines() if line.startswith("| `peer_default` |"))
    cells = row.split(" | ")
    cells[2] = "12345"
    changed = table.replace(row, " | ".join(cells))
    ok, _ = page_check.counts_check(PAGE, changed, [], _here(page_check))
    assert ok
    # A recount keeps the page's peer rows and takes this package's new ones.
    ours = next(line for line in table.splitlines() if line.startswith("| `default` |"))
    recount = changed.replace(ours, ours.replace("| ours | 9 |", "| ours | 10 |"))
    kept = page_check.keep_others(PAGE, recount)
    assert row in kept.splitlines() and " | 12345 | " not in kept
    assert ours.replace("| ours | 9 |", "| ours | 10 |") in kept.splitlines()


# --- instructions: the gate on the counts of results/instructions.json -----------------


@pytest.fixture(scope="module")
def instructions(page_check: ModuleType) -> ModuleType:
    import instructions

    return instructions


def _recorded(instructions: ModuleType) -> tuple[str, dict[str, Any]]:
    """The entry whose tables the benchmark page shows."""
    for key, entry in instructions.load().items():
        if instructions.collections_table(entry) in PAGE:
            return key, entry
    raise AssertionError("the page shows no recorded instruction counts")


def test_the_page_shows_the_recorded_instruction_counts(instructions: ModuleType) -> None:
    _, entry = _recorded(instructions)
    assert entry == instructions.latest()
    assert "{{instructions_collections}}" in TEMPLATE
    assert instructions.page()["instructions_when"] in PAGE
    gated = instructions.gated_entries(entry)
    assert len([k for k in gated if k.startswith("collection ")]) >= 13
    assert {f"between {w}" for w in instructions.KINDS} <= set(gated)
    # Three repeats each, whose spread the tolerance stands on.
    assert all(len(v["runs"]) == 3 for v in gated.values())


@pytest.mark.parametrize(("factor", "ok"), [(1.0, True), (1.004, True), (1.01, False)])
def test_one_percent_more_instructions_fails_and_says_how_to_count_again(
    instructions: ModuleType, monkeypatch: Any, factor: float, ok: bool
) -> None:
    key, entry = _recorded(instructions)
    monkeypatch.setattr(instructions, "key", lambda _info: key)
    monkeypatch.setattr(instructions, "beside", lambda _commit: entry)  # counted as recorded
    info = {"versions": entry["versions"]}
    for where, name in (("collections", "default"), ("between", "cycles")):
        found = json.loads(json.dumps(entry))
        counts = found["between"]["defaults"] if where == "between" else found["collections"]
        counts[name]["median"] *= factor
        passed, said = instructions.check(found, info)
        assert passed is ok, said
        if not ok:
            assert f"{name}: recorded " in said and f"(+{factor - 1:.2%})" in said
            assert said.endswith(instructions.REGENERATE)


def test_counts_outside_the_record_are_compared_with_the_recorded_commit_counted_here(
    instructions: ModuleType, monkeypatch: Any
) -> None:
    """Another machine of the same CPU and interpreter counts the same code up to 0.8% more
    (CI did): the gate then counts the record's src/ beside this run, and compares with that."""
    key, entry = _recorded(instructions)
    monkeypatch.setattr(instructions, "key", lambda _info: key)
    info = {"versions": entry["versions"]}
    found = json.loads(json.dumps(entry))
    for v in instructions.gated_entries(found).values():
        v["median"], v["runs"] = v["median"] * 1.008, [r * 1.008 for r in v["runs"]]
    commit = entry["commit"].strip("`")
    asked: list[str] = []
    for here, ok in ((found, True), (entry, False), (None, False)):
        monkeypatch.setattr(instructions, "beside", lambda c, h=here: asked.append(c) or h)
        passed, said = instructions.check(found, info)
        assert passed is ok, said
        assert said.count("default: recorded ") == (1 if here is not entry else 2), said
        assert (f"{commit}'s src/ counted" in said) is (here is not None), said
    assert asked == [commit] * 3


def test_the_recorded_commits_src_is_what_is_counted_beside(
    instructions: ModuleType, monkeypatch: Any
) -> None:
    """``beside`` counts the package as the record's commit had it: its files, from git."""
    commit = instructions.latest()["commit"].strip("`")
    seen: list[str] = []

    def measure(p: Any, src: str = "") -> dict[str, Any]:
        seen.append(src)
        assert p == instructions.plan(True)
        package = Path(src, "opentelemetry", "instrumentation", "process", "__init__.py")
        shown = subprocess.run(
            ["git", "show", f"{commit}:src/opentelemetry/instrumentation/process/__init__.py"],
            cwd=BENCHMARKS.parent,
            capture_output=True,
            text=True,
            check=True,
        )
        assert package.read_text() == shown.stdout
        return {"collections": {}}

    monkeypatch.setattr(instructions, "measure", measure)
    assert instructions.beside(commit) == {"collections": {}}
    assert len(seen) == 1 and not Path(seen[0]).exists()  # a folder of its own, removed
    assert instructions.beside("0" * 40) is None and len(seen) == 1


def test_instruction_counts_are_compared_on_the_same_interpreter_only(
    instructions: ModuleType, monkeypatch: Any
) -> None:
    _, entry = _recorded(instructions)
    monkeypatch.setattr(instructions, "key", lambda _info: "CPython 3.99 on elsewhere")
    passed, said = instructions.check(entry, {"versions": {}})
    assert passed and said == "not compared: no counts recorded for CPython 3.99 on elsewhere"


def test_the_readme_and_the_application_cost_page_say_the_recorded_cost(
    instructions: ModuleType,
) -> None:
    pytest.importorskip("pyperf")  # app_cost times with it; the matrix cells lack it
    import app_cost

    said = app_cost.summary(instructions.latest())
    readme = (BENCHMARKS.parent / "README.md").read_text()
    found = app_cost.BLOCK.search(readme)
    assert found is not None and " ".join(found.group(2).split()) == said
    page = (BENCHMARKS.parent / "docs" / "application-cost.md").read_text()
    assert f"**In short.** {said}" in page


def test_the_runtime_page_gives_the_recorded_probe_counts(instructions: ModuleType) -> None:
    """docs/runtime.md's instructions per collection and per loop iteration are the record's."""
    between = instructions.latest()["between"]
    page = (BENCHMARKS.parent / "docs" / "runtime.md").read_text()

    def per(mode: str, work: str) -> float:
        return float(between[mode][work]["median"]) / instructions.PROBES[work].ops

    rows = {
        "none (the SDK alone)": per("sdk", "gc_collect0"),
        "an empty Python callback": per("gc_callback", "gc_collect0"),
        "the package's defaults": per("defaults", "gc_collect0"),
        "... with `gc_pause_histogram=True`": per("gc_pause_histogram", "gc_collect0"),
        "none (the defaults)": per("defaults", "callbacks"),
        "`event_loop=True` (delays, utilisation and stalls: one hook)": per(
            "event_loop", "callbacks"
        ),
    }
    for label, n in rows.items():
        assert f"| {label} | {n:,.0f} | " in page, label
    assert "python benchmarks/instructions.py --suite probes" in page


def test_one_suite_counted_again_is_printed_over_the_record(instructions: ModuleType) -> None:
    """``instructions.py --suite NAME``: that suite's children only, its table over the record."""
    assert instructions.plan(False, "probes").suites == ("probes",)
    assert instructions.plan(False, "probes").configs == ()
    only = instructions.plan(False, "collections")
    assert only.suites == () and "default" in only.configs
    assert all(k.startswith("collection/") for k in instructions.jobs(only))
    entry = instructions.latest()
    again = json.loads(json.dumps(entry["between"]["defaults"]["gc_collect0"]))
    again["median"] *= 2
    shown = instructions.page(
        instructions.merged({"between": {"defaults": {"gc_collect0": again}}, "collections": {}})
    )
    per = again["median"] / instructions.PROBES["gc_collect0"].ops
    assert (
        f"| `gc_collect0` | gc.collect(0) | `defaults` | {per:,.0f} ("
        in shown["instructions_probes"]
    )
    assert instructions.latest() == entry  # the record is left alone


def test_the_gate_allows_the_recorded_runs_and_its_slack_and_catches_one_percent_above_2m(
    instructions: ModuleType, monkeypatch: Any
) -> None:
    """A count passes within the recorded runs' range widened by ``TOLERANCE`` of it (at least
    ``FLOOR`` instructions), and 1% more fails every gated count above two million."""
    key, entry = _recorded(instructions)
    monkeypatch.setattr(instructions, "key", lambda _info: key)
    monkeypatch.setattr(instructions, "beside", lambda _commit: entry)
    small = entry["collections"]["connections"]
    slack = max(instructions.TOLERANCE * small["median"], instructions.FLOOR)
    for value, ok in (
        (max(small["runs"]) + slack - 50, True),
        (max(small["runs"]) + slack + 50, False),
    ):
        found = json.loads(json.dumps(entry))
        found["collections"]["connections"]["median"] = value
        passed, said = instructions.check(found, {"versions": entry["versions"]})
        assert passed is ok, said
        assert ok or said.endswith(f"If intended, count again: {instructions.REGENERATE}")
    gated = instructions.gated_entries(entry)
    # 1% of a count below about 2 million instructions is within the floor.
    assert all(instructions.caught(v) for v in gated.values() if v["median"] > 2e6), gated
    said = f"{instructions.TOLERANCE:.1%} of the count, and at least {instructions.FLOOR:,} "
    for page in ("benchmarks.md", "application-cost.md"):  # the pages state the slack
        text = " ".join((BENCHMARKS.parent / "docs" / page).read_text().split())
        assert said.replace("the count", "a count") in text or said in text, page
    assert min(v["median"] for v in gated.values()) == small["median"]  # the smallest
    default = entry["collections"]["default"]
    assert not instructions.caught(default, instructions.TOLERANCE)  # within the slack


def test_every_counted_child_starts_with_the_same_strings_whatever_the_shell(
    instructions: ModuleType, monkeypatch: Any
) -> None:
    """The shell's variables, its PATH and the checkout's path reach no child's count: one
    variable more moved a collection by 10,000 instructions (docs/application-cost.md)."""
    monkeypatch.setenv("PATH", "/opt/elsewhere/bin:/usr/bin")
    monkeypatch.setenv("SOMETHING_ELSE", "1")
    monkeypatch.setenv("PYTHONPATH", "/checkout/src")
    env = instructions.child_env()
    assert env == {
        "PATH": os.defpath,
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": f"{instructions.HERE}{os.pathsep}/checkout/src",
    }
    sizes = set()
    for where in ("/a", "/tmp/tmp.0123456789/" + "x" * 300):
        argv = [f"{where}/.venv/bin/python", f"{where}/benchmarks/instructions.py", "child"]
        padded = instructions.padded({**env, "RUNTIME": where}, argv)
        assert {k: v for k, v in padded.items() if k != "INSTRUCTIONS_PAD"} == {
            **env,
            "RUNTIME": where,
        }
        strings = [*argv, *(f"{k}={v}" for k, v in padded.items())]
        sizes.add(sum(len(os.fsencode(s)) + 1 for s in strings))
    assert sizes == {8192}


def test_an_empty_gc_callback_alone_costs_allocation_more_than_the_goal_allows(
    instructions: ModuleType,
) -> None:
    """The cost page's reason for the missed allocation goal, held to the record it shows."""
    pytest.importorskip("pyperf")  # app_cost times with it; the matrix cells lack it
    import app_cost

    _, entry = _recorded(instructions)
    empty = instructions.ratio(entry, "gc_callback", "allocation")
    assert empty is not None
    assert empty - 1 > app_cost.OVER_THE_PEER["allocation"]
    assert f"{empty:.4f})" in (BENCHMARKS.parent / "docs" / "application-cost.md").read_text()
