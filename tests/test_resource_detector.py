"""The process_worker resource detector: a stable service.instance.id per worker slot."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource

from opentelemetry.instrumentation.process.group import keys
from opentelemetry.instrumentation.process.group.rundir import faults
from opentelemetry.instrumentation.process.resource import (
    NAMESPACE,
    SLOT_ATTRIBUTE,
    ProcessWorkerResourceDetector,
)

from .support.groupkids import Kid
from .support.internals import release_slot
from .support.planted import planted_symlink

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    release_slot()
    faults._faults.clear()
    yield
    release_slot()


def detected() -> dict[str, object]:
    return dict(ProcessWorkerResourceDetector().detect().attributes)


def spawn(kids: list[Kid]) -> dict[str, object]:
    kid = Kid(detected)
    kids.append(kid)
    found: dict[str, object] = kid.result
    found["pid"] = kid.pid
    kids[-1] = kid
    return found


def test_a_recycled_worker_gets_the_id_of_the_one_it_replaces(kids: list[Kid]) -> None:
    a, b = spawn(kids), spawn(kids)
    assert (a[SLOT_ATTRIBUTE], b[SLOT_ATTRIBUTE]) == (0, 1)
    assert a["service.instance.id"] != b["service.instance.id"]
    kids[0].kill()
    c = spawn(kids)
    assert c[SLOT_ATTRIBUTE] == 0
    assert c["service.instance.id"] == a["service.instance.id"]
    # The id is the UUIDv5 of host, parent and slot, as documented.
    expected = uuid.uuid5(NAMESPACE, f"{keys.host_id()}/{keys.parent_key(os.getpid())}/0")
    assert c["service.instance.id"] == str(expected)


def test_it_merges_into_a_resource_in_a_post_fork_hook(kids: list[Kid]) -> None:
    def post_fork() -> dict[str, object]:
        resource = Resource.create({"service.name": "shop"}).merge(
            ProcessWorkerResourceDetector().detect()
        )
        return dict(resource.attributes)

    kid = Kid(post_fork)
    kids.append(kid)
    found = kid.result
    assert found["service.name"] == "shop"
    assert found[SLOT_ATTRIBUTE] == 0
    assert uuid.UUID(str(found["service.instance.id"])).version == 5


def test_it_is_process_dependent_so_the_sdk_runs_it_again_after_fork() -> None:
    assert ProcessWorkerResourceDetector().is_process_dependent()


def test_no_safe_directory_gives_an_empty_resource_and_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    link, target = planted_symlink(tmp_path, "planted", "elsewhere")
    monkeypatch.setenv("OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR", str(link))
    with caplog.at_level(logging.WARNING):
        assert ProcessWorkerResourceDetector().detect().attributes == {}
        assert ProcessWorkerResourceDetector().detect().attributes == {}
    rundir_lines = [r for r in caplog.records if "runtime directory" in r.getMessage()]
    assert len(rundir_lines) == 1, caplog.text
    assert (
        rundir_lines[0]
        .getMessage()
        .startswith(
            f"process metrics: the runtime directory {link} cannot be used safely (UnsafeError: "
        )
    ), caplog.text
    said = [r.getMessage() for r in caplog.records if "worker slot" in r.getMessage()]
    assert said[-1:] == [
        "process metrics: no worker slot could be claimed; the process_worker resource "
        "detector adds no service.instance.id."
    ], said
    assert list(target.iterdir()) == []  # nothing written through the symlink


def _entry_point() -> str:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found: str = project["entry-points"]["opentelemetry_resource_detector"]["process_worker"]
    return found


def test_the_entry_point_names_the_detector() -> None:
    module, _, name = _entry_point().partition(":")
    imported = __import__(module, fromlist=[name])
    assert getattr(imported, name) is ProcessWorkerResourceDetector


def test_otel_experimental_resource_detectors_finds_it_by_name(tmp_path: Path) -> None:
    # The entry point as pyproject.toml declares it, installed as metadata on the path
    # of a fresh interpreter: the SDK finds it by name, as it does once installed.
    dist = tmp_path / "process_worker_probe-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: process-worker-probe\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[opentelemetry_resource_detector]\nprocess_worker = {_entry_point()}\n"
    )
    code = (
        "from opentelemetry.sdk.resources import Resource\n"
        "a = Resource.create().attributes\n"
        "print(a['process_metrics.worker.slot'], a['service.instance.id'])\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]),
        "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "process_worker",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    slot, instance = out.stdout.split()
    assert slot == "0"
    assert uuid.UUID(instance).version == 5
