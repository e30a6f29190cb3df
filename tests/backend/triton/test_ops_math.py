"""Float math beyond the basics (exp2/log2/log10, tan, hyperbolic and inverse trig, atan2,
hypot, copysign, fmax/fmin, isinf/isfinite, erfc, logaddexp) and the activations built from
them, against eager over awkward values."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import check, check_lowered, kernel_device

torch.manual_seed(0)

WIDE = torch.cat([torch.randn(40) * 3, torch.tensor([0.0, -0.0, 1e-6, -1e-6, 7.5, -30.0, 1e4])])
UNIT = torch.cat([torch.rand(20) * 2 - 1, torch.tensor([-1.0, 1.0, 0.0, 0.999, -0.9999])])

UNARY = {
    "exp2": (lambda x: torch.exp2(x), WIDE.clamp(-20, 20)),
    "log2": (lambda x: torch.log2(x), WIDE.abs() + 1e-3),
    "log10": (lambda x: torch.log10(x), WIDE.abs() + 1e-3),
    "expm1": (lambda x: torch.expm1(x), WIDE.clamp(-20, 20)),
    "tan": (lambda x: torch.tan(x), UNIT * 1.4),
    "sinh": (lambda x: torch.sinh(x), WIDE.clamp(-20, 20)),
    "cosh": (lambda x: torch.cosh(x), WIDE.clamp(-20, 20)),
    "asinh": (lambda x: torch.asinh(x), torch.cat([WIDE, torch.tensor([1e20, -1e25])])),
    "acosh": (lambda x: torch.acosh(x), torch.cat([WIDE.abs() + 1, torch.tensor([1e20])])),
    "atanh": (lambda x: torch.atanh(x), UNIT * 0.999),
    "atan": (lambda x: torch.atan(x), torch.cat([WIDE, torch.tensor([math.inf, -math.inf])])),
    "asin": (lambda x: torch.asin(x), UNIT),
    "acos": (lambda x: torch.acos(x), UNIT),
    "isinf": (
        lambda x: (torch.isinf(x), torch.isfinite(x)),
        torch.tensor([1.0, math.inf, -math.inf, math.nan]),
    ),
    "celu": (lambda x: F.celu(x, 0.7), WIDE),
    "mish": (lambda x: F.mish(x), WIDE.clamp(-20, 20)),
    "hardswish": (lambda x: F.hardswish(x), WIDE),
    "logsigmoid": (lambda x: F.logsigmoid(x), WIDE),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str) -> None:
    fn, x = UNARY[name]
    check_lowered(fn, x)


def test_half_and_int_inputs_promote() -> None:
    check_lowered(
        lambda x: (torch.atan(x), torch.sinh(x), torch.log2(x.abs() + 1)), torch.randn(9).half()
    )
    check_lowered(
        lambda x: (torch.atan(x), torch.exp2(x), torch.isinf(x)), torch.randint(-4, 4, (7,))
    )


def test_binary() -> None:
    y = torch.cat([torch.randn(30), torch.tensor([0.0, 0.0, 1.0, -1.0, -2.0, math.nan])])
    x = torch.cat([torch.randn(30), torch.tensor([0.0, -1.0, 0.0, 0.0, -0.0, 1.0])])
    check_lowered(
        lambda y, x: (
            torch.atan2(y, x),
            torch.hypot(y, x),
            torch.copysign(y, x),
            torch.fmax(y, x),
            torch.fmin(x, y),
            torch.logaddexp(y, x),
        ),
        y,
        x,
    )


def test_bool_arithmetic() -> None:
    a, b = torch.rand(5, 4) > 0.5, torch.rand(5, 4) > 0.5
    check_lowered(lambda a, b: (a + b, a * b, torch.isfinite(a.float() / 0.0)), a, b)


def _float64_sweep() -> torch.Tensor:
    """Magnitudes from denormal to near overflow, the range reductions' edges, specials."""
    g = torch.Generator(kernel_device()).manual_seed(0)
    magnitude = torch.cat(
        [
            10 ** (torch.rand(300, generator=g, dtype=torch.float64) * 616 - 308),
            torch.rand(300, generator=g, dtype=torch.float64) * 4,
            1 - 10 ** -(torch.rand(100, generator=g, dtype=torch.float64) * 16),
            torch.tensor([0.0, 5e-324, 1.0, 0.2679491924311227, 1.7e308, math.inf, math.nan]),
        ]
    ).double()
    return torch.cat([magnitude, -magnitude])


