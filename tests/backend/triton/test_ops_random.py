"""Dropout with Triton's Philox stream. The numbers differ from eager's (another generator), so
these tests check statistics and structure: the kept fraction, the scaling, zeros where dropped,
the mask agreeing with the output, a new stream on each call, and the same numbers again after
`torch.manual_seed`. rand/randn/bernoulli stay externs and give eager's numbers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from framejit.backend.triton import cache
from triton_helpers import aten_stages, require_interpreter

import framejit


def _compiled(fn):
    require_interpreter()
    return framejit.jit(fn, backend="triton", fullgraph=True)


def test_dropout_is_lowered_to_one_kernel() -> None:
    found = aten_stages(lambda x: F.dropout(x, 0.3, training=True), torch.randn(8, 8))
    assert "extern(" not in found.lowered
    assert "tl.rand(seed0, " in found.source
    assert found.source.count("def fj_") == 1


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_statistics(p: float) -> None:
    x = torch.randn(64, 129).abs() + 0.5  # never zero, so a zero means dropped
    with torch.no_grad():
        out = _compiled(lambda x: F.dropout(x, p, training=True))(x)
    assert out.shape == x.shape and out.dtype == x.dtype
    kept = out != 0
    fraction = kept.float().mean().item()
    n = x.numel()
    assert abs(fraction - (1 - p)) < 4 * (p * (1 - p) / n) ** 0.5 + 1e-3, fraction
    torch.testing.assert_close(out[kept], x[kept] / (1 - p))
    assert torch.all(out[~kept] == 0)


def test_dropout_mask_matches_output_and_training() -> None:
    def fn(x):
        out, mask = torch.native_dropout(x, 0.4, True)
        return out, mask, out * 2

    x = torch.randn(33, 17).abs() + 0.1
    with torch.no_grad():
        out, mask, twice = _compiled(fn)(x)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, out != 0)
    torch.testing.assert_close(twice, out * 2)


def test_dropout_gradient_uses_the_same_mask() -> None:
    require_interpreter()
    x = (torch.randn(6, 10).abs() + 0.1).requires_grad_()
    out = framejit.jit(lambda x: F.dropout(x, 0.5, training=True).sum(), backend="triton")(x)
    out.backward()
    grad = x.grad
    assert set(grad.unique().tolist()) <= {0.0, 2.0}


def test_dropout_new_stream_each_call_and_repeatable_with_seed() -> None:
    fn = _compiled(lambda x: F.dropout(x, 0.5, training=True))
    x = torch.ones(32, 32)
    with torch.no_grad():
        torch.manual_seed(123)
        first, second = fn(x), fn(x)
        torch.manual_seed(123)
        again = fn(x)
    assert not torch.equal(first, second)
    assert torch.equal(first, again)


def test_dropout_eval_and_p0_are_copies() -> None:
    x = torch.randn(5, 7)
    with torch.no_grad():
        torch.testing.assert_close(_compiled(lambda x: F.dropout(x, 0.5, training=False))(x), x)
        torch.testing.assert_close(_compiled(lambda x: F.dropout(x, 0.0, training=True))(x), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dropout_half(dtype: torch.dtype) -> None:
    x = (torch.randn(40, 40).abs() + 0.5).to(dtype)
    with torch.no_grad():
        out = _compiled(lambda x: F.dropout(x, 0.25, training=True))(x)
    assert out.dtype == dtype
    kept = out != 0
    assert 0.68 < kept.float().mean().item() < 0.82
    torch.testing.assert_close(out[kept], (x[kept].float() / 0.75).to(dtype))


def test_rand_randn_bernoulli_give_eagers_numbers() -> None:
    """These stay externs (torch's generator): a seeded program gets eager's numbers."""

    def fn(x):
        return torch.rand(x.shape) + x, torch.randn(x.shape), torch.bernoulli(x)

    probs = torch.full((8, 8), 0.3)
    found = aten_stages(fn, probs)
    assert "extern(aten.rand." in found.lowered and "extern(aten.bernoulli." in found.lowered
    with torch.no_grad():
        torch.manual_seed(7)
        expected = fn(probs)
        torch.manual_seed(7)
        got = _compiled(fn)(probs)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_rand_before_dropout_gives_eagers_numbers() -> None:
    """The dropout's seed is drawn from torch's generator where the dropout is in the program,
    not before the graph's first random extern: a rand before it gets eager's numbers."""

    def fn(x):
        a = torch.rand(3)
        b = torch.randn(2, 2) @ x[:2, :2]  # a random extern, then an extern matmul
        return a, b, F.dropout(x, 0.5, training=True)

    x = torch.ones(4, 4)
    jitted = _compiled(fn)
    with torch.no_grad():
        torch.manual_seed(3)
        expected = fn(x)
        for _ in range(2):
            torch.manual_seed(3)
            got = jitted(x)
            torch.testing.assert_close(got[0], expected[0])
            torch.testing.assert_close(got[1], expected[1])
            assert set(got[2].unique().tolist()) <= {0.0, 2.0}


def test_seeds_are_drawn_in_program_order_between_random_externs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dropout, rand, dropout: each dropout's seed is drawn next to it in program order, so the
    rand between them always sees the generator after exactly one seed draw (repeatable), and a
    rand before both gets eager's numbers."""

    def fn(x):
        first = torch.rand(2)
        d1 = F.dropout(x, 0.5, training=True)
        middle = torch.rand(2)
        d2 = F.dropout(x * 3, 0.5, training=True)
        return first, d1, middle, d2

    sources: list[str] = []
    real_load = cache.load

    def load(source: str, *args: Any, **kwargs: Any) -> Any:
        sources.append(source)
        return real_load(source, *args, **kwargs)

    monkeypatch.setattr(cache, "load", load)
    x = torch.ones(8, 8)
    jitted = _compiled(fn)
    with torch.no_grad():
        torch.manual_seed(5)
        expected = fn(x)
        torch.manual_seed(5)
        got = jitted(x)
    (source,) = sources
    call = source[source.index("def call(") :]
    draws = [line.strip() for line in call.splitlines() if "torch.randint(" in line]
    assert len(draws) == 2, call  # one draw per dropout, on either side of the middle rand
    assert call.index("aten.rand.") < call.index(draws[0]) < call.rindex("aten.rand.")
    assert call.rindex("aten.rand.") < call.index(draws[1]), call
    with torch.no_grad():
        torch.manual_seed(5)
        again = jitted(x)
    torch.testing.assert_close(got[0], expected[0])
    for g, a in zip(got, again):
        assert torch.equal(g, a)


def test_dropout_kernels_are_not_recorded_as_cuda_graphs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The kernels' seeds are drawn on the host at each call: a recorded graph would replay
    the recorded call's seeds (the same mask every step), so such a graph is not recorded."""
    require_interpreter()
    from framejit import cudagraphs

    framejit.set_logs(cudagraphs=True)

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, 0.5, training=True) * 2

    x = torch.ones(32, 32)
    with cudagraphs.stand_in():
        fast = framejit.jit(f, backend="triton", mode="reduce-overhead")
        outs = [fast(x).clone() for _ in range(4)]  # warm-up, record, replay, replay
    for a, b in zip(outs, outs[1:]):
        assert not torch.equal(a, b)
        assert set(b.unique().tolist()) <= {0.0, 4.0}
    assert "random seeds drawn on the host" in capsys.readouterr().err
