"""Numbers and process state around compiled functions: a compiled function gives what eager
gives, bit for bit (signed zeros, NaNs, integer results, dtypes), and never replays a graph made
under other state (autocast, grad mode, the default dtype and device, the random generators).

Every test compares against eager PyTorch on real tensors, over several calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import framejit

BACKENDS = ["eager", "aot_eager"]


@pytest.fixture(autouse=True)
def restore_default_device() -> Iterator[None]:
    try:
        yield
    finally:
        torch.set_default_device(None)


def _same(want: Any, got: Any) -> None:
    """Equal values, dtypes and signs of zero (NaN equal to NaN)."""
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for w, g in zip(want, got, strict=True):
            _same(w, g)
        return
    if not isinstance(want, torch.Tensor):
        assert type(got) is type(want) and got == want
        return
    assert (got.dtype, got.shape, got.device, got.requires_grad) == (
        want.dtype,
        want.shape,
        want.device,
        want.requires_grad,
    )
    if want.device.type == "meta":
        return
    assert torch.equal(got.isnan(), want.isnan()), (want, got)
    ok = ~want.isnan()
    assert torch.equal(got[ok], want[ok]), (want, got)
    if want.is_floating_point():
        assert torch.equal(got.signbit(), want.signbit()), (want, got)


# --- 1. constants in the graph -----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_zero_raised_to_a_tensor(backend: str) -> None:
    """`-0.0 ** t` is `-(0.0 ** t)` to Python: the graph's code must keep the constant whole
    ((-0.0) ** -1 is inf, (-0.0) ** 0 is 1)."""

    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return s**x

    for x in [
        torch.tensor([-2.5, -1.0, -0.0, 0.0, 1.5, 3.0, float("nan")]),
        torch.tensor([-7, -2, 0, 3, 4]),
        torch.tensor([True, False]),
    ]:
        jf = framejit.jit(f, backend=backend)
        for s in [-0.0, 0.0, -2.0, -2]:
            _same(f(x, s), jf(x, s))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_from_data_on_the_meta_device(backend: str) -> None:
    """`torch.tensor(data)` on the meta device (as an argument or the default device) is a new
    tensor on each call, as in eager."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.tensor([1.0]), torch.tensor([[1, 2]], device="meta").t(), x + 1

    jf = framejit.jit(f, backend=backend)
    x = torch.ones(2)
    _same(f(x), jf(x))
    torch.set_default_device("meta")
    first = jf(x)
    _same(f(x), first)
    second = jf(x)
    _same(f(x), second)
    assert first[0] is not second[0] and first[1] is not second[1]


# --- 2. a compiled function called inside torch.func transforms ---------------------------------


def _sin_rows(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2).sum(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_function_inside_torch_func_transforms(backend: str) -> None:
    """vmap, grad, jvp and jacrev of a compiled function give eager's values: the graph's ops
    run through the transform (its inputs are batched or grad-tracking tensors)."""
    jf = framejit.jit(_sin_rows, backend=backend)
    x = torch.randn(3, 3)
    _same(_sin_rows(x[0]), jf(x[0]))  # an entry made outside the transforms first
    _same(torch.func.vmap(_sin_rows)(x), torch.func.vmap(jf)(x))
    _same(torch.func.grad(_sin_rows)(x[0]), torch.func.grad(jf)(x[0]))
    tangent = (torch.ones_like(x),)
    _same(list(torch.func.jvp(_sin_rows, (x,), tangent)), list(torch.func.jvp(jf, (x,), tangent)))
    torch.testing.assert_close(torch.func.jacrev(jf)(x), torch.func.jacrev(_sin_rows)(x))
    _same(_sin_rows(x[1]), jf(x[1]))  # and the plain entry still serves plain tensors


# --- 3. version counters of inputs written in place ---------------------------------------------


def _writes(x: torch.Tensor) -> tuple[int, ...]:
    x.add_(1).mul_(2)
    x[0] = 5
    x += 1
    return (x._version,)


def _data_write(x: torch.Tensor) -> tuple[int, ...]:
    x.data.mul_(0.5)
    return (x._version,)


def _detach_write(x: torch.Tensor) -> tuple[int, ...]:
    x.detach().mul_(0.5)
    x.data.add_(1)
    return (x._version,)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_writes, _data_write, _detach_write])
def test_version_counter_after_writes_to_an_input(backend: str, fn: Any) -> None:
    """An input's version moves once per in-place write, as in eager, and not for a write
    through `x.data` (whose counter is its own)."""
    jf = framejit.jit(fn, backend=backend)
    for _ in range(2):
        want, got = torch.arange(4.0), torch.arange(4.0)
        assert jf(got) == fn(want) and torch.equal(got, want)
        assert got._version == want._version


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_through_data_keeps_a_pending_backward(backend: str) -> None:
    """`w.data.mul_(0.5)` between a forward that saved `w` and its backward: eager's backward
    runs (with the new values), so the compiled write must not move `w`'s version."""

    def shrink(w: torch.Tensor) -> None:
        w.data.mul_(0.5)

    jf = framejit.jit(shrink, backend=backend)
    for step in (shrink, jf, jf):
        x = torch.ones(3, requires_grad=True)
        w = torch.full((3,), 2.0, requires_grad=True)
        loss = (x * w).sum()
        step(w)
        loss.backward()
        assert x.grad is not None and x.grad.tolist() == [1.0, 1.0, 1.0]
        assert w._version == 0
