"""0-dim CPU tensor inputs are kernel arguments, read on the host at each call (`.item()`), as
eager's CUDA kernels take a CPU scalar: `scores / torch.tensor(8.0)` on CUDA data, a scale
made without a device or a CPU scalar buffer, runs in the fused kernels instead of sending the
whole graph to aten (the CPU tensor made the Triton backend fall back before). CPU graphs take
them the same way, so the interpreter tests the path; the CUDA graph's own check is marked
`cuda`, and on any machine the lowering for CUDA data is read from fake CUDA tensors."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from framejit.backend.triton import cache, graph_devices
from torch.fx.experimental.proxy_tensor import make_fx
from triton_helpers import aten_stages, kernel_device, on_fake_cuda, require_interpreter

import framejit


def _host(value: object, dtype: torch.dtype) -> torch.Tensor:
    """A 0-dim CPU tensor (the tests may run with CUDA as the default device)."""
    return torch.tensor(value, dtype=dtype, device="cpu")


def program(x: torch.Tensor, s: torch.Tensor, i: torch.Tensor, b: torch.Tensor):
    return (x / s + i) * b, x.to(torch.bfloat16) * s, torch.where(x > s, x, s)


def test_cpu_scalars_are_kernel_arguments() -> None:
    """The wrapper reads each 0-dim input's value and passes it; no kernel loads it."""
    x = torch.randn(4, 8)
    args = (x, _host(8.0, torch.float32), _host(3, torch.int64), _host(True, torch.bool))
    source = aten_stages(program, *args).source
    call = source[source.index("def call(") :]
    # a float as its float32 bits, an int as itself, a bool as 0 or 1
    assert "host0 = arg1_1.view(torch.int32).item()" in call, call
    assert "host1 = arg2_1.item()" in call and "host2 = int(arg3_1.item())" in call, call
    kernels = source[source.index("def fj_pointwise") : source.index("# Launchers")]
    assert "host0, tl.int32).to(tl.float32, bitcast=True)" in kernels, kernels
    assert "host1, tl.int64)" in kernels and "host2, tl.int32) != 0" in kernels, kernels
    assert kernels.count("tl.load(") == 1, kernels  # x alone


@pytest.mark.parametrize(
    "values",
    [
        (8.0, torch.float32, 3, torch.int64, True),
        (-0.0, torch.float32, -7, torch.int64, False),  # x / -0.0: infinities of x's other sign
        (0.375, torch.bfloat16, 2**40, torch.int64, True),  # an int64 past int32
        (3.0e38, torch.float32, -(2**31), torch.int32, True),
        (float("nan"), torch.float16, 1, torch.int32, False),
        (0.1, torch.float64, 5, torch.int64, True),  # float64: its own 64 bits, rounded as eager
        (-1e-300, torch.float64, 0, torch.int32, True),  # float32 underflows it to -0.0
    ],
)
def test_cpu_scalar_values_match_eager_without_recompiling(values: tuple) -> None:
    """Each call reads the scalars' current values (one compiled graph for all of them), and
    the results are eager's: values, dtypes (a 0-dim input promotes as a 0-dim tensor, not as
    a Python number), signed zeros, NaN, int64 values past int32."""
    require_interpreter(loops=False)
    device = kernel_device()
    s_value, s_dtype, i_value, i_dtype, b_value = values
    x = torch.tensor([[1.5, -2.0, 0.0], [7.25, -0.0, 1e30]], device=device)
    compiled = framejit.jit(program, backend="triton")
    first = (x, _host(2.0, s_dtype), _host(1, i_dtype), _host(True, torch.bool))
    for want, got in zip(program(*first), compiled(*first)):
        torch.testing.assert_close(got, want, equal_nan=True)
    loads = sum(cache.STATS.values())
    args = (x, _host(s_value, s_dtype), _host(i_value, i_dtype), _host(b_value, torch.bool))
    for want, got in zip(program(*args), compiled(*args)):
        assert got.dtype == want.dtype and got.device == want.device
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(got.signbit(), want.signbit())
    assert sum(cache.STATS.values()) == loads, "a new module for new scalar values"


def test_a_cpu_scalar_beside_cuda_tensors_stays_in_the_kernels() -> None:
    """With CUDA data, the 0-dim CPU input does not make the graph a CPU one (which sent it to
    aten whole): the graph's device is CUDA's and its kernels take the scalar by value."""
    x, w = on_fake_cuda(torch.randn(4, 8), torch.randn(8))
    scale = _host(0.125, torch.float32)

    def attention_like(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * w / scale, -1)

    gm = make_fx(attention_like)(x, w, scale)
    assert graph_devices(gm, [x, w, scale]) == {"cuda:0"}
    source = aten_stages(attention_like, x, w, scale).source
    assert "host0 = arg2_1.view(torch.int32).item()" in source
    assert "DEVICE = torch.device('cuda:0')" in source
    # a 0-dim CPU tensor among CPU tensors, or a 1-element one, stays a tensor
    assert graph_devices(gm, [x, w, _host([0.5], torch.float32)]) == {"cuda:0", "cpu"}


