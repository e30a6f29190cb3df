"""The kernel cache, the backend's registration, logs, and the CPU-without-interpreter path."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from framejit.backend import list_backends
from framejit.backend.triton import cache
from triton_helpers import require_interpreter

import framejit
from framejit import logs


def _fn(x, y):
    return torch.relu(x * y + 1).sum(-1)


def test_second_compile_reuses_the_cached_file(triton_cache_dir: str) -> None:
    require_interpreter()
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    before = dict(cache.STATS)
    framejit.jit(_fn, backend="triton")(x, y)
    files = sorted(Path(triton_cache_dir, "triton").rglob("fj_*.py"))
    assert files
    mtimes = {f: f.stat().st_mtime_ns for f in files}
    # A fresh compilation (as a second process would do) that finds the file on disk.
    framejit.reset()
    cache.clear_memory()
    got = framejit.jit(_fn, backend="triton")(x, y)
    torch.testing.assert_close(got, _fn(x, y))
    assert cache.STATS["disk_hits"] > before["disk_hits"]
    assert {f: f.stat().st_mtime_ns for f in files} == mtimes
    # And in the same process, without a disk read, from the module memo.
    framejit.reset()
    framejit.jit(_fn, backend="triton")(x, y)
    assert cache.STATS["memory_hits"] > before["memory_hits"]


def test_registered_and_auto_stays_aot_eager_on_cpu() -> None:
    assert "triton" in list_backends()
    from framejit.backend.registry import _wants_triton

    assert not _wants_triton([torch.randn(2, device="cpu")])


def test_output_code_and_perf_hints_logs(caplog: pytest.LogCaptureFixture) -> None:
    require_interpreter()
    framejit.set_logs(output_code=True, perf_hints=True)
    logs.add_handler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            framejit.jit(lambda x: torch.cumsum(x.exp(), 0), backend="triton")(torch.randn(4))
    finally:
        logs.remove_handler(caplog.handler)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "@triton.jit" in text and "def fj_pointwise_exp_0(" in text
    assert "aten.cumsum runs as torch's kernel" in text


@pytest.mark.interpreter_only
def test_cpu_without_interpreter_runs_the_aten_graph(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    framejit.set_logs(perf_hints=True)
    logs.add_handler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            x = torch.randn(4)
            got = framejit.jit(lambda x: x.exp() + 1, backend="triton")(x)
    finally:
        logs.remove_handler(caplog.handler)
    torch.testing.assert_close(got, x.exp() + 1)
    assert any("TRITON_INTERPRET=1" in r.getMessage() for r in caplog.records)


@pytest.mark.cuda
def test_cuda_fused_softmax_and_auto_picks_triton() -> None:
    from triton_helpers import check

    check(lambda x: torch.softmax(x * 2, -1), torch.randn(64, 1000), device="cuda")
    from framejit.backend.registry import _wants_triton

    assert _wants_triton([torch.randn(2, device="cuda")])
