"""The Triton backend under torch's global state: the device a factory makes its tensor on
(`with torch.device("meta")`), deterministic mode's fill of `torch.empty`, and the CPU
interpreter's version limits. Each compares with eager on real tensors."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy
import pytest
import torch
import triton
from framejit.backend.triton import cache
from triton_helpers import require_interpreter

import framejit
from framejit import logs


def _loads() -> int:
    return cache.STATS["written"] + cache.STATS["disk_hits"] + cache.STATS["memory_hits"]


@pytest.fixture
def deterministic() -> Iterator[None]:
    """Deterministic algorithms on for the test (fill_uninitialized_memory as torch's default)."""
    was = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def test_factory_under_meta_device_context_is_meta() -> None:
    require_interpreter(loops=False)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.device("meta"):
            a = torch.zeros(2)
            b = torch.full((3,), 2.0)
        return a, b, x + 1

    framejit.reset()
    jitted = framejit.jit(fn, backend="triton")
    x = torch.ones(2)
    expected = fn(x)
    for _ in range(2):
        got = jitted(x)
        assert [t.device for t in got] == [t.device for t in expected]
        assert [t.shape for t in got] == [t.shape for t in expected]
        torch.testing.assert_close(got[2], expected[2])


def test_meta_input_runs_without_kernel_failure(caplog: pytest.LogCaptureFixture) -> None:
    require_interpreter(loops=False)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 2 + 1).sum(0)

    framejit.reset()
    jitted = framejit.jit(fn, backend="triton")
    x = torch.ones(3, 4, device="meta")
    expected = fn(x)
    logs.add_handler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(2):
                got = jitted(x)
                assert got.device == expected.device and got.shape == expected.shape
    finally:
        logs.remove_handler(caplog.handler)
    assert not any("kernels failed" in r.getMessage() for r in caplog.records)


DTYPES = [torch.float32, torch.float16, torch.float64, torch.int64, torch.int32, torch.uint8]


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_under_deterministic_mode_is_filled_as_eager(deterministic: None, dtype) -> None:
    require_interpreter(loops=False)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty(4, dtype=dtype), x + 1

    framejit.reset()
    jitted = framejit.jit(fn, backend="triton")
    x = torch.ones(3)
    expected = fn(x)
    for _ in range(2):
        got = jitted(x)
        assert got[0].dtype == expected[0].dtype
        torch.testing.assert_close(got[0], expected[0], equal_nan=True)
        torch.testing.assert_close(got[1], expected[1])


def test_empty_after_turning_deterministic_mode_on(deterministic: None) -> None:
    """Compiled with the mode off, called with it on: the guard recompiles, and the fill shows."""
    require_interpreter(loops=False)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty(2, 3) * 1, x + 1

    framejit.reset()
    jitted = framejit.jit(fn, backend="triton")
    x = torch.ones(3)
    torch.use_deterministic_algorithms(False)
    jitted(x)
    torch.use_deterministic_algorithms(True)
    got, expected = jitted(x), fn(x)
    assert torch.isnan(expected[0]).all()
    torch.testing.assert_close(got[0], expected[0], equal_nan=True)


@pytest.mark.interpreter_only
def test_old_interpreter_falls_back_only_for_looping_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Triton < 3.7's interpreter cannot run a loop under NumPy >= 2.4: a graph whose kernels do
    not loop still runs its kernels there; one with a looping reduction runs its aten graph."""
    require_interpreter(loops=False)
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.5.0")

    def plain(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def looping(x: torch.Tensor) -> torch.Tensor:
        return x.sum(1)

    framejit.reset()
    x = torch.randn(3, 5)
    loads = _loads()
    torch.testing.assert_close(framejit.jit(plain, backend="triton")(x), plain(x))
    assert _loads() > loads, "x + 1 has no loop: its kernel should run"

    big = torch.randn(2, 10000)  # more than a persistent reduction holds: the kernel loops
    loads = _loads()
    torch.testing.assert_close(framejit.jit(looping, backend="triton")(big), looping(big))
    assert _loads() == loads, "a looping kernel cannot run in this interpreter"