@pytest.mark.cuda
def test_a_cpu_scalar_with_cuda_data_runs_the_kernels() -> None:
    """On a GPU: the kernels run (a module loaded, no aten fallback) and match eager."""
    x = torch.randn(64, 128, device="cuda")
    w = torch.randn(128, device="cuda")
    compiled = framejit.jit(lambda x, w, s: torch.softmax(x * w / s, -1), backend="triton")
    loads = sum(cache.STATS.values())
    for value in (8.0, 0.5):
        s = _host(value, torch.float32)
        torch.testing.assert_close(compiled(x, w, s), torch.softmax(x * w / s, -1))
    assert sum(cache.STATS.values()) == loads + 1


def scaled_softmax(x: torch.Tensor) -> torch.Tensor:
    # tensor constants made without a device: CPU scalars beside the data, in float64 too
    return torch.softmax(x / torch.tensor(8.0), -1) * torch.tensor(0.1, dtype=torch.float64)


def _constants_in_one_kernel(fn: Any, x: torch.Tensor, *literals: str) -> list[Any]:
    """`fn`'s CPU scalar constants written into one kernel (no CONSTANTS table read by the
    wrapper, each of `literals` in the source), and its graph CUDA's beside CUDA data; returns
    the fake CUDA inputs."""
    source = aten_stages(fn, x).source
    call = source[source.index("def call(") :]
    assert "CONSTANTS" not in call and call.count("_run(") == 1, call
    assert all(text in source for text in literals), source
    fake = on_fake_cuda(x)
    assert graph_devices(make_fx(fn)(*fake), list(fake)) == {"cuda:0"}
    return fake


