"""2-d max pooling lowered as a loop over the output (ops/indexing.py, `_max_pool2d`): values
and indices equal eager's for every parameter (kernel, stride, padding, dilation, ceil_mode),
for ties, NaN, infinities and signed zeros, and the pool fuses with the pointwise ops before it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import aten_stages, check, check_lowered

# (kernel, stride, padding, dilation, ceil_mode)
PARAMS = [
    (3, 2, 1, 1, False),  # ResNet's stem
    (2, None, 0, 1, False),
    (2, 2, 0, 1, True),  # a last window that hangs off the input
    ((2, 3), (1, 2), (1, 1), (2, 1), False),
    (3, 3, 1, 2, True),
    ((1, 4), (1, 3), (0, 2), 1, True),
]


@pytest.mark.parametrize("params", PARAMS, ids=[str(p) for p in PARAMS])
@pytest.mark.parametrize("shape", [(2, 3, 9, 10), (3, 7, 8)])
def test_max_pool2d_values_and_indices(params, shape) -> None:
    kernel, stride, padding, dilation, ceil_mode = params

    def pool(x):
        values, indices = F.max_pool2d(
            x, kernel, stride, padding, dilation, ceil_mode, return_indices=True
        )
        return values, indices

    check_lowered(pool, torch.randn(*shape))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_max_pool2d_ties_nans_and_infinities(dtype) -> None:
    """Eager takes a window's first largest element, the last NaN, and the window's first
    element in the input where all of it is -inf (even at a padded edge)."""
    x = torch.randint(-2, 3, (2, 2, 8, 9)).to(dtype)  # many ties
    x[0, 0, 0, :] = float("-inf")
    x[0, 0, 1, :3] = float("-inf")  # a corner window of -inf only
    x[0, 1, 3, 3] = x[0, 1, 3, 4] = float("nan")  # two NaNs in one window
    x[1, 0, 5, 5] = float("inf")
    x[1, 1] = torch.where(torch.rand(8, 9) > 0.5, 0.0, -0.0).to(dtype)  # signed zeros
    for kernel, stride, padding, dilation, ceil_mode in PARAMS[:3]:

        def pool(x, k=kernel, s=stride, p=padding, d=dilation, c=ceil_mode):
            values, indices = F.max_pool2d(x, k, s, p, d, c, return_indices=True)
            return values, indices

        got = check_lowered(pool, x)
        zeros = pool(x)[0][1, 1]
        assert torch.equal(got[0][1, 1].signbit(), zeros.signbit())  # -0.0 where eager has it


def test_max_pool2d_channels_last_and_fused_with_the_ops_before_it() -> None:
    """BatchNorm + ReLU + max pool (a ResNet stem after its convolution) is one kernel that
    writes only the pooled values (no indices in inference)."""

    def stem(x, mean, var, weight, bias):
        return F.max_pool2d(torch.relu(F.batch_norm(x, mean, var, weight, bias)), 3, 2, 1)

    x = torch.randn(2, 4, 12, 12).to(memory_format=torch.channels_last)
    stats = (torch.randn(4), torch.rand(4) + 0.5, torch.randn(4), torch.randn(4))
    found = aten_stages(stem, x, *stats)
    call = found.source[found.source.index("def call(") :]
    launches = [line for line in call.splitlines() if line.lstrip().startswith("fj_")]
    assert len(launches) == 1 and "int64" not in call, call
    check(stem, x, *stats)


def test_max_pool2d_trains_through_its_indices() -> None:
    pool = torch.nn.MaxPool2d(3, 2, 1)
    import framejit

    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    fast = framejit.jit(lambda x: (pool(x * 2) ** 2).sum(), backend="triton")
    loss = fast(x)
    (grad,) = torch.autograd.grad(loss, x)
    x2 = x.detach().clone().requires_grad_()
    (expected,) = torch.autograd.grad((pool(x2 * 2) ** 2).sum(), x2)
    torch.testing.assert_close(loss, (pool(x2 * 2) ** 2).sum())
    torch.testing.assert_close(grad, expected)


def test_a_window_too_large_to_unroll_runs_torchs_kernel() -> None:
    from framejit.backend.triton.ops.indexing import MAX_POOL_TAPS

    def pool(x):
        return F.max_pool2d(x, 8)  # 64 elements per window

    assert MAX_POOL_TAPS < 64
    found = aten_stages(pool, torch.randn(1, 2, 16, 16))
    assert "extern(aten.max_pool2d_with_indices" in found.lowered
    check(pool, torch.randn(1, 2, 16, 16))


def test_only_needed_nodes_are_computed_and_index_checks_always_are() -> None:
    """schedule._live: what the outputs and externs read, transitively, and any node that
    checks an index read from memory (eager raises for a bad index even if the value is
    unused); nothing else."""
    from framejit.backend.triton import ir
    from framejit.backend.triton.schedule import _live

    i0 = ir.loop_vars((4,))[0]
    f32, i64 = torch.float32, torch.int64
    x = ir.InputBuffer("x", (4,), (1,), f32, 0)
    idx = ir.InputBuffer("idx", (4,), (1,), i64, 1)
    used = ir.Pointwise("buf0", (4,), (1,), f32, ir.Load("x", (i0,), f32), "neg")
    dead = ir.Pointwise("buf1", (4,), (1,), f32, ir.Load("buf0", (i0,), f32), "exp")
    checked = ir.Pointwise(
        "buf2",
        (4,),
        (1,),
        torch.bool,
        ir.BoundsCheck(ir.Load("idx", (i0,), i64), 4, "aten.gather", 0),
        "gather",
    )
    graph = ir.LoopGraph(nodes=[x, idx, used, dead, checked], outputs=[ir.ExternArg("buf0", ())])
    assert _live(graph, set()) == {"buf0", "x", "buf2", "idx"}
    assert "buf1" in _live(graph, {"buf1"})


# (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_PARAMS = [
    (3, 2, 1, False, True, None),
    (2, None, 0, False, True, None),
    (3, 2, 1, True, False, None),
    ((2, 3), (1, 2), (1, 1), True, True, None),
    ((3, 1), (2, 1), (1, 0), False, False, 3),
    (3, 3, 1, True, True, None),  # a last window past the padding (ceil_mode)
]


@pytest.mark.parametrize("params", AVG_PARAMS, ids=[str(p) for p in AVG_PARAMS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_avg_pool2d(params, dtype) -> None:
    kernel, stride, padding, ceil_mode, include_pad, divisor = params

    def pool(x):
        return F.avg_pool2d(x, kernel, stride, padding, ceil_mode, include_pad, divisor)

    check_lowered(pool, torch.randn(2, 3, 9, 10).to(dtype))
    check_lowered(pool, torch.randn(3, 8, 7).to(dtype))  # no batch dim


def test_avg_pool2d_channels_last_signed_zeros_and_training() -> None:
    x = torch.randn(2, 4, 8, 8).to(memory_format=torch.channels_last)
    x[0, 0] = -0.0  # eager's sum starts at +0.0: a window of -0.0 averages to 0.0
    got = check_lowered(lambda x: F.avg_pool2d(torch.relu(x) - x, 2), x)
    assert not got[0, 0].signbit().any()
    import framejit

    w = torch.randn(2, 4, 8, 8, requires_grad=True)
    fast = framejit.jit(lambda w: (F.avg_pool2d(w, 3, 2, 1) ** 2).sum(), backend="triton")
    (grad,) = torch.autograd.grad(fast(w), w)
    w2 = w.detach().clone().requires_grad_()
    (expected,) = torch.autograd.grad((F.avg_pool2d(w2, 3, 2, 1) ** 2).sum(), w2)
    torch.testing.assert_close(grad, expected)


# (input plane, output size): windows of one size, of two sizes, overlapping, 1x1, identity
ADAPTIVE = [((6, 6), (3, 3)), ((7, 5), (3, 2)), ((10, 9), (4, 7)), ((5, 5), (5, 5)), ((8, 3), 1)]


@pytest.mark.parametrize(("plane", "size"), ADAPTIVE, ids=[str(a) for a in ADAPTIVE])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adaptive_pools(plane, size, dtype) -> None:
    """Values and indices bit-equal to eager's (the average divided by the window's height,
    then its width, as eager does; a global average pool is a mean, a reduction of its own)."""

    def pools(x):
        values, indices = F.adaptive_max_pool2d(x, size, return_indices=True)
        return values, indices, F.adaptive_avg_pool2d(x, size)

    x = torch.randn(2, 3, *plane).to(dtype)
    x[0, 0, 0, 0] = float("nan")
    x[1, 1] = x[1, 1].round()  # ties
    got = check_lowered(pools, x)
    expected = pools(x)
    assert torch.equal(got[1], expected[1])
    if size != 1:
        assert torch.equal(got[2].nan_to_num(), expected[2].nan_to_num())  # bit-equal


def test_an_adaptive_pool_with_large_windows_runs_torchs_kernel() -> None:
    found = aten_stages(lambda x: F.adaptive_max_pool2d(x, 2), torch.randn(1, 2, 20, 20))
    assert "extern(aten.adaptive_max_pool2d" in found.lowered  # windows of 100 elements


@pytest.mark.parametrize(
    "params",
    [
        (3, 2, 1, 1, False),
        (2, None, 0, 1, True),
        ((1, 2, 3), (1, 2, 1), (0, 1, 1), (1, 1, 2), True),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_3d_pools(params, dtype) -> None:
    """max_pool3d (values and indices, flat in the input's volume) and avg_pool3d."""
    kernel, stride, padding, dilation, ceil_mode = params

    def pools(x):
        values, indices = F.max_pool3d(
            x, kernel, stride, padding, dilation, ceil_mode, return_indices=True
        )
        average = F.avg_pool3d(x, kernel, stride, padding, ceil_mode, count_include_pad=False)
        return values, indices, average

    x = torch.randn(2, 3, 5, 6, 7).to(dtype)
    x[0, 0, 0, 0, :3] = float("nan")
    if dtype == torch.bfloat16 and x.device.type == "cpu":
        import framejit

        with pytest.raises(NotImplementedError, match="avg_pool3d"):  # as eager's CPU kernel
            framejit.jit(pools, backend="triton")(x)
        return
    check_lowered(pools, x)
    check_lowered(pools, x[0])  # no batch dim
