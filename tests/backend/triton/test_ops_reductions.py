"""argmax/argmin, max/min with indices, prod, any/all, var/std corrections, logsumexp and
rms_norm: lowered (no extern), against eager, over dims, dtypes and awkward values."""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import check_lowered, require_interpreter

import framejit

torch.manual_seed(0)

ARG = {
    "argmax_last": lambda x: x.argmax(-1),
    "argmax_first": lambda x: x.argmax(0),
    "argmax_all": lambda x: x.argmax(),
    "argmax_keepdim": lambda x: x.argmax(1, keepdim=True),
    "argmin_last": lambda x: x.argmin(-1),
    "argmin_all_keepdim": lambda x: torch.argmin(x, keepdim=True),
    "max_dim": lambda x: (torch.max(x, -1)[0], torch.max(x, -1)[1]),
    "min_dim_keepdim": lambda x: (torch.min(x, 0, True)[0] + 1, torch.min(x, 0, True)[1]),
}


@pytest.mark.parametrize("name", sorted(ARG))
def test_arg_reductions(name: str) -> None:
    check_lowered(ARG[name], torch.randn(5, 7))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.int64])
def test_argmax_dtypes_and_ties(dtype: torch.dtype) -> None:
    x = torch.randint(-3, 3, (6, 9)).to(dtype)  # many ties: the first index wins
    check_lowered(lambda x: (x.argmax(-1), x.argmin(0), x.argmax()), x)


def test_argmax_special_values() -> None:
    x = torch.randn(6, 5)
    x[0, 3] = math.nan
    x[1] = -math.inf
    x[2, 1] = math.inf
    x[2, 4] = math.inf
    x[3, 0], x[3, 2] = math.nan, math.nan
    check_lowered(lambda x: (x.argmax(-1), x.argmin(-1), x.max(-1).indices), x)
    check_lowered(lambda x: (x > 0).to(torch.uint8).argmax(-1), x)


def test_argmax_looped_rows() -> None:
    x = torch.randn(3, 5000)
    x[1, 4500] = 100.0
    x[2, 17] = math.nan
    check_lowered(lambda x: (x.argmax(-1), x.argmin(-1)), x)


def _constant_bodies(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.shape[1]
    values, indices = torch.full((3, n), 1.0).max(1)
    flags = torch.full((3, n), True)
    return (
        values + x.sum(1),
        indices,
        torch.full((n, 3), 2.0).argmax(0),
        torch.full((3, n), 7, dtype=torch.int64).argmin(1),
        flags.max(1).values,
        flags.max(1).indices,
        flags.any(1),
        flags.all(1),
    )


@pytest.mark.parametrize("dynamic", [False, True])
def test_reductions_of_a_constant(dynamic: bool, caplog: pytest.LogCaptureFixture) -> None:
    """`torch.full(...).max(1)`: the reduced body is a literal, which the kernels once combined
    as a Python number (`1.0 & ...`, `True.to(...)`) and failed at their first run. Rows short
    enough for one block and long enough to loop; symbolic sizes loop too."""
    require_interpreter()
    jitted = framejit.jit(_constant_bodies, backend="triton", dynamic=dynamic)
    with caplog.at_level(logging.WARNING, logger="framejit.backend"):
        for n in (4, 7, 5000):
            x = torch.randn(3, n)
            for got, want in zip(jitted(x), _constant_bodies(x)):
                assert got.dtype == want.dtype
                # a float32 sum of 5000 normal numbers: the kernels add in another order than
                # eager (1e-5 relative apart, depending on the draw)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not [r for r in caplog.records if "kernels failed" in r.getMessage()]


PRODS = {
    "prod_last": lambda x: x.prod(-1),
    "prod_all": lambda x: x.prod(),
    "prod_keepdim": lambda x: x.prod(0, keepdim=True) * x,
}


@pytest.mark.parametrize("name", sorted(PRODS))
def test_prod(name: str) -> None:
    check_lowered(PRODS[name], torch.rand(4, 6) + 0.5)


def test_prod_special() -> None:
    x = torch.rand(3, 6) + 0.5
    x[1, 2] = 0.0
    check_lowered(lambda x: x.prod(-1), x)
    check_lowered(lambda x: x.prod(-1), torch.randint(-3, 4, (3, 5)))  # int64 result
    check_lowered(lambda x: x.prod(-1), torch.randint(-3, 4, (3, 5), dtype=torch.int32))
    check_lowered(lambda x: x.prod(1), (torch.rand(2, 3000) * 0.01 + 0.9995))  # looped


def test_any_all() -> None:
    x = torch.randn(5, 6)
    check_lowered(lambda x: ((x > 1).any(-1), (x > -1).all(-1), (x > -3).all(), (x > 3).any()), x)
    check_lowered(lambda x: (x.all(0), x.any(1)), torch.randint(0, 2, (4, 3)))
    check_lowered(lambda x: (x != 0).all(-1, keepdim=True), torch.randn(0, 4))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.float32])
