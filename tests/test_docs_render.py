"""The built docs, as a reader sees them: every page in a real headless Chromium.

Each page is laid out at a desktop width (1280 px) and a phone width (390 px,
mobile emulation), and fails where:

- a code block is cut off (wider than its box, with no scrollbar), or, at the
  desktop width, needs a scrollbar at all;
- at the desktop width, a table is wider than its text column (its right-hand
  columns would hide behind a scrollbar);
- the page, or anything in its text column, reaches past the viewport without a
  scrollbar to reach it;
- an inline identifier (code without blanks) is split across lines although it
  would fit on one line of the text column.

The pages come from ``DOCS_HTML`` (``make test`` passes ``docs/_build/html``
after its docs step), else from a fresh build. The browser is Debian's
``chromium`` (``scripts/get-browser.sh``) or ``CHROMIUM_BIN``; without one these
tests skip, loudly, except under ``CI=true``, where they fail.
``DOCS_SCREENSHOTS=<folder>`` saves a full-page PNG of every page and width.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .support.browser import Chromium, Page, find_chromium

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
CHECKS = (Path(__file__).parent / "layout_checks.js").read_text()
IN_CI = os.environ.get("CI", "").lower() == "true"
# Every page of the docs, and the two pages Sphinx adds.
PAGES = [*sorted(p.stem for p in DOCS.glob("*.md")), "genindex", "search"]


@dataclass(frozen=True)
class Viewport:
    name: str
    width: int
    height: int
    mobile: bool
    code_must_fit: bool


DESKTOP = Viewport("desktop", 1280, 900, mobile=False, code_must_fit=True)
PHONE = Viewport("phone", 390, 844, mobile=True, code_must_fit=False)


@pytest.fixture(scope="module")
def html() -> Iterator[Path]:
    given = os.environ.get("DOCS_HTML")
    if given:
        folder = Path(given).resolve()
        assert (folder / "index.html").is_file(), f"DOCS_HTML={given} holds no built docs"
        yield folder
        return
    pytest.importorskip("sphinx", reason="the docs extra is not installed")
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [str(BIN / "sphinx-build"), "-W", "--keep-going", "-q", "-b", "html", str(DOCS), out],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"docs build failed:\n{done.stdout}\n{done.stderr}"
        yield Path(out)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    binary, why = find_chromium()
    if binary is None:
        if IN_CI:
            pytest.fail(f"CI=true and no browser for the docs render check: {why}", pytrace=False)
        pytest.skip(f"DOCS NOT CHECKED IN A BROWSER: {why}")
    log = tmp_path_factory.mktemp("chromium") / "chromium.log"
    chromium = Chromium(binary, log)
    try:
        yield chromium
    finally:
        chromium.close()


def problems_on(browser: Chromium, url: str, view: Viewport, shot: Path | None) -> list[Any]:
    page: Page = browser.page(view.width, view.height, view.mobile)
    try:
        page.open(url)
        found: list[Any] = page.evaluate(f"({CHECKS})({'true' if view.code_must_fit else 'false'})")
        if shot is not None:
            page.screenshot(shot)
        return found
    finally:
        page.close()


def describe(found: list[Any]) -> str:
    return "\n".join(f"  {p['kind']}: {p['what']} ({p['detail']})" for p in found)


@pytest.mark.parametrize("view", [DESKTOP, PHONE], ids=lambda v: v.name)
@pytest.mark.parametrize("name", PAGES)
def test_page_reads_well(browser: Chromium, html: Path, name: str, view: Viewport) -> None:
    page = html / f"{name}.html"
    assert page.is_file(), f"{name}.html was not built"
    shots = os.environ.get("DOCS_SCREENSHOTS")
    shot = None
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        shot = Path(shots) / f"{name}-{view.width}.png"
    found = problems_on(browser, page.as_uri(), view, shot)
    assert not found, f"{name}.html at {view.width} px:\n{describe(found)}"


# The check itself: a page with each defect must fail it, and its fixed twin must pass.
BROKEN = """<!doctype html><html><head><meta name="viewport" content="width=device-width">
<style>body {{ margin: 0; font: 16px sans-serif; }} article {{ width: 300px; }}
td code {{ overflow-wrap: anywhere; }} pre {{ overflow: {pre_overflow}; }}</style></head>
<body><article>
<pre>{long_line}</pre>
<table><tr><td style="width: 40px"><code>cpu_frequency</code></td><td>x</td></tr></table>
<div style="width: {div_width}px">wide</div>
</article></body></html>"""


def _kinds(browser: Chromium, tmp_path: Path, view: Viewport, **fill: Any) -> set[str]:
    page = tmp_path / "page.html"
    page.write_text(BROKEN.format(**fill))
    return {p["kind"] for p in problems_on(browser, page.as_uri(), view, None)}


def test_the_check_catches_each_defect(browser: Chromium, tmp_path: Path) -> None:
    broken = _kinds(
        browser, tmp_path, PHONE, pre_overflow="hidden", long_line="x" * 200, div_width=900
    )
    assert broken == {
        "code block cut off",
        "content past the viewport",
        "page wider than the viewport",
        "identifier split across lines",
    }
    scrolled = _kinds(
        browser, tmp_path, PHONE, pre_overflow="auto", long_line="x" * 200, div_width=1
    )
    assert "code block cut off" not in scrolled
    assert _kinds(
        browser, tmp_path, DESKTOP, pre_overflow="auto", long_line="x" * 200, div_width=1
    ) >= {"code block needs a scrollbar"}


WIDE_TABLE = """<!doctype html><html><head><meta name="viewport" content="width=device-width">
<style>body {{ margin: 0; font: 16px sans-serif; }} article {{ width: 300px; }}
div.wrap {{ overflow-x: auto; }} td {{ white-space: nowrap; }}</style></head>
<body><article><div class="wrap"><table><tr>{cells}</tr></table></div></article></body></html>"""


def test_the_check_catches_a_table_wider_than_its_column(browser: Chromium, tmp_path: Path) -> None:
    """Even inside a wrapper that scrolls: a column behind a scrollbar is not read."""
    page = tmp_path / "table.html"
    page.write_text(WIDE_TABLE.format(cells="<td>a fairly long cell</td>" * 4))
    found = problems_on(browser, page.as_uri(), DESKTOP, None)
    assert [p["kind"] for p in found] == ["table wider than its column"]
    page.write_text(WIDE_TABLE.format(cells="<td>short</td>" * 2))
    assert problems_on(browser, page.as_uri(), DESKTOP, None) == []
    page.write_text(WIDE_TABLE.format(cells="<td>a fairly long cell</td>" * 4))
    assert problems_on(browser, page.as_uri(), PHONE, None) == []  # a phone may scroll it
