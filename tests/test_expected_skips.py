"""Every skip names what it waits for: the run fails on a skip with another reason."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import expected_skips

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def _run(tmp_path: Path, body: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """pytest on one test file, with this suite's conftest as a plugin."""
    (tmp_path / "test_one.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env.pop("PROCESS_TESTS_LOG_DIR", None)
    env.pop("NOX_CURRENT_SESSION", None)
    env.pop("PROCESS_TESTS_RUN_NAME", None)  # make check names its halves
    env.update(env_vars)
    plugins = ["-p", "no:cacheprovider", "-p", "tests.conftest"]
    where = ["--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_one.py")]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugins, *where],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_skip_with_a_vague_reason_fails_the_run(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        "import pytest\n"
        "def test_vague():\n    pytest.skip('asyncio.loops reports nothing on this host')\n"
        "def test_fine():\n    pytest.skip('uvloop is not installed')\n",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "skips with a reason not in tests/support/expected_skips.py" in done.stdout
    assert "test_vague: asyncio.loops reports nothing on this host" in done.stdout
    assert "test_fine" not in done.stdout.split("expected_skips.py =")[-1].split("A skip")[0]


def test_expected_skips_and_xfails_pass(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        "import pytest\n"
        "def test_fine():\n    pytest.skip('uvloop is not installed')\n"
        "@pytest.mark.xfail(strict=True, reason='a known bug')\n"
        "def test_known():\n    assert False\n",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped, 1 xfailed" in done.stdout


def test_a_quiet_run_logs_the_details_and_keeps_the_loud_skips(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = _run(
        tmp_path,
        "import pytest\n"
        "def test_fine():\n    pytest.skip('uvloop is not installed')\n"
        "def test_server():\n    pytest.skip('otelcol not found: set OTELCOL_BIN, or run it')\n"
        "@pytest.mark.xfail(strict=True, reason='a known bug')\n"
        "def test_known():\n    assert 1 + 1 == 3, 'the known traceback'\n",
        PROCESS_TESTS_LOG_DIR=str(logs),
        NOX_CURRENT_SESSION="unit-3.13(latest)",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    log = logs / "unit-3.13_latest_.log"
    assert "the known traceback" not in done.stdout and "uvloop" not in done.stdout
    assert "SKIPPED: otelcol not found: set OTELCOL_BIN, or run it" in done.stdout
    assert (
        f"2 skipped (package 1, server 1), 1 expected failure: reasons and tracebacks in {log}"
    ) in done.stdout
    assert "2 skipped, 1 xfailed" in done.stdout  # the counts stay
    text = log.read_text()
    assert "SKIPPED (package) test_one.py::test_fine: uvloop is not installed" in text
    assert "XFAIL test_one.py::test_known: a known bug" in text
    assert "the known traceback" in text


def _reason_text(node: ast.expr) -> str | None:
    """A literal reason; each ``{...}`` of an f-string stands as ``X``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "X"
            for v in node.values
        )
    return None


def _written_reasons() -> Iterator[tuple[str, int, str]]:
    """Every literal skip reason in the tests: pytest.skip(...), skipif and importorskip."""
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            called = node.func.attr
            if called not in ("skip", "skipif", "importorskip"):
                continue
            args = [k.value for k in node.keywords if k.arg in ("reason", "msg")]
            if called == "skip" and node.args:
                args.append(node.args[0])
            for arg in args:
                text = _reason_text(arg)
                if text is not None:
                    yield path.relative_to(REPO).as_posix(), node.lineno, text


def test_every_written_skip_reason_is_expected() -> None:
    found = list(_written_reasons())
    assert len(found) > 40  # the walk finds them
    unexpected = [f"{p}:{n}: {t}" for p, n, t in found if not expected_skips.expected(t)]
    assert unexpected == []


@pytest.mark.parametrize(
    "reason",
    [
        "asyncio.loops reports nothing on this host",
        "not reported on this host",
        "flaky here",
        "",
    ],
)
def test_vague_reasons_are_not_expected(reason: str) -> None:
    assert not expected_skips.expected(reason)
