"""Matmul results whose rows are not 16-byte aligned (GPT-2's 50257-column logits) are written
into padded rows, where cuBLAS's aligned kernels run, then copied to eager's contiguous layout
(codegen's `_padded_result`). The padding is for CUDA; these tests turn it on for the tests'
device and for any size, and compare with eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from framejit.backend.triton import codegen

from tests.backend.triton.triton_helpers import aten_stages, check, kernel_device


@pytest.fixture
def pad_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codegen, "PAD_RESULT_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(codegen, "PAD_RESULT_MIN_ELEMENTS", 1)


def _args(columns: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(32, 64, generator=gen).to(dtype)
    w = torch.randn(columns, 64, generator=gen).to(dtype)
    b = torch.randn(columns, generator=gen).to(dtype)
    return tuple(t.to(kernel_device()) for t in (x, w, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unaligned_rows_are_padded_and_returned_contiguous(pad_everywhere, dtype) -> None:
    """`x @ w.t()` and a linear layer with 1001 columns (4004 bytes a row in float32, 2002 in
    bfloat16): the wrapper passes `out=` a buffer with rows of 1004 / 1008 elements; the
    results, a kernel reading one and the returned ones, equal eager's, strides included."""
    x, w, b = _args(1001, dtype)
    row = {torch.float32: 1004, torch.bfloat16: 1008}[dtype]

    def fn(x, w, b):
        return x @ w.t(), F.linear(x, w, b), torch.relu(F.linear(x, w, b)) * 2

    source = aten_stages(fn, x, w, b).source
    assert source.count(f"out=empty_strided((32, 1001), ({row}, 1)") == 3, source
    check(fn, x, w, b)


def test_aligned_rows_and_small_results_are_not_padded(pad_everywhere, monkeypatch) -> None:
    """1000 float32 columns are 4000 bytes, a multiple of 16: no padding; below
    `PAD_RESULT_MIN_ELEMENTS` neither."""
    x, w, b = _args(1000)
    assert "out=" not in aten_stages(lambda x, w: x @ w.t(), x, w).source
    monkeypatch.setattr(codegen, "PAD_RESULT_MIN_ELEMENTS", 32 * 1001 + 1)
    x, w, b = _args(1001)
    assert "out=" not in aten_stages(lambda x, w: x @ w.t(), x, w).source


def test_padding_is_for_cuda_only() -> None:
    """With the module's own settings a CPU graph is never padded (its kernels do not care),
    a CUDA one is, above the size limit."""
    assert codegen.PAD_RESULT_DEVICES == ("cuda",)
    x, w, b = _args(1001)
    source = aten_stages(lambda x, w: x @ w.t(), x, w).source
    assert ("out=" in source) == (
        kernel_device() == "cuda" and codegen.PAD_RESULT_MIN_ELEMENTS <= 32 * 1001
    )
