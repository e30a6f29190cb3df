"""Every lowered op, over a few shapes and dtypes, against eager (Triton's CPU interpreter)."""

from __future__ import annotations

import pytest
import torch
from triton_helpers import check

torch.manual_seed(0)

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def rand(*shape: int, dtype: torch.dtype = torch.float32, positive: bool = False) -> torch.Tensor:
    x = torch.randn(*shape)
    if positive:
        x = x.abs() + 0.1
    return x.to(dtype)


UNARY = {
    "neg": torch.neg,
    "exp": torch.exp,
    "abs": torch.abs,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "erf": torch.erf,
    "sin": torch.sin,
    "cos": torch.cos,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "trunc": torch.trunc,
    "round": torch.round,
    "sign": torch.sign,
    "log1p": lambda x: torch.log1p(x.abs()),
    "expm1": torch.expm1,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "leaky_relu": lambda x: torch.nn.functional.leaky_relu(x, 0.2),
    "softplus": torch.nn.functional.softplus,
    "isnan": torch.isnan,
    "square": lambda x: x**2,
    "cube": lambda x: x**3,
    "pow_frac": lambda x: x.abs() ** 1.7,
    "pow_neg": lambda x: (x.abs() + 1) ** -2,
}

POSITIVE = {
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "pow_tensor": lambda x: x ** (x - 0.5),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str) -> None:
    check(UNARY[name], rand(3, 5))


# The frontend does not capture these functional forms yet: traced with fx instead.
NOT_CAPTURED = {
    "silu": lambda x: torch.nn.functional.silu(x),
    "elu": lambda x: torch.nn.functional.elu(x),
    "hardtanh": lambda x: torch.nn.functional.hardtanh(x),
}


@pytest.mark.parametrize("name", sorted(NOT_CAPTURED))
def test_unary_traced(name: str) -> None:
    check(NOT_CAPTURED[name], rand(3, 5), frontend=False)


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_unary_positive(name: str) -> None:
    check(POSITIVE[name], rand(7, positive=True))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["exp", "tanh", "gelu", "sigmoid"])
def test_unary_dtypes(name: str, dtype: torch.dtype) -> None:
    check(UNARY[name], rand(4, 6, dtype=dtype))


BINARY = {
    "add": torch.add,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "where": lambda a, b: torch.where(a > b, a, b),
    "clamp_tensor": lambda a, b: torch.clamp(a, min=b),
    "logical_and": lambda a, b: torch.logical_and(a > 0, b > 0),
    "logical_or": lambda a, b: torch.logical_or(a > 0, b > 0),
    "logical_not": lambda a, b: torch.logical_not(a > b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name: str) -> None:
    check(BINARY[name], rand(5, 7), rand(5, 7) + 0.1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_broadcast(dtype: torch.dtype) -> None:
    check(lambda a, b: a * b + a, rand(3, 1, 5, dtype=dtype), rand(4, 1, dtype=dtype))


def test_scalars() -> None:
    check(lambda x: (x + 1) * 2 - 3 / (x * x + 1), rand(9))
    check(lambda x: torch.clamp(x, -0.5, 0.5) + x.clamp_min(0.1) + x.clamp_max(0.2), rand(4, 4))


def test_integers_and_bool() -> None:
    a = torch.randint(-5, 5, (4, 6))
    b = torch.randint(1, 5, (4, 6))
    check(lambda a, b: (a + b, a * b, a - 2 * b, a // 1 == a, a & b, a | b, a ^ b, ~a), a, b)
    check(lambda a, b: (a / b, (a > 0) & (b > 2), ~(a > 0), a.float() * 0.5), a, b)
    check(lambda a: torch.fmod(a, 3), a)


def test_casts() -> None:
    x = rand(4, 5) * 10
    check(
        lambda x: (x.to(torch.float16), x.to(torch.bfloat16), x.to(torch.int64), x.to(torch.bool)),
        x,
    )
    check(lambda x: (x.float() * 2, x.to(torch.int32)), rand(3, 3, dtype=torch.float16))
    check(lambda x: x.to(torch.float32) + 1, torch.tensor([True, False, True]))


def test_creation() -> None:
    check(lambda x: (torch.zeros_like(x), torch.full_like(x, 3.5), x + torch.arange(5)), rand(2, 5))
    check(lambda x: x * torch.arange(1, 11, 3), rand(4))


VIEWS = {
    "transpose": lambda x: x.t() * 2,
    "permute": lambda x: x.permute(2, 0, 1).exp() if x.dim() == 3 else x.permute(1, 0) + 1,
    "view": lambda x: x.reshape(6, -1) + 1,
    "unsqueeze": lambda x: x.unsqueeze(1) + x.unsqueeze(0),
    "squeeze": lambda x: x.unsqueeze(0).squeeze(0) + 1,
    "expand": lambda x: x[:1].expand(4, -1) * 3,
    "slice": lambda x: x[1:, ::2] - 1,
    "select": lambda x: x[2] + x[:, 1].sum(),
    "t_out": lambda x: (x + 1).t(),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views(name: str) -> None:
    check(VIEWS[name], rand(4, 6))


def test_permute_3d() -> None:
    check(VIEWS["permute"], rand(2, 3, 5))


REDUCTIONS = {
    "sum_last": lambda x: x.sum(-1),
    "sum_all": lambda x: x.sum(),
    "sum_first": lambda x: x.sum(0),
    "sum_keepdim": lambda x: x.sum(-1, keepdim=True) * x,
    "mean": lambda x: x.mean(-1),
    "mean_all": lambda x: x.mean(),
    "amax": lambda x: x.amax(-1),
    "amin": lambda x: x.amin(-1, keepdim=True),
    "max_all": lambda x: x.max(),
    "var": lambda x: x.var(-1),
    "var_all": lambda x: x.var(),
    "std": lambda x: x.std(-1, correction=0),
    "norm": lambda x: torch.linalg.vector_norm(x, dim=-1),
    "any": lambda x: (x > 1).any(-1),
    "sum_int": lambda x: (x > 0).sum(-1),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name: str) -> None:
    check(REDUCTIONS[name], rand(5, 7))


@pytest.mark.parametrize("dtype", FLOATS)
def test_reduction_dtypes(dtype: torch.dtype) -> None:
    check(lambda x: (x.sum(-1), x.amax(-1), x.mean()), rand(3, 33, dtype=dtype))


def test_looped_reduction() -> None:
    # rows past the persistent limit loop over RBLOCK chunks
    check(lambda x: (torch.softmax(x, -1), x.sum(-1), x.amax(-1)), rand(2, 5000))


def test_extern_fallback_ops() -> None:
    check(lambda x: (torch.cumsum(x, -1) + 1, torch.sort(x, -1).values * 2), rand(3, 5))
    check(lambda x, w: torch.cat([x, w], 0).relu(), rand(2, 3), rand(4, 3))


def test_a_view_as_another_dtype_runs_as_an_aten_call() -> None:
    # `x.view(torch.int32)` reached the shape view's lowering, which read the dtype as sizes
    check(lambda x: (x.view(torch.int32) + 1, x.view(torch.int16)[:, :3] * 2), torch.randn(4, 3))