def test_any_all_over_no_elements(dtype: torch.dtype) -> None:
    # all() of nothing is True and any() False: a bool reduction starts from those, not from
    # int32's extremes; uint8 gives uint8 0 and 1
    def fn(x):
        return x.all(0), x.any(0), x.all(), x.any(), (x > 0).all(0), x.all(1), x.any(1)

    check_lowered(fn, torch.zeros(0, 3, dtype=dtype))
    check_lowered(lambda x: (x.all(1), x.any(1), x.all(), x.any()), torch.ones(4, 0, dtype=dtype))


@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_std_corrections(correction: int) -> None:
    x = torch.randn(4, 9) * 3 + 1
    check_lowered(
        lambda x: (
            torch.var(x, -1, correction=correction),
            torch.std(x, 0, correction=correction, keepdim=True),
            torch.var(x, (0, 1), correction=correction),
        ),
        x,
    )


def test_var_mean_and_half() -> None:
    x = torch.randn(3, 40)
    check_lowered(lambda x: (torch.var_mean(x, -1)[0], torch.var_mean(x, -1)[1]), x)
    check_lowered(lambda x: x.std(-1), x.to(torch.float16))


@pytest.mark.parametrize("dim", [-1, 0, (0, 1)])
def test_logsumexp(dim) -> None:
    x = torch.randn(5, 8) * 4
    check_lowered(lambda x: torch.logsumexp(x, dim), x)


def test_logsumexp_infinite_rows() -> None:
    x = torch.randn(3, 6)
    x[1] = -math.inf
    x[2, 0] = math.inf
    check_lowered(lambda x: torch.logsumexp(x, -1, keepdim=True), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm(dtype: torch.dtype) -> None:
    x, w = torch.randn(3, 5, 24).to(dtype), torch.randn(24).to(dtype)
    check_lowered(lambda x, w: F.rms_norm(x, (24,), w, eps=1e-6), x, w)
    check_lowered(lambda x: F.rms_norm(x, (5, 24)), x)


def test_reductions_on_non_power_of_two_and_strided() -> None:
    x = torch.randn(6, 13)[:, 1::2]
    check_lowered(lambda x: (x.argmax(-1), x.prod(-1), torch.logsumexp(x, 0)), x)


def test_reductions_over_the_outer_dim_tile_rows() -> None:
    from triton_helpers import aten_stages

    x = torch.randn(37, 300)
    found = aten_stages(lambda x: x.sum(0), x)
    assert "looped, x-major" in found.scheduled, found.scheduled
    check_lowered(
        lambda x: (
            x.sum(0),
            torch.softmax(x, 0),
            x.argmax(0),
            x.var(0),
            (x.abs() + 0.5).prod(0),
            x.amin(0, keepdim=True),
        ),
        x,
    )
    check_lowered(lambda x: torch.log_softmax(x, 1), torch.randn(2, 9, 70))


@pytest.mark.parametrize("p", [1, 2, 3, 0.5, 0, math.inf, -math.inf])
def test_vector_norms(p: float) -> None:
    x = torch.randn(4, 9)
    x[1, 3] = 0.0
    check_lowered(lambda x: torch.linalg.vector_norm(x, p, -1), x)
    check_lowered(lambda x: torch.linalg.vector_norm(x, p), x)


def test_normalize_and_cosine_similarity() -> None:
    x, y = torch.randn(5, 8), torch.randn(5, 8)
    check_lowered(lambda x, y: (F.normalize(x, dim=-1), F.cosine_similarity(x, y)), x, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_group_norm(dtype: torch.dtype) -> None:
    x, w, b = torch.randn(2, 6, 5, 3), torch.randn(6), torch.randn(6)
    check_lowered(lambda x, w, b: F.group_norm(x, 3, w, b), x.to(dtype), w.to(dtype), b.to(dtype))
    check_lowered(lambda x: F.group_norm(x, 1) + F.group_norm(x, 6), x.to(dtype))


def test_batch_norm_training_and_instance_norm() -> None:
    x = torch.randn(4, 3, 5, 2)
    w, b = torch.randn(3), torch.randn(3)
    check_lowered(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)
    check_lowered(lambda x: F.instance_norm(x), x)


def test_batch_norm_training_updates_running_stats() -> None:
    import framejit

    bn = torch.nn.BatchNorm1d(5)
    ref = torch.nn.BatchNorm1d(5)
    x = torch.randn(8, 5) * 3 + 1
    with torch.no_grad():
        expected = ref(x)
        got = framejit.jit(bn, backend="triton")(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    assert int(bn.num_batches_tracked) == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_mean_and_variance_accumulate_in_float32(dtype: torch.dtype) -> None:
    # the sums were rounded to the half type: a mean of 20000s and a sum of squares of
    # +-200 overflowed float16 to inf where eager is finite
    big = torch.full((2, 8), 20000.0, dtype=dtype)
    spread = torch.tensor([200.0, -200.0] * 4, dtype=dtype)
    check_lowered(lambda x: (x.mean(1), x.mean()), big)
    check_lowered(
        lambda x: (torch.var(x), torch.std(x, 0), torch.var_mean(x)[0], torch.var_mean(x)[1]),
        spread,
    )
