"""The README's generated blocks: the table of options and the list of default metrics.

- **options**: one row per field of ``ProcessMetricsOptions`` (``options.py``):
  its name, type and default, its environment variable and how that is written
  (its ``Form``), and the first paragraph of its docstring. The configuration
  reference builds its own, fuller table from the same declarations
  (``process_docs.OptionTable``).
- **defaults**: the metrics on by default (``default=True`` in ``metrics.py``),
  by the group of the metric reference they are listed in.

Run ``python docs/_ext/readme_blocks.py`` to rewrite both blocks in README.md
(``make check`` does, and says which it rewrote); ``--check`` only says
whether they are up to date (the tests run that, so CI fails on a stale one).
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from opentelemetry.instrumentation.process import options as options_module
from opentelemetry.instrumentation.process.environment import ENV_VARS, FORMATS
from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.options import (
    AUTO_WORD,
    BOOLEAN,
    OPTION_NAMES,
    ProcessMetricsOptions,
    declared,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COMMAND = "`python docs/_ext/readme_blocks.py`"


def begin(block: str, source: str) -> str:
    """The line that opens ``block`` in the README."""
    return f"<!-- {block}: generated from src/.../{source} by {COMMAND}; do not edit by hand -->"


def end(block: str) -> str:
    """The line that closes ``block`` in the README."""
    return f"<!-- end of {block} -->"


BEGIN, END = begin("options", "options.py"), end("options")


def docstrings() -> dict[str, str]:
    """Each field's docstring, as written under it in ``options.py``."""
    tree = ast.parse(Path(options_module.__file__).read_text())
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == ProcessMetricsOptions.__name__:
            body = node.body
            for here, after in itertools.pairwise(body):
                if (
                    isinstance(here, ast.AnnAssign)
                    and isinstance(here.target, ast.Name)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    found[here.target.id] = after.value.value
    return found


def summary(doc: str) -> str:
    """The first paragraph of ``doc`` on one line, with ``rst code`` as `markdown code`."""
    paragraph = doc.strip().split("\n\n")[0]
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(paragraph.split()))


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def row(field: dataclasses.Field[Any], doc: str) -> str:
    default = _default(field)
    kind = "Iterable[str]" if isinstance(default, tuple) else str(field.type)
    shown = "none" if default in ((), {}) else f"`{default!r}`"
    var = ENV_VARS.get(field.name)
    env = "none" if var is None else f"`{var}`"
    if var is not None and declared(field.name).form is not BOOLEAN:
        env += f": {FORMATS[field.name]}"
    cells = [f"`{field.name}: {kind}`", env, shown, summary(doc)]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _names(kind: str) -> str:
    """The options whose form is of ``kind``, as `a`, `b` and `c`."""
    names = [f"`{n}`" for n in OPTION_NAMES if declared(n).form.kind == kind]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def spelling_rule() -> str:
    """The one rule for words, from the forms: the README and the configuration reference."""
    return (
        "**Words are read alike from code and from the environment**: in any case, with "
        "blanks around them ignored, and with the same spellings. A boolean option takes "
        f"`True` or `False` from code, and from code or its variable one of {BOOLEAN.format}; "
        f"{_names('tristate')} also takes `{AUTO_WORD}` (`None` from code); "
        f"{_names('choice')} take one of their words, kept in lower case. Metric names and "
        "globs in `include` and `exclude` are matched as written: case matters."
    )


def table() -> str:
    """The README's block: the markers, the header, one row per option, and the rule of words."""
    docs = docstrings()
    header = "| option | environment variable | default | what it does |\n|---|---|---|---|"
    lines = [BEGIN, header]
    lines += [row(f, docs[f.name]) for f in dataclasses.fields(ProcessMetricsOptions)]
    return "\n".join([*lines, "", spelling_rule(), END])


GROUP_WORDS = {
    "process": "this process",
    "limits": "its limits",
    "cpython": "the CPython runtime",
    "system.cpu": "the host's CPUs",
    "system.memory": "the host's memory",
    "self": "what a collection costs",
}
"""How the list names each group of the metric table that has default metrics."""


def defaults() -> str:
    """The README's list of the metrics on by default, by group, in table order."""
    groups: dict[str, list[str]] = {}
    for metric in METRICS:
        if metric.default:
            groups.setdefault(metric.group, []).append(f"`{metric.name}`")
    parts = [f"{GROUP_WORDS.get(g, g)}: {', '.join(names)}" for g, names in groups.items()]
    count = sum(len(names) for names in groups.values())
    text = f"On by default ({count} metrics; some exist only on some platforms): " + "; ".join(
        parts
    )
    lines = textwrap.wrap(text + ".", width=78, break_on_hyphens=False, break_long_words=False)
    return "\n".join([begin("defaults", "metrics.py"), *lines, end("defaults")])


BLOCKS = {"options": table, "defaults": defaults}
"""Each generated block of the README, by name, and what makes it."""


def in_readme(text: str, block: str = "options") -> str:
    """The generated ``block`` as it stands in ``text`` (the README), markers included."""
    first = f"<!-- {block}: generated"
    start, stop = text.index(first), text.index(end(block)) + len(end(block))
    return text[start:stop]


def main(argv: list[str]) -> int:
    text = README.read_text()
    stale = [name for name, make in BLOCKS.items() if in_readme(text, name) != make()]
    if "--check" in argv:
        for name in stale:
            print(f"README.md: the {name} block is stale: run {COMMAND}", file=sys.stderr)
        return 1 if stale else 0
    for name in stale:
        text = text.replace(in_readme(text, name), BLOCKS[name]())
        print(f"README.md: the {name} block rewritten from the declarations")
    if stale:
        README.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
