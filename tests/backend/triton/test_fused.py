"""Fused graphs against eager: MLP with GELU, softmax, layer norm, residual adds, attention,
odd layouts (non-contiguous, non-power-of-two, zero-size), and what the scheduler fused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import aten_stages, check, check_lowered

torch.manual_seed(0)


def test_mlp_block_with_gelu() -> None:
    def mlp(x, w1, b1, w2, b2, g, b):
        h = F.gelu(x @ w1.t() + b1)
        y = x + (h @ w2.t() + b2)
        return F.layer_norm(y, (y.shape[-1],), g, b)

    d, hidden = 24, 40
    check(
        mlp,
        torch.randn(5, d),
        torch.randn(hidden, d) * 0.2,
        torch.randn(hidden),
        torch.randn(d, hidden) * 0.2,
        torch.randn(d),
        torch.randn(d),
        torch.randn(d),
    )


def test_mlp_module() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 20), torch.nn.GELU(), torch.nn.Linear(20, 12), torch.nn.LayerNorm(12)
    ).eval()
    x = torch.randn(3, 12)
    import framejit

    with torch.no_grad():
        got = framejit.jit(model, backend="triton")(x)
        torch.testing.assert_close(got, model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_softmax_and_log_softmax(dtype: torch.dtype) -> None:
    x = torch.randn(6, 37).to(dtype)
    check(lambda x: (torch.softmax(x, -1), torch.log_softmax(x, -1)), x)


def test_softmax_inner_dim() -> None:
    check(lambda x: torch.softmax(x, 1), torch.randn(3, 5, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_layer_norm(dtype: torch.dtype) -> None:
    x, w, b = torch.randn(4, 3, 50), torch.randn(50), torch.randn(50)
    check(lambda x, w, b: F.layer_norm(x, (50,), w, b), x.to(dtype), w.to(dtype), b.to(dtype))
    check(lambda x: F.layer_norm(x, (3, 50)), x)


def test_attention_block() -> None:
    def attention(q, k, v):
        w = (q @ k.transpose(-2, -1)) * 0.125
        return torch.softmax(w, dim=-1) @ v + q

    q, k, v = (torch.randn(2, 5, 8) for _ in range(3))
    check(attention, q, k, v)


def test_residual_chain() -> None:
    check(
        lambda x, y: torch.relu(x + y) * torch.sigmoid(y) + x - y.exp(),
        torch.randn(9, 33),
        torch.randn(33),
    )


def test_non_contiguous_inputs() -> None:
    base = torch.randn(8, 12)
    check(lambda x, y: (x * 2 + y, x.sum(-1)), base.t(), torch.randn(24, 8)[::2])
    check(lambda x: torch.softmax(x, -1), base[:, ::3])
    check(lambda x: x + 1, torch.randn(4, 6)[1:3])  # storage offset


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0,)])
def test_zero_size(shape: tuple[int, ...]) -> None:
    check(lambda x: (x * 2 + 1, x.sum(-1)), torch.randn(shape))


@pytest.mark.parametrize("n", [1, 7, 127, 1000])
def test_odd_sizes(n: int) -> None:
    check(lambda x: (x.exp() * 2, torch.softmax(x, -1), x.sum()), torch.randn(3, n))


def test_scalar_tensors() -> None:
    check(lambda x, s: (x * s, s + 1), torch.randn(4), torch.tensor(2.5))


def test_softmax_is_one_kernel() -> None:
    found = aten_stages(lambda x: torch.softmax(x, -1), torch.randn(4, 16))
    kernels = [
        line
        for line in found.source.splitlines()
        if line.startswith(("def fj_pointwise_", "def fj_reduce_"))  # not the helpers
    ]
    assert len(kernels) == 1 and kernels[0].startswith("def fj_reduce_softmax_0(")
    assert found.source.count("tl.store(") == 1  # max and sum stay in registers


def test_layer_norm_is_one_kernel() -> None:
    found = aten_stages(
        lambda x, w, b: F.layer_norm(x, (16,), w, b),
        torch.randn(4, 16),
        torch.randn(16),
        torch.randn(16),
    )
    kernels = [line for line in found.source.splitlines() if line.startswith("def fj_reduce")]
    assert kernels == [
        "def fj_reduce_layer_norm_0(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, rnumel, "
        "XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):"
    ]


def test_residual_stream_is_stored_not_recomputed_per_layer() -> None:
    """A pre-norm stack: each residual sum feeds a layer norm and the next add. Recomputing
    every sum in its readers would make the n-th layer norm read n buffers; a sum reading more
    than a few buffers is stored once, and each kernel reads a bounded number of inputs."""

    def stack(x, *ws):
        for w in ws:
            x = x + F.layer_norm(x, (16,)) @ w  # the matmul (an extern) splits the kernels
        return F.layer_norm(x, (16,))

    args = [torch.randn(4, 16), *(torch.randn(16, 16) * 0.3 for _ in range(12))]
    found = aten_stages(stack, *args)
    kernels = [line for line in found.source.splitlines() if line.startswith("def fj_")]
    launches = [line for line in found.source.splitlines() if line.startswith("    fj_")]
    assert len(launches) == 13, launches
    assert max(line.count("in_ptr") for line in kernels) <= 4, kernels  # was 13
    assert any("materialized" in h and "reading 4 buffers" in h for h in found.hints)
    check(stack, *args)


def test_declined_fusion_is_a_hint() -> None:
    def fn(x):
        y = x.exp()
        return y, y.t() + 1  # y is an output, so stored; y.t() reads it elsewhere

    found = aten_stages(fn, torch.randn(6, 6))
    assert any("not fused" in h and "reads buf0 at [i1, i0]" in h for h in found.hints), found.hints


def test_training_step_forward_and_backward() -> None:
    from triton_helpers import require_interpreter

    import framejit

    require_interpreter()
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 10), torch.nn.GELU(), torch.nn.Linear(10, 6), torch.nn.LayerNorm(6)
    )
    x = torch.randn(4, 6)
    ref = model(x).softmax(-1).sum()
    ref.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    out = framejit.jit(lambda x: model(x).softmax(-1).sum(), backend="triton")(x)
    out.backward()
    torch.testing.assert_close(out, ref)
    for p, g in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-5)


def test_gpt_block_with_embeddings_and_causal_mask() -> None:
    torch.manual_seed(1)
    vocab, seq, d, heads = 17, 6, 16, 2

    def block(ids, wte, wpe, wqkv, wo, g, b):
        x = F.embedding(ids, wte) + wpe[: ids.shape[1]]
        h = F.layer_norm(x, (d,), g, b)
        q, k, v = (h @ wqkv).split(d, dim=-1)
        q = q.view(1, seq, heads, d // heads).transpose(1, 2)
        k = k.view(1, seq, heads, d // heads).transpose(1, 2)
        v = v.view(1, seq, heads, d // heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (d // heads) ** -0.5
        causal = torch.arange(seq).view(seq, 1) >= torch.arange(seq).view(1, seq)
        att = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)
        y = (att @ v).transpose(1, 2).reshape(1, seq, d)
        x = x + y @ wo
        return x, torch.logsumexp(x, -1).argmax(-1)

    check_lowered(
        block,
        torch.randint(0, vocab, (1, seq)),
        torch.randn(vocab, d),
        torch.randn(8, d),
        torch.randn(d, 3 * d) * 0.2,
        torch.randn(d, d) * 0.2,
        torch.randn(d),
        torch.randn(d),
    )


def test_conv_bn_relu_residual_and_pool() -> None:
    torch.manual_seed(2)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
    ).eval()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2)

    def fn(x):
        y = model(x)
        return (y + y.flip(-1)).mean((2, 3)).softmax(-1)

    import framejit

    x = torch.randn(2, 3, 5, 6)
    with torch.no_grad():
        torch.testing.assert_close(framejit.jit(fn, backend="triton")(x), fn(x))


def test_rms_norm_swiglu_mlp() -> None:
    def mlp(x, w, w1, w3, w2):
        h = F.rms_norm(x, (x.shape[-1],), w)
        return x + (F.silu(h @ w1) * (h @ w3)) @ w2

    d, hidden = 12, 20
    check_lowered(
        mlp,
        torch.randn(2, 3, d),
        torch.randn(d),
        torch.randn(d, hidden) * 0.3,
        torch.randn(d, hidden) * 0.3,
        torch.randn(hidden, d) * 0.3,
    )


def test_repeated_layers_share_kernels_and_views_are_one_call() -> None:
    """The same block three times: each distinct kernel is compiled once and launched per
    layer; a matmul operand seen through several views is one `alias` call (made without
    dispatch), unchecked where the buffer is a matmul's result (always contiguous)."""

    def blocks(x, w1, w2, w3):
        for w in (w1, w2, w3):
            h = F.layer_norm(x, (16,))
            q = (h @ w).view(4, 2, 8).transpose(0, 1)  # (2, 4, 8)
            x = x + torch.softmax(q @ q.transpose(1, 2), -1).sum(0) @ x
        return x

    args = [torch.randn(4, 16), *(torch.randn(16, 16) * 0.3 for _ in range(3))]
    found = aten_stages(blocks, *args)
    defs = [line for line in found.source.splitlines() if line.startswith("def fj_")]
    launches = [line for line in found.source.splitlines() if line.lstrip().startswith("fj_")]
    assert len(launches) > len(defs) and len({d.split("(")[0] for d in defs}) == len(defs)
    call = found.source[found.source.index("def call(") :]
    views = [line for line in call.splitlines() if "(2, 4, 8), (8, 16, 1)" in line]
    assert views and all("alias(buf" in line and " if " not in line for line in views), call
    assert ".transpose(" not in call and ".as_strided(" not in call, call
    check(blocks, *args)


