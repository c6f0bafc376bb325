"""The fault log: the first occurrence of a fault is logged, repeats are counted.

A real logger with a real handler; the period is scaled down from 300 s so
that a test can wait it out with a real sleep. Where a repeat must come within
the period, the fault log's clock is one that only the test moves: a loaded
machine can stall a test past a short period between two calls.
"""

from __future__ import annotations

import logging
import re
import time

import pytest

from opentelemetry.instrumentation.process import faultlog
from opentelemetry.instrumentation.process.faultlog import FAULT_LOG_PERIOD, FaultLog

from .conftest import Clock, Records


@pytest.fixture
def handler() -> Records:
    return Records()


@pytest.fixture
def logger(handler: Records) -> logging.Logger:
    found = logging.getLogger("tests.faultlog")
    found.handlers[:] = [handler]
    found.setLevel(logging.DEBUG)
    found.propagate = False
    return found


def test_defaults_are_the_documented_period_and_this_modules_logger() -> None:
    log = FaultLog()
    assert log.period == FAULT_LOG_PERIOD == 300.0
    assert log.logger is logging.getLogger("opentelemetry.instrumentation.process.faultlog")


def test_first_occurrence_is_logged_at_its_level_with_its_arguments(
    logger: logging.Logger, handler: Records
) -> None:
    log = FaultLog(logger=logger)
    assert log.log(logging.INFO, ("a",), "source %r failed (%s)", "x", "OSError") is True
    (record,) = handler.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == "source 'x' failed (OSError)"
    assert record.exc_info is None


def test_warning_logs_at_warning_with_the_traceback(
    logger: logging.Logger, handler: Records
) -> None:
    log = FaultLog(logger=logger)
    try:
        raise OSError(5, "EIO")
    except OSError:
        assert log.warning(("w",), "broke: %s", "here", exc_info=True) is True
    (record,) = handler.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "broke: here"
    assert record.exc_info is not None and record.exc_info[0] is OSError
    assert log.warning(("w",), "broke: %s", "here") is False  # a repeat, counted


def test_repeats_within_the_period_are_counted_then_reported_with_their_count(
    logger: logging.Logger, handler: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()  # a stall between two repeats must not end the period
    monkeypatch.setattr(faultlog, "time", clock)
    log = FaultLog(2.0, logger=logger)
    assert log.log(logging.WARNING, "f", "fault %d", 1)
    for _ in range(3):
        clock.now += 0.5
        assert log.log(logging.WARNING, "f", "fault %d", 1) is False
    assert handler.lines() == ["fault 1"]
    clock.now += 1.1  # 2.6 s after the line
    assert log.log(logging.WARNING, "f", "fault %d", 1)
    second = handler.lines()[1]
    match = re.fullmatch(r"fault 1 \(3 more times since it was last logged (\d+) s ago\)", second)
    assert match, second
    assert match.group(1) == "3"  # 2.6 s, rounded
    # The count starts again from the line just written.
    assert log.log(logging.WARNING, "f", "fault %d", 1) is False
    clock.now += 2.0
    assert log.log(logging.WARNING, "f", "fault %d", 1)
    assert handler.lines()[2] == "fault 1 (1 more times since it was last logged 2 s ago)"


def test_a_fault_logged_again_without_repeats_has_no_count(
    logger: logging.Logger, handler: Records
) -> None:
    log = FaultLog(0.05, logger=logger)
    assert log.log(logging.WARNING, "f", "fault")
    time.sleep(0.06)
    assert log.log(logging.WARNING, "f", "fault")
    assert handler.lines() == ["fault", "fault"]


def test_the_period_is_measured_from_the_last_line_written(
    logger: logging.Logger, handler: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()  # a loaded machine's sleep(0.2) may last the whole period
    monkeypatch.setattr(faultlog, "time", clock)
    log = FaultLog(0.3, logger=logger)
    log.log(logging.WARNING, "f", "fault")
    clock.now += 0.2
    assert log.log(logging.WARNING, "f", "fault") is False  # within 0.3 s of the line
    clock.now += 0.15
    # 0.35 s after the line, 0.15 s after the repeat: due again.
    assert log.log(logging.WARNING, "f", "fault") is True
    assert len(handler.records) == 2


def test_distinct_faults_are_logged_apart(logger: logging.Logger, handler: Records) -> None:
    log = FaultLog(logger=logger)
    assert log.log(logging.WARNING, ("s", "OSError"), "one")
    assert log.log(logging.WARNING, ("s", "ValueError"), "two")
    assert not log.log(logging.WARNING, ("s", "OSError"), "one")
    assert handler.lines() == ["one", "two"]


def test_the_oldest_fault_is_forgotten_past_the_cap(
    logger: logging.Logger, handler: Records
) -> None:
    cap = faultlog._MAX_FAULTS
    assert cap == 256
    log = FaultLog(logger=logger)
    for i in range(cap):
        assert log.log(logging.WARNING, i, "fault %d", i)
    assert len(log._faults) == cap
    # A repeat of a remembered fault forgets nothing.
    assert not log.log(logging.WARNING, 0, "fault %d", 0)
    assert len(log._faults) == cap
    # One more distinct fault: the oldest (0) is forgotten, the second oldest is not.
    assert log.log(logging.WARNING, cap, "fault %d", cap)
    assert len(log._faults) == cap
    assert not log.log(logging.WARNING, 1, "fault %d", 1)
    assert log.log(logging.WARNING, 0, "fault %d", 0)  # forgotten: logged as new
    assert handler.lines()[-1] == "fault 0"
    assert len(handler.records) == cap + 2


class Broken(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        raise RuntimeError("a broken filter")


def test_a_broken_logger_is_contained_and_says_nothing_was_written(
    logger: logging.Logger, handler: Records
) -> None:
    broken = Broken()
    logger.addFilter(broken)
    try:
        log = FaultLog(logger=logger)
        assert log.log(logging.WARNING, "f", "fault") is False
        assert log.warning("g", "fault") is False
    finally:
        logger.removeFilter(broken)
    assert handler.records == []


def test_the_count_is_said_in_a_line_a_log_handler_formats(
    logger: logging.Logger, handler: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The count and the seconds are arguments, not pasted into the message:
    # a message holding a literal % stays as given.
    clock = Clock()  # the repeat must come within the period, however loaded the machine
    monkeypatch.setattr(faultlog, "time", clock)
    log = FaultLog(0.05, logger=logger)
    log.log(logging.WARNING, "f", "100%% of %s", "x")
    log.log(logging.WARNING, "f", "100%% of %s", "x")
    clock.now += 0.06
    log.log(logging.WARNING, "f", "100%% of %s", "x")
    assert handler.lines()[0] == "100% of x"
    assert handler.lines()[1].startswith("100% of x (1 more times since it was last logged ")


def test_a_repeat_exactly_one_period_later_is_logged(
    logger: logging.Logger, handler: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    # Only the fault log's own view of the clock is replaced.
    monkeypatch.setattr(faultlog, "time", clock)
    log = FaultLog(logger=logger)
    assert log.log(logging.WARNING, "f", "fault")
    clock.now += FAULT_LOG_PERIOD - 0.001
    assert not log.log(logging.WARNING, "f", "fault")
    clock.now = 1000.0 + FAULT_LOG_PERIOD
    assert log.log(logging.WARNING, "f", "fault")
    assert handler.lines() == [
        "fault",
        "fault (1 more times since it was last logged 300 s ago)",
    ]
