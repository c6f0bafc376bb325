"""Markdown tables from the figures of ``analysis.analyse``, and the docs page."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import configs
from analysis import OURS_ORDER, TARGETS, count_checks, fmt_ratio, targets


def _us(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:,.1f}"


def _pct(a: float, base: float) -> str:
    return "baseline" if a == base else f"{(a - base) / base * 100:+.1f}%"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def tables(results: dict[str, Any]) -> dict[str, str]:
    """Every table of the report, by placeholder name."""
    s, shapes, info = results["stats"], results["shapes"], results["info"]
    t: dict[str, str] = {}
    v = info["versions"]
    t["machine"] = table(
        ["", ""],
        [
            [
                "CPU",
                f"{info['cpu_model']} ({info['hypervisor']} guest)"
                if info["hypervisor"] != "none reported"
                else info["cpu_model"],
            ],
            ["CPUs", f"{info['logical_cpus']} logical, {info['physical_cores']} cores"],
            ["Memory", f"{info['memory_gib']} GiB"],
            ["OS", f"{info['os']}, kernel {info['kernel']}"],
            [
                "CPU frequency in sysfs",
                "yes" if info["sysfs_cpufreq"] else "no (psutil falls back to /proc/cpuinfo)",
            ],
            ["Python", info["python"]],
            *[[k, v[k]] for k in v],
            [
                "Load average at start / end",
                f"{_load(info['loadavg_start'])} / {_load(info.get('loadavg_end'))}",
            ],
            [
                "Run",
                f"{info['date']}, {info['mode']}, {info.get('duration_s', '?')} s, "
                f"`{info['argv']}`",
            ],
            [
                "Rounds",
                f"{results['rounds']} interleaved rounds, "
                f"{info['plan']['pause'] * 1e3:g} ms pause before each collection; shortest gap "
                f"between two collections of one subject {results['min_gap_s']:.2f} s",
            ],
        ],
    )
    t["configurations"] = table(
        ["Configuration", "Options", "Instruments", "Points", "Snapshot sources"],
        [
            [
                f"`{n}`",
                configs.OURS_CODE[n],
                shapes[n]["instruments"],
                shapes[n]["points"],
                len(shapes[n]["sources"]),
            ]
            for n in OURS_ORDER
        ],
    )
    base = s["everything"]["median"]
    ordered = sorted(OURS_ORDER, key=lambda n: s[n]["median"])
    t["main"] = table(
        ["Configuration", "us/collection", "+/-", "vs everything", "Points"],
        [
            [
                f"`{n}`",
                _us(s[n]["median"]),
                _us(s[n]["mad"]),
                _pct(s[n]["median"], base),
                shapes[n]["points"],
            ]
            for n in ordered
        ],
    )
    others = [n for n in s if n not in OURS_ORDER]
    t["others"] = table(
        ["Subject", "What", "Instruments", "Points", "us/collection", "+/-"],
        [
            [
                f"`{n}`",
                shapes[n]["description"],
                shapes[n]["instruments"] or "",
                shapes[n]["points"] or "",
                _us(s[n]["median"]),
                _us(s[n]["mad"]),
            ]
            for n in others
        ],
    )
    r = results["ratios"]
    t["ratios"] = table(
        [
            "Ours",
            "us",
            "peer_default / ours",
            "peer_process / ours",
            "prometheus_client / ours",
            "ours / floor_default",
        ],
        [
            [
                f"`{n}`",
                _us(s[n]["median"]),
                fmt_ratio(r[n]["peer_default"]),
                fmt_ratio(r[n]["peer_process"]),
                fmt_ratio(r[n]["prometheus_client"]),
                fmt_ratio(r[n]["floor_default"]),
            ]
            for n in OURS_ORDER
        ],
    )
    t["targets"] = table(
        ["Target", "Required", "Measured", "Verdict"],
        [[x["target"], x["required"], x["measured"], _verdict(x)] for x in targets(results)],
    )
    o = results["overhead"]
    rows = []
    for name in ("process_set", "default"):
        row = o[name]
        kernel = f"kernel_{name}"
        rows.append(
            [
                f"`{name}`",
                _us(s[name]["median"]),
                _us(s[f"floor_{name}"]["median"]),
                _us(row["beyond_floor_us"]["value"]),
                _us(s[f"bare_{name}"]["median"]),
                _us(s[f"procfs_{name}"]["median"]) if kernel in s else "n/a",
                _us(s[kernel]["median"]) if kernel in s else "n/a",
                fmt_ratio(row["beyond_floor_vs_bare"]),
                fmt_ratio(row.get("bare_vs_procfs")),
                fmt_ratio(row.get("bare_vs_kernel")),
                fmt_ratio(row.get("beyond_floor_vs_kernel")),
            ]
        )
    t["overhead"] = table(
        [
            "Set",
            "Ours us",
            "SDK floor us",
            "Ours - floor us",
            "Bare psutil reads us",
            "Procfs reads us",
            "Kernel floor us",
            "(ours - floor) / bare",
            "bare / procfs",
            "bare / kernel",
            "(ours - floor) / kernel",
        ],
        rows,
    )
    labels = {
        "measured": "ours, measured",
        "psutil_bound": "ours at its least with psutil: SDK floor + bare psutil reads",
        "procfs_bound": "ours at its least reading procfs without psutil: SDK floor + procfs reads",
        "kernel_bound": "ours at its least with procfs kept open: SDK floor + kernel floor",
        "floor_only": "SDK floor alone (reading nothing)",
    }
    bounds = results["bounds"]
    t["bounds"] = table(
        ["If a collection of ours cost", "peer_process / that", "peer_default / that"],
        [
            [
                labels[k],
                fmt_ratio(bounds["process_set"].get(k)),
                fmt_ratio(bounds["default"].get(k)),
            ]
            for k in labels
        ],
    )
    t["counts"] = counts_table(results)
    t["opens_default"] = paths_table(results, "default")
    t["opens_peer_process"] = paths_table(results, "peer_process")
    t["opens_everything"] = paths_table(results, "everything")
    b = results["back_to_back"]
    t["back_to_back"] = table(
        ["Subject", "Paused us", "Back-to-back us", "Back-to-back / paused"],
        [
            [
                f"`{n}`",
                _us(s[n]["median"]),
                _us(b[n]["median"]),
                f"{b[n]['median'] / s[n]['median']:.2f}",
            ]
            for n in s
            if n in b
        ],
    )
    t["breakdown"] = breakdown_table(results)
    t["frequency_cost"] = frequency_cost(results)
    t["percpu_synthetic"] = synthetic_table(results)
    t["threads"] = threads_table(results)
    t["metrics"] = metrics_table(results)
    t["rss"] = rss_table(results)
    t["leaks"] = leaks_table(results)
    return t


def _load(value: Any) -> str:
    return ", ".join(f"{x:.2f}" for x in value) if value else "n/a"


def _verdict(row: Mapping[str, Any]) -> str:
    unsure = "" if row.get("sure", True) else "; the 95% interval straddles the target"
    if row["met"]:
        return "**met**" + (f" ({row['by']:.3f}x the target{unsure})" if row["by"] else "")
    return "**missed**" + (f" (at {row['by']:.3f} of the target{unsure})" if row["by"] else "")


def counts_table(results: dict[str, Any]) -> str:
    audit = results["counts"]["audit"]
    st = results["counts"].get("strace") or {}
    rows = []
    for name, a in audit.items():
        strace = st.get(name)
        rows.append(
            [
                f"`{name}`",
                f"{max(a['psutil_calls'])} ({a['psutil_distinct']} distinct)",
                _span(a["opens"]),
                f"{strace['opens']:g}" if strace else "n/a",
                a["distinct_paths"],
                _span(a["frequency_reads"])
                + (f" / {strace['frequency_reads']:g}" if strace else ""),
            ]
        )
    return table(
        [
            "Subject",
            "psutil calls",
            "Opens (audit hook)",
            "Opens (strace)",
            "Distinct files",
            "Frequency reads (audit / strace)",
        ],
        rows,
    )


def _span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def paths_table(results: dict[str, Any], name: str) -> str:
    a = results["counts"]["audit"][name]
    st = (results["counts"].get("strace") or {}).get(name, {}).get("paths", {})
    paths = dict(a["paths"])
    rows = []
    for p in sorted(set(paths) | set(st), key=lambda x: (-paths.get(x, 0), x)):
        traced = f"{st[p]:g}" if p in st else ("0" if st else "n/a")
        rows.append([f"`{p}`", paths.get(p, 0), traced])
    calls = ", ".join(f"`{k}` x{v}" for k, v in a["psutil_breakdown"].items())
    return table(["Path", "Opens (audit hook)", "Opens (strace)"], _fold(rows)) + (
        f"\n\npsutil calls: {calls or 'none'}."
    )


def _fold(rows: list[list[Any]]) -> list[list[Any]]:
    """Fold the per-process and per-thread paths of a host walk into one row each."""
    folded: dict[str, list[Any]] = {}
    order: list[str] = []
    for path, audit, strace in rows:
        key = re.sub(r"/task/\d+/", "/task/<tid>/", path)
        if key not in folded:
            folded[key] = [key, 0, 0.0 if strace != "n/a" else "n/a"]
            order.append(key)
        folded[key][1] += audit
        if strace != "n/a":
            folded[key][2] += float(strace)
    out = []
    for key in order:
        row = folded[key]
        out.append([row[0], row[1], f"{row[2]:g}" if row[2] != "n/a" else "n/a"])
    return out


def breakdown_table(results: dict[str, Any]) -> str:
    b = results["breakdown"]
    names = list(b)
    keys: list[str] = []
    for n in names:
        keys += [k for k in b[n]["paused"] if k not in keys]
    header = ["Part"]
    for n in names:
        header += [f"`{n}` paused us", f"`{n}` warm us"]
    rows = []
    for k in keys:
        row = [f"`{k}`"]
        for n in names:
            for mode in ("paused", "warm"):
                value = b[n][mode].get(k)
                row.append(_us(value) if value is not None else "")
        rows.append(row)
    return table(header, rows)


def frequency_cost(results: dict[str, Any]) -> str:
    f, host = results["frequency"], results["cpu_host"]
    cpus = host["cpus"]
    med = host["median_s"]
    audit = results["counts"]["audit"]
    rows = [
        [
            "`everything` - `everything_but_frequency`",
            _us(f["delta_everything_us"]["value"]),
            _us(f["delta_everything_us"]["value"] / cpus),
            fmt_ratio(f["everything"]),
        ],
        [
            "`cpu_with_frequency` - `cpu_usage_only`",
            _us(f["delta_cpu_us"]["value"]),
            _us(f["delta_cpu_us"]["value"] / cpus),
            fmt_ratio(f["cpu_with_frequency"]),
        ],
    ]
    for k in (
        "psutil.cpu_freq(percpu=True)",
        "read /proc/cpuinfo",
        "psutil.cpu_times()",
        "read /proc/stat",
    ):
        if k in med:
            rows.append([f"bare `{k}`", _us(med[k]), _us(med[k] / cpus), ""])
    reads = max(audit["cpu_with_frequency"]["frequency_reads"])
    return table(
        ["What", f"us per collection ({cpus} CPUs)", "us per CPU", "ratio with / without"],
        rows,
    ) + (
        f"\n\nFrequency reads per collection with frequency on: {reads:g} "
        f"(`/proc/cpuinfo`, {host['cpuinfo_bytes']:,} bytes here, about "
        f"{host['cpuinfo_bytes'] // max(1, cpus):,} per CPU)."
    )


def synthetic_table(results: dict[str, Any]) -> str:
    synth = results["cpu_synthetic"]
    if "rows" not in synth:
        return f"Skipped: {synth.get('skipped')}."
    rows = synth["rows"]
    cols = list(next(iter(rows.values())))
    return table(
        ["CPUs in the files", *[c.split("  ")[0] + " us" for c in cols]],
        [[n, *[_us(rows[n][c]) for c in cols]] for n in rows],
    )


def threads_table(results: dict[str, Any]) -> str:
    rows = []
    base: tuple[int, float] | None = None
    for row in results["threads"]["rows"]:
        d, p = row["default"], row["per_thread"]
        extra = p["median"] - d["median"]
        n = row["extra_threads"]
        if base is None:
            base = (n, extra)
        per = _us((extra - base[1]) / (n - base[0])) if n > base[0] else ""
        rows.append([n, _us(d["median"]), _us(p["median"]), p["points"], _us(extra), per])
    return table(
        [
            "Extra threads",
            "default us",
            "default + per_thread us",
            "Points with per_thread",
            "per_thread costs us",
            "us per extra thread",
        ],
        rows,
    )


def metrics_table(results: dict[str, Any]) -> str:
    return table(
        [
            "Metrics",
            "Last one added",
            "Sources",
            "Points",
            "Ours us",
            "SDK floor us",
            "Ours - floor us",
        ],
        [
            [
                r["k"],
                f"`{r['added']}`",
                r["sources"],
                r["points"],
                _us(r["median"]),
                _us(r["floor"]),
                _us(r["median"] - r["floor"]),
            ]
            for r in results["metric_sweep"]["rows"]
        ],
    )


def rss_table(results: dict[str, Any]) -> str:
    mib = 2**20
    rows = []
    for mode, m in results["rss"].items():
        rows.append(
            [
                f"`{mode}`",
                f"{m['sdk'] / mib:.1f}",
                f"{m['import_added'] / mib:.2f}",
                f"{(m['collected'] - m['import']) / mib:.2f}",
                f"{m['added'] / mib:.2f}",
            ]
        )
    return table(
        [
            "Child process",
            "RSS with bare SDK, MiB",
            "import adds, MiB",
            "instrument() + 3 collections add, MiB",
            "Total added, MiB",
        ],
        rows,
    )


def leaks_table(results: dict[str, Any]) -> str:
    rows = []
    for leak in results["leaks"]:
        v = leak["verdict"]
        cps = leak["checkpoints"]
        rows.append(
            [
                f"`{leak['config']}`",
                f"{leak['collections']:,}",
                ", ".join(f"{b:+,}" for _, b in cps),
                f"{v['growth']:+,} B",
                "no leak" if v["ok"] else "**GROWS**",
            ]
        )
    return table(
        [
            "Configuration",
            "Collections",
            "Traced growth at each tenth (bytes)",
            "First to last tenth",
            "Verdict",
        ],
        rows,
    )


def summary(results: dict[str, Any]) -> str:
    t = tables(results)
    parts = [
        "# Benchmark summary",
        "",
        "Generated by `benchmarks/run.py`; the method is in docs/benchmarks.md.",
        "",
    ]
    for name, body in t.items():
        parts += [f"## {name}", "", body, ""]
    return "\n".join(parts)


def smoke(results: dict[str, Any]) -> str:
    """The smoke run's whole report: the exact counts it asserts, and nothing timed.

    Its timings come from a few iterations on a busy machine: they prove only
    that every phase runs, so they are not shown.
    """
    checks = count_checks(results)
    info = results["info"]
    lines = [
        f"Benchmark SMOKE run: every phase ran a few times ({info['plan']['rounds']} rounds, "
        f"{info.get('duration_s', '?')} s); no timing is shown (`make bench` measures).",
        "Exact counts per collection, as asserted:",
    ]
    lines += [f"  {'ok  ' if c.ok else 'FAIL'} {c.what}: {c.measured}" for c in checks]
    failed = sum(not c.ok for c in checks)
    lines.append(f"Smoke run: {len(checks) - failed} of {len(checks)} count checks passed.")
    return "\n".join(lines)


def docs(results: dict[str, Any], template: str) -> str:
    t = tables(results)
    info = results["info"]
    s, shapes = results["stats"], results["shapes"]
    rows = {row["target"]: row for row in targets(results)}
    process_row = next(v for k, v in rows.items() if k.startswith("Equivalent process set"))
    bounds = results["bounds"]["process_set"]
    pr = results["ratios"]["process_set"]["peer_process"]
    if process_row["met"]:
        verdict = f"is met: {fmt_ratio(pr, 3)}"
        if not process_row["sure"]:
            verdict += ", though only just: the interval reaches below 1.1x"
    else:
        short = (1 - pr["value"] / TARGETS["process_vs_peer"]) * 100
        verdict = f"is missed by {short:.1f}%: {fmt_ratio(pr, 3)} against the 1.1x asked"
        if not process_row["sure"]:
            verdict += ", though the interval reaches above 1.1x"
    freq = results["frequency"]["delta_cpu_us"]["value"]
    floor_share = s["floor_process_set"]["median"] / s["process_set"]["median"]
    values = {
        **t,
        "process_verdict": verdict,
        "process_psutil_bound": fmt_ratio(bounds["psutil_bound"]),
        "process_kernel_bound": fmt_ratio(bounds.get("kernel_bound")),
        "process_procfs_bound": fmt_ratio(bounds.get("procfs_bound")),
        "process_floor_share": f"{floor_share:.0%}",
        "process_beyond": fmt_ratio(results["overhead"]["process_set"]["beyond_floor_vs_bare"]),
        "default_ratio": fmt_ratio(results["ratios"]["default"]["peer_default"]),
        "default_points": str(shapes["default"]["points"]),
        "peer_default_points": str(shapes["peer_default"]["points"]),
        "freq_us": _us(freq),
        "freq_per_cpu_us": _us(freq / results["cpu_host"]["cpus"]),
        "rounds": str(results["rounds"]),
        "pause_ms": f"{info['plan']['pause'] * 1e3:g}",
        "with_threads_n": str(configs.WITH_THREADS_N),
        "leak_collections": f"{info['plan']['leak_collections']:,}",
        "min_gap": f"{results['min_gap_s']:.2f}",
        "cpus": str(info["logical_cpus"]),
    }

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"docs template: unknown placeholder {key!r}")
        return values[key]

    return re.sub(r"\{\{(\w+)\}\}", fill, template)