def test_collapsed_views_by_use_and_layout() -> None:
    """A view chain is one call: `alias` for an extern's argument (no view bookkeeping, so
    never for what the graph returns), `as_strided` elsewhere; unchecked over a buffer whose
    layout is sure, else taken only where the buffer has its expected strides."""
    from framejit.backend.triton.codegen import _collapsed_view
    from framejit.backend.triton.ir import ExternArg

    aten = torch.ops.aten
    views = ((aten.view.default, ([4, 2, 8],)), (aten.transpose.int, (0, 1)))
    value = ExternArg("buf0", views)
    layouts = {"buf0": ((8, 8), (8, 1), torch.float32)}
    texts = {
        (private, sure): _collapsed_view(value, layouts, {"buf0"} if sure else set(), private)
        for private in (True, False)
        for sure in (True, False)
    }
    assert texts[True, True] == "alias(buf0, (2, 4, 8), (8, 16, 1), 0)"
    assert texts[False, True] == "buf0.as_strided((2, 4, 8), (8, 16, 1), buf0.storage_offset())"
    assert texts[True, False] == f"{texts[True, True]} if buf0.stride() == (8, 1)"
    assert texts[False, False] == f"{texts[False, True]} if buf0.stride() == (8, 1)"
    one_view = ExternArg("buf0", views[:1])  # a single view: only an alias is cheaper
    assert (
        _collapsed_view(one_view, layouts, {"buf0"}, True)
        == "alias(buf0, (4, 2, 8), (16, 8, 1), 0)"
    )
    assert _collapsed_view(one_view, layouts, {"buf0"}, False) is None
    assert _collapsed_view(one_view, layouts, set(), True) is None


