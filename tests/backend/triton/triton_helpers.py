"""Shared by the Triton backend tests: compile through `framejit.jit(backend="triton")` and
compare with eager; get each pipeline stage's text for an aten graph."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from framejit.backend import lookup_backend
from framejit.backend.aot import aot_compile
from framejit.backend.triton import Stages, cache, stages
from torch.fx.experimental.proxy_tensor import make_fx

import framejit


def require_interpreter(loops: bool = True) -> None:
    """Skip unless Triton's CPU interpreter can run here (it needs numpy; see
    `interpreter_problem` for a version pair that cannot run kernels that loop).
    `loops=False`: for a test whose kernels do not loop, which runs on that pair too.
    Nothing to check when the tests run on a GPU."""
    if kernel_device() == "cuda":
        return
    from framejit.backend.triton import interpreter_loop_problem, interpreter_problem

    problem = interpreter_problem()
    if problem is not None and (loops or problem != interpreter_loop_problem()):
        pytest.skip(problem)


def _loads() -> int:
    return cache.STATS["written"] + cache.STATS["disk_hits"] + cache.STATS["memory_hits"]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 2e-2, "rtol": 2e-2}
    return {"atol": 1e-5, "rtol": 1e-5}


def kernel_device() -> str:
    """Where the Triton tests run their kernels: "cpu" (the interpreter) or "cuda"
    (`FRAMEJIT_TEST_DEVICE`, see conftest.py)."""
    return os.environ.get("FRAMEJIT_TEST_DEVICE", "cpu")


def check(
    fn: Callable[..., Any], *args: Any, device: str | None = None, frontend: bool = True
) -> Any:
    """`fn` through the triton backend equals eager (values, dtypes, shapes, strides), on
    `device` (default: the tests' device).

    `frontend=False` skips the bytecode frontend (fx.symbolic_trace, then the backend), for
    functions the frontend does not capture yet."""
    device = device or kernel_device()
    if device == "cpu":
        require_interpreter()
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    loads = _loads()

    def program(*values: Any) -> Any:
        return fn(*values)

    with torch.no_grad():
        expected = fn(*args)
        if frontend:
            got = framejit.jit(program, backend="triton", fullgraph=True)(*args)
        else:
            gm = torch.fx.symbolic_trace(fn)
            got = lookup_backend("triton")(gm, list(args))(*args)
            got = got[0] if not isinstance(expected, (tuple, list)) else got
    assert _loads() > loads, "the triton backend did not compile (fell back to aten)"
    flat_e = expected if isinstance(expected, (tuple, list)) else [expected]
    flat_g = got if isinstance(got, (tuple, list)) else [got]
    assert len(flat_e) == len(flat_g)
    for e, g in zip(flat_e, flat_g):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        if e.numel() > 1:
            assert g.stride() == e.stride()
        if e.dtype.is_floating_point:
            torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e.dtype))
        else:
            assert torch.equal(g, e), (g, e)
    return got


def aten_stages(fn: Callable[..., Any], *args: Any) -> Stages:
    """The Triton pipeline's text for `fn`'s aten graph (through the AOT stage)."""
    found: list[Stages] = []

    def inner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        found.append(stages(gm))
        return gm.forward

    with torch.no_grad():
        try:
            gm = torch.fx.symbolic_trace(fn)
        except torch.fx.proxy.TraceError:  # iterates over a tensor (split): trace to aten
            gm = make_fx(fn)(*args)
        if any(n.op == "get_attr" for n in gm.graph.nodes):  # tensor constants: trace to aten
            gm = make_fx(fn)(*args)
        aot_compile(gm, list(args), inner)
    return found[0]


def on_fake_cuda(*args: Any) -> tuple[Any, ...]:
    """`args` with each tensor a FakeTensor on "cuda:0" (no data, no GPU needed): for
    `aten_stages`, to read the source the lowerings write for CUDA tensors on any machine."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        return tuple(
            torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="cuda")
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        )


# Ops that run as externs by design (torch's kernels); any other extern is a missing lowering.
EXTERN_BY_DESIGN = ("aten.mm", "aten.bmm", "aten.addmm", "aten.convolution")


def check_lowered(fn: Callable[..., Any], *args: Any, frontend: bool = True) -> Any:
    """`check`, and the aten graph lowered with no extern other than matmul/convolution."""
    found = aten_stages(fn, *args)
    externs = [
        line
        for line in found.lowered.splitlines()
        if "= extern(" in line and not any(f"extern({op}." in line for op in EXTERN_BY_DESIGN)
    ]
    assert not externs, externs
    return check(fn, *args, frontend=frontend)
