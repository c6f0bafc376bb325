"""The package's declarations, as the text a fresh interpreter can be compared with.

A declaration is a module-level constant (an upper-case name, public or
private): the metric table, the sources, the options' forms, what the
platform is. They are computed once, at import, from data; the same code
must compute the same in every interpreter, whatever its hash seed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import re
import sys
from types import FunctionType, ModuleType
from typing import Any

PACKAGE = "opentelemetry.instrumentation.process"
_CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_DEPTH = 8


def module_names() -> list[str]:
    """Every module of the package that imports here (an optional dependency may be missing)."""
    package = importlib.import_module(PACKAGE)
    names = [PACKAGE]
    for found in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
        try:
            importlib.import_module(found.name)
        except ImportError:
            continue
        names.append(found.name)
    return names


def declarations() -> dict[str, str]:
    """``module.NAME`` -> its value, written out with sets sorted and addresses left out."""
    names = module_names()
    assert importlib.import_module(f"{PACKAGE}.catalog").PER_CHILD  # built at first use
    out = {}
    for name in names:
        module = sys.modules[name]
        for attribute in dir(module):  # a lazy attribute (``__getattr__``) resolved too
            getattr(module, attribute)
        for key, value in vars(module).items():
            if _CONSTANT.fullmatch(key) and not isinstance(value, ModuleType):
                out[f"{name}.{key}"] = written(value)
    return out


def written(value: Any, depth: int = 0) -> str:
    """``value`` as text that depends on neither the hash seed nor where objects sit."""
    if depth > _DEPTH:
        return "..."
    more = functools.partial(written, depth=depth + 1)
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(map(more, value))) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{more(k)}: {more(v)}" for k, v in value.items()) + "}"
    if type(value) in (list, tuple):
        return "[" + ", ".join(map(more, value)) + "]"
    if isinstance(value, functools.partial):
        return f"partial({more(value.func)}, {more(value.args)}, {more(value.keywords)})"
    if isinstance(value, FunctionType):
        cells = [c.cell_contents for c in value.__closure__ or () if _filled(c)]
        return f"{value.__module__}.{value.__qualname__}{more(cells) if cells else ''}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return more(value)
    fields = getattr(value, "_fields", None)  # a Record or a NamedTuple
    if isinstance(fields, tuple) and not isinstance(value, type):
        shown = ", ".join(f"{f}={more(getattr(value, f))}" for f in fields)
        return f"{type(value).__name__}({shown})"
    if type(value).__repr__ is object.__repr__ and not isinstance(value, type):
        return f"{type(value).__name__}{more(_state(value))}"  # its fields, not its address
    return _ADDRESS.sub("", repr(value))


def _state(value: Any) -> dict[str, Any]:
    """The attributes of a plain object: its slots' and its ``__dict__``'s."""
    slots = [s for c in type(value).__mro__ for s in getattr(c, "__slots__", ())]
    found = {s: getattr(value, s) for s in slots if s != "__dict__" and hasattr(value, s)}
    return {**found, **getattr(value, "__dict__", {})}


def _filled(cell: Any) -> bool:
    try:
        return cell.cell_contents is not cell
    except ValueError:  # a closure variable not bound yet
        return False