def test_cpu_scalar_constants_are_written_into_the_kernels() -> None:
    """`torch.tensor(8.0)` in the function is a graph constant and its lift_fresh_copy: its
    value goes into the kernel's source (no CPU tensor for the kernels to read, no alias call
    per run, and the softmax stays one kernel), rounded as eager rounds a CPU scalar (0.1 in
    float64 times float32 data is 0.1 rounded to float32)."""
    x = torch.randn(4, 8)
    _constants_in_one_kernel(scaled_softmax, x, "8.0", "0.1")
    require_interpreter(loops=False)
    x = x.to(kernel_device())
    torch.testing.assert_close(framejit.jit(scaled_softmax, backend="triton")(x), scaled_softmax(x))

    def scaled(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x / torch.tensor(3.0),
            x * torch.tensor(0.1, dtype=torch.float64),
            x + torch.tensor(7),
        )

    for want, got in zip(scaled(x), framejit.jit(scaled, backend="triton")(x)):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_a_returned_cpu_scalar_stays_a_cpu_tensor_of_its_own() -> None:
    """A constant the graph returns is a CPU tensor (a fresh one each call, as eager's), so
    beside CUDA data it keeps the graph's CPU device (aten runs it, as before)."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = torch.tensor(3.0, device="cpu")
        return x * c, c

    fake = on_fake_cuda(torch.randn(4))
    assert graph_devices(make_fx(fn)(*fake), list(fake)) == {"cuda:0", "cpu"}
    require_interpreter(loops=False)
    compiled = framejit.jit(fn, backend="triton")
    x = torch.randn(4)
    first, c1 = compiled(x)
    _, c2 = compiled(x)
    c1.add_(1)
    assert c2.item() == 3.0 and c1.device.type == "cpu"
    torch.testing.assert_close(first, x * 3.0)


def test_a_bool_cpu_scalar_in_a_backward_graph() -> None:
    """amax's backward saves `eq` (a 0-dim bool when the input is 0-dim): a bool host scalar
    comes to the kernel as an int (Triton 3.6's interpreter failed to make an int1 block of a
    Python bool); the gradients are eager's."""
    require_interpreter(loops=False)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, ()).sum() * 3

    x = torch.tensor(0.75, device=kernel_device(), requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    fn(x).backward()
    framejit.jit(fn, backend="triton")(y).backward()
    assert torch.equal(y.grad, x.grad)


def test_cpu_scalars_computed_from_constants_are_folded() -> None:
    """0-dim CPU values computed from constants alone (`torch.log(torch.tensor(10000.0)) / 8`,
    `torch.tensor(64.0).rsqrt()`, `torch.tensor(3).float()`, `torch.full((), 2.0)`) are computed
    while lowering, on the CPU, as eager computes them, and written into the kernel: beside
    CUDA data the graph is CUDA's. Random values (`torch.rand(())`) are not folded."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        scale = torch.tensor(64.0, device="cpu").rsqrt()
        shift = torch.log(torch.tensor(10000.0, device="cpu")) / 8
        three = torch.tensor(3, device="cpu").float()
        two = torch.full((), 2.0, device="cpu")
        return x * scale + three - shift * two

    x = torch.randn(4, 8)
    fake = _constants_in_one_kernel(fn, x, "0.125", "3.0")

    def noisy(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rand((), device="cpu")

    assert graph_devices(make_fx(noisy)(*fake), list(fake)) == {"cuda:0", "cpu"}
    require_interpreter(loops=False)
    x = x.to(kernel_device())
    torch.testing.assert_close(framejit.jit(fn, backend="triton")(x), fn(x), rtol=0, atol=0)


def test_a_constant_computation_that_raises_raises_at_each_call() -> None:
    """A constant computation eager fails at run time (integer division by zero) is not
    folded: the graph runs, and raises eager's error, at each call."""
    require_interpreter(loops=False)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + torch.tensor(7, device="cpu") // torch.tensor(0, device="cpu")

    x = torch.ones(3, dtype=torch.int64, device=kernel_device())
    with pytest.raises(RuntimeError) as eager:
        fn(x)
    compiled = framejit.jit(fn, backend="triton")
    for _ in range(2):
        with pytest.raises(RuntimeError) as got:
            compiled(x)
        assert str(got.value) == str(eager.value)


def test_cpu_scalars_computed_from_inputs_are_computed_in_the_kernels() -> None:
    """`temperature.clamp(min=0.1)`, `(k * 2).float()`, a same-dtype copy: 0-dim CPU values
    computed from CPU scalar inputs are lowered (with the CPU's eager semantics: the op runs on
    the CPU in eager) into the kernels that read them, so beside CUDA data the graph is
    CUDA's. An op without a lowering there (`lgamma`) sends the whole graph to aten: an aten
    call would make a CPU tensor the kernels could not read on a GPU."""

    def fn(x: torch.Tensor, t: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return x / t.clamp(min=0.1) + (k * 2).float() * t.clone()

    def unlowered(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return x * t.lgamma()

    x = torch.randn(4, 8)
    t, k = _host(0.7, torch.float32), _host(3, torch.int64)
    source = aten_stages(fn, x, t, k).source
    assert source[source.index("def call(") :].count("_run(") == 1, source
    fake = on_fake_cuda(x)[0]
    assert graph_devices(make_fx(fn)(fake, t, k), [fake, t, k]) == {"cuda:0"}
    # lowered for CUDA data too: the scalar copies are not copies "to another device"
    source = aten_stages(fn, fake, t, k).source
    assert source[source.index("def call(") :].count("_run(") == 1, source
    require_interpreter(loops=False)
    x = x.to(kernel_device())
    compiled = framejit.jit(fn, backend="triton")
    for value in (0.7, 0.05, -2.0, float("nan"), -0.0):
        t = _host(value, torch.float32)
        torch.testing.assert_close(compiled(x, t, k), fn(x, t, k), rtol=0, atol=0, equal_nan=True)
    loads = sum(cache.STATS.values())
    got = framejit.jit(unlowered, backend="triton")(x, t)
    torch.testing.assert_close(got, unlowered(x, t), equal_nan=True)
    assert sum(cache.STATS.values()) == loads, "a module loaded for a graph aten runs"


def test_integer_division_by_zero_of_cpu_scalars_raises_as_eager() -> None:
    """`k // j` of CPU scalars is the CPU's integer division, which raises for a zero divisor
    (CUDA's gives a value): so it does in the kernels, whatever the data's device."""
    require_interpreter(loops=False)

    def fn(x: torch.Tensor, k: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        return x * (k // j)

    k = _host(7, torch.int64)
    # beside CUDA data too: the kernel checks the divisor (it reports to the error buffer)
    source = aten_stages(fn, on_fake_cuda(torch.ones(3))[0], k, _host(2, torch.int64)).source
    assert "err_ptr" in source, source
    x = torch.ones(3, device=kernel_device())
    compiled = framejit.jit(fn, backend="triton")
    assert torch.equal(compiled(x, k, _host(2, torch.int64)), fn(x, k, _host(2, torch.int64)))
    with pytest.raises(RuntimeError) as eager:
        fn(x, k, _host(0, torch.int64))
    with pytest.raises(RuntimeError) as got:
        compiled(x, k, _host(0, torch.int64))
    assert str(got.value) == str(eager.value)


def test_a_float64_cpu_scalar_with_float64_data_keeps_its_precision() -> None:
    """A float64 CPU scalar reaches the kernel as its 64 bits: with float64 data the product
    is eager's to the last bit (a float32 argument would have rounded 0.1)."""
    require_interpreter(loops=False)
    x = torch.linspace(-3, 3, 7, dtype=torch.float64, device=kernel_device())
    s = _host(0.1, torch.float64)

    def fn(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x * s + s

    source = aten_stages(fn, x.cpu(), s).source
    assert "host0 = arg1_1.view(torch.int64).item()" in source, source
    assert torch.equal(framejit.jit(fn, backend="triton")(x, s), fn(x, s))
