"""Every test starts from empty framejit caches and default log settings, with internal errors
raised instead of hidden behind the eager fallback.

`FRAMEJIT_TEST_FAILURES=path` appends each failure's report to that file as soon as the test
fails (tools/gpu_check.sh: a run stopped at its time limit still leaves its tracebacks)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import framejit


@pytest.fixture(autouse=True)
def framejit_clean_state() -> Iterator[None]:
    raise_internal_errors = framejit.config.raise_internal_errors
    recompile_limit = framejit.config.recompile_limit
    framejit.config.raise_internal_errors = True
    framejit.reset()
    yield
    framejit.reset()
    framejit.set_logs()
    framejit.config.raise_internal_errors = raise_internal_errors
    framejit.config.recompile_limit = recompile_limit


_FAILURES = os.environ.get("FRAMEJIT_TEST_FAILURES")
_WORKER = False


def pytest_configure(config: pytest.Config) -> None:
    global _WORKER
    _WORKER = hasattr(config, "workerinput")  # under pytest-xdist the controller writes


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _FAILURES and not _WORKER and report.failed:
        with open(_FAILURES, "a") as f:
            f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
