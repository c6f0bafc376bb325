"""Sphinx configuration: furo theme, Markdown pages (MyST), generated reference tables.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (``make docs``).
The tables of metrics, options, errors and the migration are generated while
the docs build, by the directives in ``_ext/process_docs.py``, from the
installed package: nothing in them is copied by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

from opentelemetry.instrumentation.process import __version__  # noqa: E402

project = "opentelemetry-instrumentation-process"
author = "opentelemetry-instrumentation-process authors"
copyright = "the opentelemetry-instrumentation-process authors"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "process_docs",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "furo"
html_title = f"{project} {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {"navigation_with_keys": True}