_TWISTED = torch.library.Library("fjtest_twisted", "DEF")
_TWISTED.define("twisted(Tensor x) -> Tensor")
# a kernel that returns another layout (column-major) than its fake function says (row-major),
# as some of torch's do for some inputs
_TWISTED.impl("twisted", lambda x: (x * 2).t().contiguous().t(), "CPU")
_TWISTED.impl("twisted", lambda x: (x * 2).t().contiguous().t(), "CUDA")
torch.library.register_fake("fjtest_twisted::twisted", lambda x: torch.empty_like(x), lib=_TWISTED)


@pytest.mark.parametrize("read_by_a_kernel", [True, False])
def test_views_of_an_extern_result_laid_out_otherwise_than_its_fake(read_by_a_kernel) -> None:
    """An extern's result whose run-time strides may differ from its fake's: read by a kernel,
    it is restrided first (then its views are unchecked); otherwise its collapsed view is taken
    only where its strides are the fake's, and the view ops run as they are elsewhere."""

    def fn(x, w):
        y = torch.ops.fjtest_twisted.twisted(x)
        q = y.view(4, 2, 16).transpose(0, 1) @ w
        return (q, (y + 1).sum(0)) if read_by_a_kernel else q  # eager's y + 1 is column-major

    found = aten_stages(fn, torch.randn(8, 16), torch.randn(16, 3))
    call = found.source[found.source.index("def call(") :]
    bmm = next(line for line in call.splitlines() if "torch.bmm(" in line)
    if read_by_a_kernel:
        assert "_restride(buf0" in call and "alias(buf0, (2, 4, 16), (16, 32, 1), 0)," in bmm
    else:
        assert "_restride(" not in call
        assert "alias(buf0, (2, 4, 16), (16, 32, 1), 0) if buf0.stride() == (16, 1) else " in bmm
        assert "else buf0.view(4, 2, 16).permute(" in bmm
    check(fn, torch.randn(8, 16), torch.randn(16, 3))