def test_inverse_trig_is_float64_accurate() -> None:
    """atan, atan2, asin and acos in float64 to float64 accuracy, not float32's (~3e-9)."""
    x = _float64_sweep()
    y = x[torch.randperm(len(x), generator=torch.Generator(kernel_device()).manual_seed(1))]
    unit = x.clamp(-1, 1)
    got = check_lowered(
        lambda x, y, u: (torch.atan(x), torch.atan2(x, y), torch.asin(u), torch.acos(u)),
        x,
        y,
        unit,
    )
    want = (torch.atan(x), torch.atan2(x, y), torch.asin(unit), torch.acos(unit))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-13, atol=0.0, equal_nan=True)
        zeros = w == 0  # the sign of a zero result too
        assert torch.equal(torch.signbit(g[zeros]), torch.signbit(w[zeros]))


def test_tails_where_a_difference_formula_cancels() -> None:
    """erfc runs as torch's kernel (1 - erf(x) was 0 from x = 4 in float32, where erfc is
    1.5e-8); atanh near -1 keeps its precision (log1p of |x|, then the sign); integer and
    bfloat16 linspace/logspace cast their ends first, as eager does (kept whole)."""
    x = torch.tensor([-1 + 1e-4, -0.999, -0.5, -1e-3, -0.0, 0.0, 0.5, 0.999, 1.0, -1.0, 2.0])
    got = check(lambda x: torch.atanh(x), x)
    torch.testing.assert_close(got, torch.atanh(x), rtol=2e-7, atol=0.0, equal_nan=True)
    t = torch.tensor([-2.0, 0.0, 1.0, 3.5, 4.0, 6.0, 9.0])
    got = check(lambda t: torch.erfc(t), t)
    torch.testing.assert_close(got, torch.erfc(t), rtol=1e-6, atol=0.0)
    check(
        lambda x: (
            torch.linspace(4.3, -3, 50, dtype=torch.int64) + x,
            torch.logspace(4.3, -3, 2, dtype=torch.bfloat16),
        ),
        torch.zeros(1, dtype=torch.int64),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("eps", [None, 1e-6, 0.1, -1.0, math.nan])
def test_logit_clamps_in_the_tensors_dtype(dtype: torch.dtype, eps: float | None) -> None:
    # the AOT stage's decomposition clamped to [eps, 1 - eps] in float32: logit(1.0, 1e-6)
    # of float16 gave 13.8 where the CPU's eager (1 - 1e-6 rounds to 1.0) gives inf; CUDA's
    # clamps in float32 and gives 13.8 (test_logit_on_cuda_clamps_in_float32)
    x = torch.cat([torch.tensor([0.0, 1.0, 0.25, float("nan"), -0.5, 1.5]), torch.rand(40)])
    # eager's first float32 logit on the CPU in a process was, now and then, up to 250 ulps
    # from the true value (framejit's was not) and every later call exact: called once first
    torch.logit(x.to(dtype), eps)
    check_lowered(lambda t: torch.logit(t, eps), x.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_logit_on_cuda_clamps_in_float32(dtype: torch.dtype, monkeypatch) -> None:
    """CUDA's logit kernel computes float16 and bfloat16 in float32, the bounds eps and
    1 - eps too, and rounds once (here the lowering is made to follow it in the interpreter):
    logit(1.0, 1e-6) is finite, 13.8; a negative or NaN eps clamps nothing."""
    from framejit.backend.triton.ops import pointwise

    import framejit

    monkeypatch.setattr(pointwise, "eager_is_cuda", lambda device: True)
    x = torch.cat([torch.tensor([0.0, 1.0, 0.25, float("nan"), -0.5, 1.5]), torch.rand(40)])
    x = x.to(kernel_device(), dtype)

    def cuda_logit(t: torch.Tensor, eps: float) -> torch.Tensor:
        z = t.float()
        if eps >= 0:
            lo = torch.tensor(eps, dtype=torch.float32, device="cpu")
            z = torch.where(z < lo, lo, torch.where(z > 1 - lo, 1 - lo, z))
        return torch.log(z / (1 - z)).to(dtype)

    for eps in (1e-6, 0.1, -1.0, float("nan")):
        with torch.no_grad():
            got = framejit.jit(lambda t, e=eps: torch.logit(t, e), backend="triton")(x)
        want = cuda_logit(x.cpu(), eps)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, atol=0, rtol=1e-6)
    assert framejit.jit(lambda t: torch.logit(t, 1e-6), backend="triton")(x)[1].isfinite()
