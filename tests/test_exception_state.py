"""The exception being handled, as the compiled frame reads it: `sys.exc_info()`,
`sys.exception()`, and the logging calls that read it (`logger.exception`, `exc_info=True`).

Inside an `except` clause the trace entered, the exception exists only in the trace: reading it
gives eager's answer, or the frame runs as Python, never a stale or missing one. A logging call
is replayed after the graph, where no exception is being handled, so one that reads the handled
exception runs where eager runs it. Every test compares with eager on real tensors, twice.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import framejit

BACKENDS = ["eager", "aot_eager"]


def _plain(value: Any) -> Any:
    """What eager and the compiled frame must agree on (tensors as lists)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


def _compare(fn: Callable[[torch.Tensor], Any], backend: str) -> None:
    framejit.reset()
    jitted = framejit.jit(fn, backend=backend)
    for n in (2, 2, 3):
        x = torch.arange(float(n)) + 1
        assert _plain(jitted(x)) == _plain(fn(x))


# --- sys.exc_info() and sys.exception() -----------------------------------------------------------


def _current() -> Any:
    return sys.exc_info()[1]


def in_a_clause(x: torch.Tensor) -> Any:
    try:
        raise ValueError("boom")
    except ValueError:
        kind, value, _ = sys.exc_info()
        return x + 1, kind, value.args


def after_the_clause(x: torch.Tensor) -> Any:
    try:
        raise ValueError("boom")
    except ValueError:
        pass
    return x + 1, sys.exc_info()


def nested_clauses(x: torch.Tensor) -> Any:
    try:
        raise ValueError("outer")
    except ValueError:
        try:
            raise KeyError("inner")
        except KeyError:
            inner = sys.exc_info()[0]
        return x + 1, inner, sys.exc_info()[0]


def from_a_key_error(x: torch.Tensor) -> Any:
    try:
        return {"a": x}["b"]
    except KeyError:
        return x * 2, sys.exc_info()[1].args


def in_a_finally(x: torch.Tensor) -> Any:
    seen = None
    try:
        try:
            raise ValueError("f")
        finally:
            seen = sys.exc_info()[0]
    except ValueError:
        pass
    return x + 1, seen


def read_by_a_helper(x: torch.Tensor) -> Any:
    try:
        raise ValueError("helper")
    except ValueError:
        inside = _current()
    return x + 1, type(inside), _current()


def read_after_a_break(x: torch.Tensor) -> Any:
    try:
        raise ValueError("break")
    except ValueError:
        y = x * 2
        print(end="")  # a graph break inside the clause
        return y + 1, sys.exc_info()[0]


def in_a_data_dependent_clause(x: torch.Tensor) -> Any:
    try:
        if x.sum() > 4:
            raise ValueError("data")
    except ValueError:
        return x + 1, str(sys.exc_info()[1])
    return x, None


class _Exit:
    def __enter__(self) -> _Exit:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.seen = sys.exc_info()[0]
        return True


def in_a_with_exit(x: torch.Tensor) -> Any:
    cm = _Exit()
    with cm:
        raise ValueError("exit")
    return x + 1, cm.seen


READS = [
    in_a_clause,
    after_the_clause,
    nested_clauses,
    from_a_key_error,
    in_a_finally,
    read_by_a_helper,
    read_after_a_break,
    in_a_data_dependent_clause,
    in_a_with_exit,
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", READS, ids=lambda fn: fn.__name__)
def test_sys_exc_info_reads_what_eager_reads(fn: Any, backend: str) -> None:
    _compare(fn, backend)


@pytest.mark.skipif(not hasattr(sys, "exception"), reason="sys.exception() is new in 3.12")
@pytest.mark.parametrize("backend", BACKENDS)
def test_sys_exception_reads_what_eager_reads(backend: str) -> None:
    def reads(x: torch.Tensor) -> Any:
        outside = sys.exception()
        try:
            raise KeyError("k")
        except KeyError:
            return x * 2, outside, sys.exception().args

    _compare(reads, backend)


def _reads_the_callers(x: torch.Tensor) -> Any:
    return x + 1, sys.exc_info()[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_caller_s_exception_is_guarded(backend: str) -> None:
    framejit.reset()
    jitted = framejit.jit(_reads_the_callers, backend=backend)
    x = torch.ones(2)
    for _ in range(2):
        assert _plain(jitted(x)) == _plain(_reads_the_callers(x))
        try:
            raise RuntimeError("the caller's")
        except RuntimeError:
            assert _plain(jitted(x)) == _plain(_reads_the_callers(x))


# --- logging calls that read the handled exception ---------------------------------------------

LOGGER = logging.getLogger("framejit_test_exception_state")


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    LOGGER.addHandler(handler)
    LOGGER.propagate = False
    try:
        yield stream
    finally:
        LOGGER.removeHandler(handler)


def logs_the_exception(x: torch.Tensor) -> torch.Tensor:
    try:
        raise ValueError("logged")
    except ValueError:
        LOGGER.exception("failed on %d", x.shape[0])
    return x + 1


def logs_with_exc_info(x: torch.Tensor) -> torch.Tensor:
    try:
        raise KeyError("k")
    except KeyError:
        LOGGER.error("error", exc_info=True)
        y = x * 2
    return y + 1


def _log_from_a_helper() -> None:
    LOGGER.exception("from a helper")


def logs_in_a_helper(x: torch.Tensor) -> torch.Tensor:
    try:
        raise ValueError("helper")
    except ValueError:
        _log_from_a_helper()
    return x + 1


def logs_outside_a_clause(x: torch.Tensor) -> torch.Tensor:
    LOGGER.error("no exception", exc_info=True)  # NoneType: None, in eager too
    return x + 1


def _last_lines(stream: io.StringIO) -> list[str]:
    """Each record's first line and its last (the exception's type and message)."""
    text = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    lines = text.splitlines()
    return [lines[0], lines[-1]] if lines else []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [logs_the_exception, logs_with_exc_info, logs_in_a_helper, logs_outside_a_clause],
    ids=lambda fn: fn.__name__,
)
def test_a_logged_exception_is_eager_s(fn: Any, backend: str) -> None:
    framejit.reset()
    jitted = framejit.jit(fn, backend=backend)
    with _captured() as stream:
        for n in (2, 2, 3):
            x = torch.arange(float(n))
            want = fn(x)
            logged = _last_lines(stream)
            torch.testing.assert_close(jitted(x), want)
            assert _last_lines(stream) == logged
