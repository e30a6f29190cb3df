"""Aten graphs with symbolic sizes (what the AOT stage makes under dynamic shapes): kernels take
the sizes as arguments, so one module serves every size; what the symbolic path cannot handle
is compiled per distinct size instead. Results equal eager's either way."""

from __future__ import annotations

import itertools
import logging
import re

import pytest
import torch
import torch.nn.functional as F
from framejit.backend.triton import cache, compile_graph, stages
from framejit.backend.triton.symbolic import Specializing, is_symbolic
from torch.fx.experimental.proxy_tensor import make_fx
from triton_helpers import require_interpreter

import framejit
from framejit import logs


def _fn(x, w, b):
    h = F.layer_norm(x.reshape(-1, x.shape[-1]), (x.shape[-1],), w, b)
    return torch.softmax(h, -1) * x.shape[0], h.sum(0), torch.cat([x, x], 0).amax(-1)


def _compile(fn, *args):
    require_interpreter()
    gm = make_fx(fn, tracing_mode="symbolic")(*args)
    assert is_symbolic(gm)
    return gm, compile_graph(gm, list(args))


def _check_sizes(call, fn, inputs) -> None:
    loads = sum(cache.STATS.values())
    for args in inputs:
        got = call(*args)
        expected = fn(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    assert sum(cache.STATS.values()) == loads, "a new size compiled a new module"


def test_one_module_serves_every_size() -> None:
    w, b = torch.randn(6), torch.randn(6)
    gm, call = _compile(_fn, torch.randn(2, 3, 6), w, b)
    assert not isinstance(call, Specializing)
    source = stages(gm).source
    assert re.search(r"\bs\d+ = x_1\.shape\[0\]", source) and "triton.cdiv(" in source
    sizes = [(2, 3, 6), (1, 5, 6), (4, 1, 6), (3, 7, 6), (2, 2, 9), (5, 3, 130)]
    _check_sizes(
        call, _fn, [(torch.randn(s), torch.randn(s[-1]), torch.randn(s[-1])) for s in sizes]
    )


def test_pointwise_views_and_reductions_over_sizes() -> None:
    def fn(x, y):
        z = (x.transpose(0, 1) * 2 + y).relu()
        return z.reshape(-1), z.sum(1), torch.softmax(z, 0), x[1:].argmax(-1), z.amax()

    _, call = _compile(fn, torch.randn(4, 3), torch.randn(3, 1))
    _check_sizes(
        call, fn, [(torch.randn(n, m), torch.randn(m, 1)) for n, m in [(4, 3), (7, 2), (2, 9)]]
    )


def test_attention_block_over_sequence_lengths() -> None:
    def block(x, wq, g, b):
        h = F.layer_norm(x, (x.shape[-1],), g, b)
        q = h @ wq
        att = torch.softmax((q @ h.transpose(-2, -1)) * 0.25, -1)
        return x + F.gelu(att @ h)

    d = 8
    wq, g, b = torch.randn(d, d), torch.randn(d), torch.randn(d)
    _, call = _compile(block, torch.randn(2, 5, d), wq, g, b)
    _check_sizes(
        call, block, [(torch.randn(n, t, d), wq, g, b) for n, t in [(2, 5), (1, 3), (3, 11)]]
    )


def test_int_input_and_size_arithmetic() -> None:
    def fn(x, k):
        return x[: x.shape[0] - 1] * k + x.shape[1]

    _, call = _compile(fn, torch.randn(4, 3), 2)
    for shape, k in [((4, 3), 2), ((6, 2), 3), ((2, 5), 2)]:
        x = torch.randn(shape)
        (got,) = call(x, k)
        torch.testing.assert_close(got, fn(x, k))


def test_floor_division_size_serves_every_size() -> None:
    """`s0 // 2` is a derived size (`d0 = (s0 // 2)` in the wrapper), not a reason to compile
    per size."""

    def fn(x):
        return x.reshape(x.shape[0] // 2, 2 * x.shape[1]) * 2

    _, call = _compile(fn, torch.randn(4, 3))
    assert not isinstance(call, Specializing)
    _check_sizes(call, fn, [(torch.randn(n, m),) for n, m in [(4, 3), (6, 5), (10, 2)]])


def test_unsupported_size_expression_compiles_per_size(caplog: pytest.LogCaptureFixture) -> None:
    def fn(x):
        return x.reshape(-1)[: x.shape[0] & 6] * 2

    require_interpreter()
    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(4, 3))
    framejit.set_logs(perf_hints=True)
    logs.add_handler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            call = compile_graph(gm, [torch.randn(4, 3)])
    finally:
        logs.remove_handler(caplog.handler)
    assert isinstance(call, Specializing)
    assert any("compiled per distinct size" in r.getMessage() for r in caplog.records)
    for n, m in [(4, 3), (6, 5), (4, 3)]:
        x = torch.randn(n, m)
        torch.testing.assert_close(call(x)[0], fn(x))
    assert len(call.compiled) == 2


def test_static_graph_is_not_symbolic() -> None:
    gm = make_fx(_fn)(torch.randn(2, 3, 6), torch.randn(6), torch.randn(6))
    assert not is_symbolic(gm)


def test_saved_size_that_is_a_min_of_symbols() -> None:
    """diagonal_scatter's backward needs the diagonal's length, min(rows, cols): a size the
    ShapeEnv writes with torch's own sympy Min class. It must be computed per call (the forward
    once returned the expression itself, and the backward failed)."""
    require_interpreter()

    def program(inp: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return torch.diagonal_scatter(inp, *rest)

    jitted = framejit.jit(program, backend="triton", dynamic=True)
    for n in (10, 7):
        x, src = torch.randn(n, n, requires_grad=True), torch.randn(n, requires_grad=True)
        weight = torch.rand(n, n)
        got = torch.autograd.grad((jitted(x, src) * weight).sum(), [x, src])
        want = torch.autograd.grad((program(x, src) * weight).sum(), [x, src])
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_outputs_keep_eager_strides_over_sizes() -> None:
    """A dense output laid out other than contiguously (a transpose, channels-last) keeps
    eager's strides when its sizes are symbolic, as it does with static sizes (it once came
    back contiguous from the second size on)."""

    def fn(x, y):
        return x.t() * 2, y.contiguous(memory_format=torch.channels_last) * 2

    # distinct example sizes: equal ones would share a symbol
    _, call = _compile(fn, torch.randn(3, 4), torch.randn(2, 5, 6, 6))
    assert not isinstance(call, Specializing)
    for rows, cols, n, channels, side in [(3, 4, 2, 5, 6), (5, 7, 3, 2, 4)]:
        x, y = torch.randn(rows, cols), torch.randn(n, channels, side, side)
        for got, want in zip(call(x, y), fn(x, y)):
            assert got.stride() == want.stride()
            torch.testing.assert_close(got, want)


def test_recompiled_dynamic_graph_keeps_eager_strides() -> None:
    require_interpreter()

    def program(x: torch.Tensor) -> torch.Tensor:
        return x.t() * 2

    jitted = framejit.jit(program, backend="triton")
    for shape in [(3, 4), (5, 6)]:
        x = torch.randn(shape)
        got, want = jitted(x), program(x)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want)


# Slices whose bounds are symbolic: index arithmetic (no extern), one module for every size.
SLICES = {
    "tail": lambda x: x[:, 2:] * 2,
    "half": lambda x: x[..., x.shape[-1] // 2 :] + 1,
    "drop_last": lambda x: x[:, :-1] * 3,
    "stepped": lambda x: x[:, 1::2] - 1,
    "negative_symbolic": lambda x: x[..., -(x.shape[-1] // 2) :] * 2,
    "third_to_half": lambda x: x[:, x.shape[1] // 3 : x.shape[1] // 2] * 2,
    "narrow": lambda x: x.narrow(1, x.shape[1] // 4, x.shape[1] // 2) + 1,
    "chunk": lambda x: tuple(c * 2 for c in x.chunk(2, dim=-1)),
    "rotate_half": lambda x: torch.cat(
        (-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1
    ),
    "reduce_slices": lambda x: x[:, x.shape[1] // 2 :].sum(1) + x[:, 1:-1:2].amax(1),
    "returned_view": lambda x: x[:, x.shape[1] // 2 :],
    "slice_scatter": lambda x: torch.slice_scatter(
        x, x[:, : x.shape[1] // 2] * 2, 1, x.shape[1] - x.shape[1] // 2
    ),
}


def _counting_triton(count: list[int]):
    from framejit.backend import lookup_backend

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        count.append(1)
        return lookup_backend("triton")(gm, example_inputs)

    return backend


def _hints_while(run, caplog: pytest.LogCaptureFixture) -> list[str]:
    framejit.set_logs(perf_hints=True, recompiles=True)
    logs.add_handler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            run()
    finally:
        logs.remove_handler(caplog.handler)
        framejit.set_logs(perf_hints=False, recompiles=False)
    return [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("name", sorted(SLICES))
def test_symbolic_slices_compile_once(name: str, caplog: pytest.LogCaptureFixture) -> None:
    """Three sizes, one compile, Triton kernels all the way: no per-size compile, no extern
    and no aten graph at the first run (the slices once failed to lower with symbolic bounds
    and every size compiled again)."""
    require_interpreter()
    fn, count = SLICES[name], []
    jitted = framejit.jit(fn, backend=_counting_triton(count), dynamic=True)
    loads = []

    def run() -> None:
        for n in (8, 11, 14):
            x = torch.randn(3, n)
            got, want = jitted(x), fn(x)
            for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
                assert g.shape == w.shape
                torch.testing.assert_close(g, w)
            loads.append(sum(cache.STATS.values()))

    hints = _hints_while(run, caplog)
    assert count == [1], hints
    assert loads[0] == loads[-1], "a new size compiled a new module"
    bad = ("compiled per distinct size", "extern", "aten graph", "recompiling")
    assert not [h for h in hints if any(b in h for b in bad)], hints


def test_slice_that_may_be_empty(caplog: pytest.LogCaptureFixture) -> None:
    """A start past the end gives an empty slice, as eager: the frame's guard on the two sizes
    compiles it once more (once for starts within, once past the end), not per size."""
    require_interpreter()

    def fn(x, y):
        return x[:, y.shape[0] :] * 2, x[:, -y.shape[0] :] + 1, x[:, : x.shape[1] - y.shape[0]]

    count: list[int] = []
    jitted = framejit.jit(fn, backend=_counting_triton(count), dynamic=True)

    def run() -> None:
        for n, m in [(9, 4), (12, 5), (4, 7), (6, 11), (10, 3), (5, 9)]:
            x, y = torch.randn(3, n), torch.randn(m, 2)
            for got, want in zip(jitted(x, y), fn(x, y)):
                assert got.shape == want.shape
                torch.testing.assert_close(got, want)

    hints = _hints_while(run, caplog)
    assert len(count) <= 2, hints
    assert not [h for h in hints if "compiled per distinct size" in h or "aten graph" in h]


def test_slice_bound_decided_at_call_time() -> None:
    """A bound whose sign or range no guard decides stays a derived size that the wrapper
    computes per call, with Python's slice semantics (negative from the end, clamped)."""
    import sympy
    from framejit.backend.triton.lower import Lowering
    from framejit.backend.triton.ops.table import slice_bound
    from framejit.backend.triton.sizes import SizeFacts, size_text

    s0, s1, s2 = (sympy.Symbol(f"s{k}", positive=True, integer=True) for k in range(3))
    ctx = Lowering()
    ctx.graph.sizes = SizeFacts()  # no ShapeEnv: nothing is known beyond the algebra
    bounds = {}
    with ctx.graph.sizes.active():
        for name, start in {"any_sign": s0 - s1, "negative": -s0, "non_negative": s0}.items():
            bounds[name] = slice_bound(ctx, start, s2)
        assert slice_bound(ctx, 3, s2) not in (3, s2)  # s2 may be 2: min(3, s2)
        assert slice_bound(ctx, -1, s2) == s2 - 1
        assert slice_bound(ctx, 0, s2) == 0
    definitions = [(d.name, ctx.graph.sizes.python_text(d)) for d in ctx.graph.sizes.definitions]
    assert any("if" in text for _, text in definitions)  # the sign of s0 - s1 is picked per call
    for a, b, n in itertools.product(range(2, 7), repeat=3):
        env = {"s0": a, "s1": b, "s2": n}
        for symbol, text in definitions:
            env[symbol] = eval(text, {}, env)
        for name, start in {"any_sign": a - b, "negative": -a, "non_negative": a}.items():
            got = eval(size_text(bounds[name]), {}, env)
            assert got == slice(start, None).indices(n)[0], (name, env)


def test_a_float_argument_is_a_kernel_argument() -> None:
    """A float argument that changed between calls (automatic dynamic) reaches the kernels as
    an argument: later values compile nothing. A float64 op with it runs as an aten call."""
    require_interpreter()

    def fn(x, scale):
        y = torch.clamp(x * scale + 1, max=scale)
        return y, x.double() * scale, (x > 0).long() * scale - scale

    framejit.reset()
    jitted = framejit.jit(fn, backend="triton")
    x = torch.randn(33)
    for scale in [0.5, 0.75]:  # the second value makes `scale` a graph input
        for g, e in zip(jitted(x, scale), fn(x, scale)):
            torch.testing.assert_close(g, e)
    loads = sum(cache.STATS.values())
    for scale in [1.5, -2.0, 3.25, 1e-8]:
        for g, e in zip(jitted(x, scale), fn(x, scale)):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e)
    assert sum(cache.STATS.values()) == loads, "a new float value compiled a new module"


def test_arithmetic_on_a_float_argument_is_computed_for_the_kernels() -> None:
    """`x.mul(1 - lr)`, `alpha=-lr * wd`: the wrapper computes the arithmetic on the float
    argument in Python floats at each call and passes the result to the kernel; later values
    compile nothing."""
    require_interpreter()

    def fn(x, g, lr, wd):
        return x.mul(1 - lr).add(g, alpha=-lr * wd), x.clamp(min=abs(lr - 0.5)), x * (lr / 3)

    framejit.reset()
    jitted = framejit.jit(fn, backend="triton")
    x, g = torch.randn(33), torch.randn(33)
    for lr, wd in [(0.5, 0.1), (0.75, 0.2)]:  # the second call makes both graph inputs
        for got, want in zip(jitted(x, g, lr, wd), fn(x, g, lr, wd)):
            torch.testing.assert_close(got, want)
    loads = sum(cache.STATS.values())
    for lr, wd in [(1.5, 0.01), (-2.0, 3.0), (3.25, 0.0), (1e-8, 1e-4)]:
        for got, want in zip(jitted(x, g, lr, wd), fn(x, g, lr, wd)):
            torch.testing.assert_close(got, want)
    assert sum(cache.STATS.values()) == loads, "a new float value compiled a new module"


def test_a_captured_adam_step_computes_its_bias_corrections_per_call(monkeypatch) -> None:
    """Adam's step (captured, `capture_optimizer_steps`): each step counter is a float input,
    its bias corrections (`0.9 ** (s + 1)`, ...) derived floats the wrapper computes per call;
    the steps after the symbolic graph compile no module. Parameters as eager's, within
    float32 rounding."""
    require_interpreter()
    monkeypatch.setattr(framejit.config, "capture_optimizer_steps", True)
    framejit.reset()
    torch.manual_seed(0)
    models = [torch.nn.Linear(6, 3) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=1e-2) for m in models]

    def step() -> None:
        opts[1].step()

    jitted = framejit.jit(step, backend="triton")
    x = torch.randn(5, 6)
    loads = None
    for i in range(6):
        for m, o in zip(models, opts):
            o.zero_grad()
            m(x).square().sum().backward()
        opts[0].step()
        jitted()
        if i == 3:  # state created (0), counters pinned (1), read per call (2)
            loads = sum(cache.STATS.values())
        for p, q in zip(models[0].parameters(), models[1].parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    assert sum(cache.STATS.values()) == loads, "a later step compiled a new module"


def test_gradients_through_growing_slices_of_a_leaf() -> None:
    """The input is a non-leaf view that requires grad (`p[:, :n]`), non-contiguous: the
    kernels read it with its own strides at every symbolic size, forward and backward."""
    torch.manual_seed(0)
    p1 = torch.randn(4, 40, requires_grad=True)
    p2 = p1.detach().clone().requires_grad_()

    def loss(x: torch.Tensor) -> torch.Tensor:
        return (x.tanh() * 3 + x.softmax(-1)).sum()

    jitted = framejit.jit(loss, backend="triton")
    for n in range(3, 9):
        p1.grad = p2.grad = None
        got, want = jitted(p1[:, :n]), loss(p2[:, :n])
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(p1.grad, p2.grad)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.roll(x, -2) * 2,  # a flattened roll: `(k + s0*s1) % (s0*s1)`
        lambda x: F.pixel_shuffle(x, 2) + 1,
    ],
    ids=["roll", "pixel_shuffle"],
)
def test_derived_sizes_over_products_are_parenthesized(fn) -> None:
    # the wrapper wrote `(2 + s0*s1) % s0*s1`, which Python reads as `((2 + s0*s1) % s0)*s1`:
    # wrong values (roll) and wrong output shapes (pixel_shuffle)
    require_interpreter()
    jitted = framejit.jit(fn, backend="triton", dynamic=True)
    for s in [(2, 8, 3, 2), (3, 4, 2, 3), (2, 4, 5, 2)]:
        x = torch.randn(*s)
        got, want = jitted(x), fn(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)