def test_a_matmul_read_by_a_kernel_is_not_restrided() -> None:
    """mm/addmm/bmm always return a new contiguous tensor: no stride check follows them."""

    def fn(x, w, b):
        return torch.relu(torch.addmm(b, x, w)) + torch.bmm(x[None], w[None])[0]

    found = aten_stages(fn, torch.randn(4, 8), torch.randn(8, 5), torch.randn(5))
    assert "_restride(" not in found.source and "torch.addmm(" in found.source
    check(fn, torch.randn(4, 8), torch.randn(8, 5), torch.randn(5))


def test_dead_buffers_are_reused_by_later_kernels() -> None:
    """A kernel's output of the same sizes, strides and dtype as a buffer whose last reader has
    run takes that buffer's memory (no new allocation); returned buffers are never taken."""

    def mlp(x, w1, w2, w3):
        a = torch.relu(x @ w1)
        b = torch.relu(a @ w2)  # a is dead after this matmul: b may take its memory
        c = torch.relu(b @ w3)
        return c, torch.relu(c @ w1)  # c is returned: the last relu may not take it

    args = [torch.randn(8, 16), *(torch.randn(16, 16) for _ in range(3))]
    found = aten_stages(mlp, *args)
    call = found.source[found.source.index("def call(") :]
    assert call.count("# reuse") == 2, call
    assert call.count("empty_strided(") == 2, call
    check(mlp, *args)


def test_returned_buffers_keep_their_values() -> None:
    def fn(x, w):
        a = torch.relu(x @ w)
        b = torch.sigmoid(a @ w)  # same layout as a, which is returned
        return a, b

    found = aten_stages(fn, torch.randn(8, 16), torch.randn(16, 16))
    assert "# reuse" not in found.source
    check(fn, torch.randn(8, 16), torch.randn(16, 16))


def test_only_externs_that_return_a_view_of_an_argument_keep_their_arguments() -> None:
    from framejit.backend.triton.codegen import _may_alias

    aten = torch.ops.aten
    assert not _may_alias(aten.mm.default) and not _may_alias(aten.convolution.default)
    assert _may_alias(aten.view.default) and _may_alias(aten.copy_.default)
    assert _may_alias(torch.nn.functional.relu)  # no aten schema: assumed to alias


def test_linear_layers_call_linear_without_a_transposed_view() -> None:
    """addmm(b, x, w.t()) and mm(x, w.t()), as the AOT stage traces a Linear, are one
    `linear(x, w, b)` call in the wrapper (the same aten op); other matmuls stay as they are."""

    def fn(x, w, b, m):
        h = F.linear(x, w, b).relu()
        return F.linear(h, w), h @ m  # no bias, then a plain matmul

    args = [torch.randn(8, 16), torch.randn(16, 16), torch.randn(16), torch.randn(16, 16)]
    found = aten_stages(fn, *args)
    call = found.source[found.source.index("def call(") :]
    assert call.count(" = linear(") == 2, call
    assert "torch.mm(" in call and ".permute(1, 0)" not in call, call
    check(fn, *args)


