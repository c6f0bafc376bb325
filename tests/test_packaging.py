"""What a package index shows and ships: the license, the project URLs, the sdist.

The wheel and the sdist are built here with hatchling, the project's build
backend, into a temporary folder.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
URLS: dict[str, str] = PYPROJECT["project"]["urls"]
REPO_URL = URLS["Source"]
# The MD5 of the Apache License 2.0 text as the ASF publishes it (LICENSE-2.0.txt).
APACHE_2_MD5 = "3b83ef96387f14655fc854ddc3c6bd57"
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.md5(text).hexdigest() == APACHE_2_MD5
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_project_urls_share_one_repository() -> None:
    assert set(URLS) >= {"Homepage", "Documentation", "Source", "Issues"}
    for name, url in URLS.items():
        assert url.startswith(REPO_URL), f"{name} = {url} is not under {REPO_URL}"


def _links(path: Path) -> list[str]:
    return MARKDOWN_LINK.findall(path.read_text())


def test_readme_links_are_absolute() -> None:
    """PyPI renders the README away from the repository: a relative link breaks there."""
    links = _links(ROOT / "README.md")
    assert links, "the README links to nothing: update this test"
    relative = [link for link in links if not re.match(r"https?://", link)]
    assert not relative, f"relative links in README.md: {relative}"


def test_links_to_this_project_use_one_address() -> None:
    """Every link to this project's own repository starts with pyproject's Source URL."""
    project = "/opentelemetry-instrumentation-process"
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in files:
        for link in _links(path):
            if "github.com" in link and project in link:
                assert link.startswith(REPO_URL + "/") or link == REPO_URL, (path.name, link)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if shutil.which("hatchling", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("hatchling is not installed (it comes with the test extra)")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "hatchling"), "build", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"build failed:\n{done.stdout}\n{done.stderr}"
    yield out


def test_wheel_has_the_license_and_the_urls(built: Path) -> None:
    (wheel,) = built.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(metadata).decode())
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert licenses, names
        assert zf.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
    assert meta["License-Expression"] == "Apache-2.0"
    shown = {
        value.split(",", 1)[0]: value.split(",", 1)[1].strip()
        for value in meta.get_all("Project-URL") or []
    }
    assert shown == URLS


def _make_paths(makefile: str) -> set[str]:
    """Files and folders of the repository that the Makefile's recipes name."""
    found = set(
        re.findall(
            r"((?:benchmarks|examples|scripts|docs|tests|constraints|\.ci|\.github)/[\w./-]*)",
            makefile,
        )
    )
    return {path.rstrip("/") for path in found if not path.startswith("docs/_build")}


def test_sdist_holds_what_its_makefile_needs(built: Path) -> None:
    (sdist,) = built.glob("*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {name.split("/", 1)[1] for name in tf.getnames() if "/" in name}
    folders = {str(Path(n).parent) for n in names} | names
    makefile = (ROOT / "Makefile").read_text()
    needed = _make_paths(makefile) | {"LICENSE", "README.md", "pyproject.toml", "Makefile"}
    if "/nox " in makefile:  # the version matrix: its sessions and their constraints
        needed |= {"noxfile.py", "constraints/lowest.txt"}
    assert "benchmarks/run.py" in needed and "scripts/get-servers.sh" in needed
    missing = sorted(p for p in needed if p not in folders)
    assert not missing, f"the sdist lacks what its Makefile uses: {missing}"
    # Whatever the tests, benchmarks and docs import or read comes along: every
    # tracked file under those folders.
    tracked = subprocess.run(
        [
            "git",
            "ls-files",
            "src",
            "tests",
            "docs",
            "examples",
            "scripts",
            "benchmarks",
            ".ci",
            "constraints",
            ".github",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if tracked.returncode == 0 and tracked.stdout:
        lost = sorted(set(tracked.stdout.split()) - names)
        assert not lost, f"tracked files missing from the sdist: {lost}"
    assert not any(n.startswith(("docs/_build", ".venv", ".cache")) for n in names)
