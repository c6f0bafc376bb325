"""The layout of ``src/``: no private name crosses a module, and no import cycle.

Derived from the source tree with ``ast``: every module of the package, and
every import in it, those inside functions and under ``TYPE_CHECKING`` too
(a lazy import is still a dependency; hoisting it must not break the package).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "opentelemetry" / "instrumentation" / "process"
CONTRIB_PACKAGE_FILE = "package"
"""``package.py``: opentelemetry-python-contrib's scripts read its ``_instruments`` and
``_supports_metrics`` by name (scripts/generate_instrumentation_readme.py), so the
instrumentor imports them as every contrib instrumentation does."""


class Module:
    __slots__ = ("is_package", "name", "path", "tree")

    def __init__(self, name: str, path: Path, is_package: bool) -> None:
        self.name = name
        self.path = path
        self.is_package = is_package
        self.tree = ast.parse(path.read_text(), str(path))


def modules(src: Path, package: Path) -> dict[str, Module]:
    """Every module under ``package``, by dotted name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


def _target(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(module: Module, known: Mapping[str, Module]) -> Iterator[tuple[str, str | None]]:
    """``(module imported, name taken from it or None)`` for each import of ``module``."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            target = _target(module, node)
            if target not in known:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub, None) if sub in known else (target, alias.name)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(known: Mapping[str, Module]) -> list[str]:
    """Each private name one module takes from another: imported, or read through the module."""
    found = []
    for module in known.values():
        bound: dict[str, str] = {}  # local name -> module of the package it stands for
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                target = _target(module, node)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in known:
                        bound[alias.asname or alias.name] = sub
                    elif (
                        target in known
                        and _private(alias.name)
                        and target.rpartition(".")[2] != CONTRIB_PACKAGE_FILE
                    ):
                        found.append(f"{module.name} imports {alias.name} from {target}")
                    if sub in known and _private(alias.name):
                        found.append(f"{module.name} imports the private module {sub}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known and alias.asname:
                        bound[alias.asname] = alias.name
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _private(node.attr)
                and bound[node.value.id] != module.name
            ):
                found.append(
                    f"{module.name}:{node.lineno} reads {node.attr} of {bound[node.value.id]}"
                )
    return found


def graph(known: Mapping[str, Module]) -> dict[str, set[str]]:
    """Which modules each module imports; importing ``a.b.c`` runs ``a.b`` too.

    A module's own packages are left out of that: they are already being imported.
    """
    edges: dict[str, set[str]] = {name: set() for name in known}
    for module in known.values():
        own = module.name.split(".")
        ancestors = {".".join(own[:i]) for i in range(1, len(own) + 1)}
        for target, _ in imports(module, known):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                up = ".".join(parts[:i])
                if up in known and (up == target or up not in ancestors):
                    edges[module.name].add(up)
        edges[module.name].discard(module.name)
    return edges


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """One import path around each cycle (each strongly connected set of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(_path_around(sorted(members), edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _path_around(members: list[str], edges: Mapping[str, set[str]]) -> list[str]:
    """A shortest path from the first member back to itself, inside ``members``."""
    start = members[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v] & set(members)):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    return members


KNOWN = modules(SRC, PACKAGE)
SOURCES_PACKAGE = "opentelemetry.instrumentation.process.sources"


def test_the_package_is_found() -> None:
    # The checks below look at something: every module, and the lazy imports too.
    assert len(KNOWN) > 40
    lazy = graph(KNOWN)["opentelemetry.instrumentation.process.sources.children"]
    assert "opentelemetry.instrumentation.process.sources.child_pass" in lazy


FRESH = (
    "import json, sys\nsys.path.insert(0, sys.argv[1])\n"
    "from tests.support.declarations import declarations\nprint(json.dumps(declarations()))"
)


def _declared(env: dict[str, str]) -> dict[str, str]:
    """The declarations of a fresh interpreter with ``env``."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(SRC.parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, str] = json.loads(done.stdout)
    return found


@pytest.mark.import_time
def test_every_interpreter_declares_the_same() -> None:
    # Declarations are computed once, at import, from data: two interpreters, with
    # their own hash seeds, compute the same. Under mutmut, the first runs the
    # original code: this is the test of the code that runs at import, which no
    # test run in this process can see (tests/support/mutmut_children.py).
    original = {k: v for k, v in os.environ.items() if k != "MUTANT_UNDER_TEST"}
    first = _declared(dict(original, PYTHONHASHSEED="0"))
    assert len(first) > 300 and "opentelemetry.instrumentation.process.metrics.METRICS" in first
    second = _declared(dict(os.environ, PYTHONHASHSEED="1"))
    assert second.keys() == first.keys()
    assert {k: v for k, v in second.items() if v != first[k]} == {}


def test_no_private_name_crosses_a_module() -> None:
    assert private_uses(KNOWN) == []


def test_no_import_cycle() -> None:
    assert cycles(graph(KNOWN)) == []


@pytest.mark.parametrize(
    ("files", "found"),
    [
        (
            {"a.py": "def f():\n    from . import b\n", "b.py": "from .a import f\n"},
            [["pkg.a", "pkg.b", "pkg.a"]],
        ),
        (
            {
                "a.py": "import typing\nif typing.TYPE_CHECKING:\n    from .sub import c\n",
                "sub/__init__.py": "",
                "sub/c.py": "from .. import a\n",
            },
            [["pkg.a", "pkg.sub.c", "pkg.a"]],
        ),
        ({"__init__.py": "from . import a\n", "a.py": "from . import b\n", "b.py": ""}, []),
        # sub/__init__ runs before sub.c: a cycle through a package's own import.
        (
            {
                "a.py": "from .sub.c import x\n",
                "sub/__init__.py": "from .. import a\n",
                "sub/c.py": "x = 1\n",
            },
            [["pkg.a", "pkg.sub", "pkg.a"]],
        ),
    ],
)
def test_the_cycle_check_finds_lazy_and_type_checking_imports(
    tmp_path: Path, files: dict[str, str], found: list[list[str]]
) -> None:
    for name, text in {"__init__.py": "", **files}.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert cycles(graph(modules(tmp_path, tmp_path / "pkg"))) == found


def test_the_private_check_finds_imports_and_reads(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_X = 1\n_Y = 2\nZ = 3\n")
    (pkg / "b.py").write_text("from .a import _X, Z\n")
    (pkg / "c.py").write_text("from . import a\n\ndef f():\n    return a._Y, a.Z\n")
    (pkg / "package.py").write_text("_instruments = ()\n")
    (pkg / "d.py").write_text("from .package import _instruments\n")
    assert private_uses(modules(tmp_path, pkg)) == [
        "pkg.b imports _X from pkg.a",
        "pkg.c:4 reads _Y of pkg.a",
    ]


def _declares_sources(module: Module) -> bool:
    for node in module.tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "SOURCES" for t in targets):
            return True
    return False


def test_every_module_that_declares_sources_is_joined() -> None:
    import importlib

    from opentelemetry.instrumentation.process.sources import SOURCES

    declaring = [
        m.name
        for m in KNOWN.values()
        if m.name.startswith(f"{SOURCES_PACKAGE}.") and _declares_sources(m)
    ]
    assert len(declaring) >= 5
    for name in declaring:
        for source in importlib.import_module(name).SOURCES:
            assert SOURCES.get(source.name) is source, f"{name}: {source.name} is not in SOURCES"
