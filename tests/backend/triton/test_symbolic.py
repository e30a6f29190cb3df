"""Aten graphs with symbolic sizes (what the AOT stage makes under dynamic shapes): one compiled
callable serves many sizes, each size compiled once, results equal to eager."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from framejit.backend.triton import cache, compile_graph
from framejit.backend.triton.symbolic import is_symbolic
from torch.fx.experimental.proxy_tensor import make_fx
from triton_helpers import require_interpreter

from framejit import logs


def _fn(x, w, b):
    h = F.layer_norm(x.reshape(-1, x.shape[-1]), (x.shape[-1],), w, b)
    return torch.softmax(h, -1) * x.shape[0], h.sum(0), torch.cat([x, x], 0).amax(-1)


def test_one_callable_many_sizes(caplog: pytest.LogCaptureFixture) -> None:
    require_interpreter()
    w, b = torch.randn(6), torch.randn(6)
    gm = make_fx(_fn, tracing_mode="symbolic")(torch.randn(2, 3, 6), w, b)
    assert is_symbolic(gm)
    import framejit

    framejit.set_logs(perf_hints=True)
    logs.add_handler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            call = compile_graph(gm, [torch.randn(2, 3, 6), w, b])
    finally:
        logs.remove_handler(caplog.handler)
    assert any("symbolic sizes" in r.getMessage() for r in caplog.records)
    sizes = [(2, 3), (1, 5), (4, 1), (3, 7), (2, 3)]
    compiled = 0
    for n, m in sizes:
        x = torch.randn(n, m, 6)
        before = sum(cache.STATS.values())
        got = call(x, w, b)
        compiled += sum(cache.STATS.values()) > before
        for g, e in zip(got, _fn(x, w, b)):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    # (2, 3) was compiled with the example inputs; each new size compiles once
    assert compiled == 3


def test_static_graph_is_not_symbolic() -> None:
    gm = make_fx(_fn)(torch.randn(2, 3, 6), torch.randn(6), torch.randn(6))
    assert not is_symbolic(gm)


def test_int_input_and_sym_size_arithmetic() -> None:
    require_interpreter()

    def fn(x, k):
        return x[: x.shape[0] - 1] * k + x.shape[1]

    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(4, 3), 2)
    call = compile_graph(gm, [torch.randn(4, 3), 2])
    for shape, k in [((4, 3), 2), ((6, 2), 3), ((2, 5), 2)]:
        x = torch.randn(shape)
        (got,) = call(x, k)
        torch.testing.assert_close(got, fn(x, k))