@pytest.mark.parametrize(
    "layout",
    ["channels_last", "transposed", "permuted_3d"],
)
def test_a_pointwise_kernel_walks_its_output_in_memory_order(layout: str) -> None:
    """A kernel whose output is channels-last or transposed (as eager lays out the result of
    a pointwise op on such an input) walks the dims in the output's memory order, so
    neighbouring lanes store neighbouring addresses: the store and the matching load are at
    `offsets`, not at a strided expression of the row-major loop variables."""
    if layout == "channels_last":
        x = torch.randn(2, 5, 3, 4).contiguous(memory_format=torch.channels_last)
        b = torch.randn(1, 5, 1, 1)
    elif layout == "transposed":
        x = torch.randn(7, 6).t()
        b = torch.randn(1, 7)
    else:
        x = torch.randn(3, 4, 5).permute(2, 0, 1)
        b = torch.randn(5, 1, 1)

    def fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + b) * 2

    found = aten_stages(fn, x, b)
    assert "tl.store(out_ptr0 + offsets, " in found.source
    assert "tl.load(in_ptr0 + offsets, " in found.source
    out = check(fn, x, b)
    assert out.stride() == fn(x, b).stride()


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.float64, torch.bool, torch.float16, torch.bfloat16]
)
def test_a_stored_cast_read_in_its_kernel_is_the_stored_value(dtype: torch.dtype) -> None:
    """`y = x.to(dtype)` returned and used again: y is stored, and the kernel's later nodes
    read it from registers. Its body is x's float32 value until the store converts it; those
    readers once saw that (`x.long() + 1` kept x's fraction, `x.double() * x.double()`
    multiplied in float32, and float_power's gradient bitcast a float32 as an int64; a float16
    y read unrounded, so `y.float() - x` was 0 where eager gives the rounding error)."""
    x = torch.randn(4, 5) * 3
    x[0, :3] = torch.tensor([0.5, -2.5, 1e-3])

    def fn(x):
        y = x.to(dtype)
        square = y * y  # float64: exact here, rounded to float32 once stored as float32
        return y, y + 1, (y.float() - x) * 1e4, (square.double() - square.float().double()) * 1e6

    check(fn, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("ord", [2, 6, 3.5])
def test_a_half_norm_sums_its_powers_in_float32(dtype: torch.dtype, ord: float) -> None:
    """Eager's norms accumulate float16/bfloat16 in float32 and round the norm once: 8.5 ** 6
    is past float16's range, the norm (8.5) is not. The sum of powers stays float32 here
    too (it was a float16 node, inf once rounded as its stored value)."""
    x = torch.tensor([[8.5, 0.25, -3.0], [300.0, -2.0, 1.0]], dtype=dtype)
    check(lambda x: torch.linalg.vector_norm(x, ord, dim=-1), x)
    check(lambda x: torch.linalg.vector_norm(x, ord), x[0])


@pytest.mark.parametrize("heads", [12, 3, 16])
def test_a_head_merge_reads_runs_of_consecutive_addresses(heads: int) -> None:
    """Attention's output `[B, H, T, D]` transposed to `[B, T, H * D]` (a copy): its load is
    written from `offsets` where a loop variable's size is a multiple of the divisor
    (`(offsets // 64) % 12`, `offsets % 64`, not `i2 // 64`, `i2 % 64` of `i2 = offsets %
    768`), so that Triton's analysis sees runs of 64 consecutive addresses and loads them as
    vectors (with 12 heads the sm_90 code loaded 2 bytes at a time; README, Triton backend); the
    values are eager's."""

    def merge(y: torch.Tensor) -> torch.Tensor:
        b, h, t, d = y.shape
        return y.transpose(1, 2).contiguous().view(b, t, h * d) * 2

    y = torch.randn(2, heads, 5, 64)
    source = aten_stages(merge, y).source
    load = next(line for line in source.splitlines() if "tl.load(" in line)
    assert "(offsets % 64)" in load and "i2" not in load, load
    if heads != 16:  # 16 * 64 is a power of two: `offsets % 1024`'s own analysis sufficed
        assert f"((offsets // 64) % {heads})" in load, load
    check(merge, y)
    check(merge, y.to(torch.bfloat16))


def test_index_rules_for_a_remainder_divided_again() -> None:
    """(x % (k d)) // d is (x // d) % k and (x % (k m)) % m is x % m; other divisors keep the
    remainder (not identities there)."""
    from framejit.backend.triton.ir import Ix, Sym

    x = Ix.of(Sym("x", 10_000))
    assert str(x.mod(768).floordiv(64)) == "((x // 64) % 12)"
    assert str(x.mod(768).mod(64)) == "(x % 64)"
    assert str(x.mod(768).floordiv(100)) == "((x % 768) // 100)"
    assert str(x.mod(768).mod(100)) == "((x % 768) % 100)"
    for v in range(0, 10_000, 37):
        assert (v % 768) // 64 == (v // 64) % 12 and (v % 768) % 64 == v % 64
