"""Kernels that fail at their first run (Triton compiles, or interprets, each kernel at its first
launch) never fail the program: the aten graph runs instead, from then on, and `perf_hints`
says why. An error the aten graph raises too is the program's own and propagates."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
import torch
from framejit.backend import lookup_backend
from framejit.backend.triton import cache
from triton_helpers import require_interpreter

import framejit
from framejit import logs


class Broken:
    """A loaded module whose `call` raises as a kernel that fails to compile would, the first
    `failures` times."""

    error: Exception = RuntimeError("PassManager::run failed (a kernel Triton could not compile)")

    def __init__(self, module: types.ModuleType, failures: int) -> None:
        self.module = module
        self.failures = failures
        self.calls = 0

    def call(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.module.call(*args)


def _compile_with(monkeypatch: pytest.MonkeyPatch, failures: int) -> tuple[Any, list[Broken]]:
    require_interpreter()
    made: list[Broken] = []
    real_load = cache.load

    def load(*args: Any, **kwargs: Any) -> Any:
        made.append(Broken(real_load(*args, **kwargs), failures))
        return made[-1]

    monkeypatch.setattr(cache, "load", load)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * y + 1, dim=-1)

    return fn, made


def test_a_failing_first_run_falls_back_to_aten(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fn, made = _compile_with(monkeypatch, failures=1)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    framejit.set_logs(perf_hints=True)
    logs.add_handler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            jitted = framejit.jit(fn, backend="triton")
            torch.testing.assert_close(jitted(x, y), fn(x, y))
    finally:
        logs.remove_handler(caplog.handler)
        framejit.set_logs()
    hints = [r.getMessage() for r in caplog.records]
    assert any("failed at their first run" in h and "PassManager" in h for h in hints), hints
    assert len(made) == 1 and made[0].calls == 1
    for _ in range(2):  # from now on the aten graph: the kernels are not called again
        x = torch.randn(4, 8)
        torch.testing.assert_close(jitted(x, y), fn(x, y))
    assert made[0].calls == 1


def test_kernels_that_run_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    fn, made = _compile_with(monkeypatch, failures=0)
    jitted = framejit.jit(fn, backend="triton")
    for _ in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        torch.testing.assert_close(jitted(x, y), fn(x, y))
    assert len(made) == 1 and made[0].calls == 3


def test_the_programs_own_error_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Straight through the backend (no frontend rerun): the aten graph raises too, so the
    error is the program's, and the kernels are tried again at the next call. (A shape error,
    which eager raises on every device; a bad gather index would end eager's CUDA kernel in a
    device-side assert.)"""
    require_interpreter()
    fn, made = _compile_with(monkeypatch, failures=1)

    def viewed(x: torch.Tensor) -> torch.Tensor:
        return x.view(4, 3) * 2

    x = torch.randn(3, 4)
    gm = torch.fx.symbolic_trace(viewed)
    run = lookup_backend("triton")(gm, [x])
    with pytest.raises(RuntimeError, match="invalid for input of size 10"):
        run(torch.randn(2, 5))  # aten's view raises for 10 elements as well
    torch.testing.assert_close(run(x)[0], viewed(x))
    assert made[0].calls == 2  # the kernels ran the second call


def test_an_error_without_a_message_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel failure whose message is empty (a bare `assert`) is reported all the same."""
    fn, made = _compile_with(monkeypatch, failures=1)
    monkeypatch.setattr(Broken, "error", AssertionError())
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    monkeypatch.setattr(framejit.config, "raise_internal_errors", True)
    jitted = framejit.jit(fn, backend="triton")
    torch.testing.assert_close(jitted(x, y), fn(x, y))
    assert made[0].calls == 1
