"""The kernels the Triton backend generates compile for a real GPU (sm_90), checked on a machine
without one: Triton's compiler lowers them to PTX and runs ptxas (tools/ptx_check.py). The
interpreter that runs them in the other tests accepts some code the compiler rejects, so this
covers what the GPU would see first: a representative set of graphs (pointwise chains in each
dtype, looped and persistent reductions, softmax, layer norm, attention, indexing with bounds
checks, dropout, cat/pad, training forward and backward, symbolic sizes)."""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import require_interpreter

import framejit

_PATH = pathlib.Path(__file__).resolve().parents[3] / "tools" / "ptx_check.py"
_spec = importlib.util.spec_from_file_location("framejit_ptx_check_test", _PATH)
assert _spec is not None and _spec.loader is not None
ptx_check = importlib.util.module_from_spec(_spec)
pytestmark = pytest.mark.interpreter_only
_spec.loader.exec_module(ptx_check)


@pytest.fixture
def recording() -> Iterator[None]:
    require_interpreter()
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
    except ImportError as e:
        pytest.skip(f"this Triton cannot compile without a device: {e}")
    ptx_check.uninstall()
    ptx_check.install()
    try:
        yield
    finally:
        ptx_check.uninstall()


def _graphs() -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    x = torch.randn(8, 300)
    ids = torch.tensor([[1, 5, 0], [7, 2, 2]])
    emb = torch.randn(10, 16)
    att = torch.randn(2, 4, 9, 8)
    return [
        (lambda x: F.gelu(x * 2 + 1).sigmoid() - x.tanh(), (x,), {}),
        (lambda x: (x.half() * 3).relu().float(), (x,), {}),
        (lambda x: (x.bfloat16().exp() + 1).sum(-1), (x,), {}),
        (lambda x: (x > 0) & (x < 1) | x.isnan(), (x,), {}),
        (lambda x: (x.long() // 3 % 5) << 1, (x * 10,), {}),
        (lambda x: torch.softmax(x, -1), (x,), {}),
        (lambda x: torch.log_softmax(x, 0).amax(0), (x,), {}),
        (lambda x: x.var(1, correction=0) + x.mean(0).sum(), (x,), {}),
        (lambda x: torch.randn(4096, 20).sum(0) + x.sum(), (x,), {}),  # looped over 4096 rows
        (lambda x: x.argmax(1) + x.argmin(0).sum(), (x,), {}),
        (lambda x: F.layer_norm(x, (300,)), (x,), {}),
        (lambda x: F.rms_norm(x, (300,)) * x.norm(dim=-1, keepdim=True), (x,), {}),
        (lambda q: F.softmax(q @ q.transpose(-1, -2) / 8, -1) @ q, (att,), {}),
        (lambda e, i: F.embedding(i, e) * 2, (emb, ids), {}),
        (lambda x, i: torch.gather(x, 1, i) + x[i[0]].sum(), (emb, ids % 3), {}),
        (lambda x: torch.cat([x, x * 2], 1)[:, ::2] + F.pad(x, (1, 2))[:, :300], (x,), {}),
        (lambda x: F.dropout(x, 0.3, training=True) * 2, (x,), {}),
        (lambda x: torch.where(x > 0, x, x.exp() - 1).cumsum(0).flip(0), (x,), {}),
    ]


def test_generated_kernels_compile_for_sm90(recording: None) -> None:
    ran = 0
    for fn, args, _ in _graphs():
        framejit.reset()
        with torch.no_grad():
            framejit.jit(fn, backend="triton")(*args)
        ran += 1
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )
    x = torch.randn(5, 16, requires_grad=True)
    framejit.jit(model, backend="triton")(x).square().mean().backward()  # forward + backward
    dyn = framejit.jit(lambda x: torch.softmax(x * 2, -1), backend="triton", dynamic=True)
    for n in (5, 9):
        dyn(torch.randn(n, 40))
    failures = ptx_check.compile_recorded("cuda:90")
    compiled = ptx_check._stats["compiled"]
    assert compiled >= ran, f"only {compiled} kernels were compiled"
    assert not failures, ptx_check.summary()
