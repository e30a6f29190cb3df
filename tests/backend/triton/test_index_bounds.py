"""Out-of-range indices read from memory (gather, `x[idx]`, index_select, embedding) raise a
clear error through the Triton backend, never a wrong answer: the kernel masks the bad lanes
and records them, the wrapper raises `IndexOutOfBounds` (an IndexError and a RuntimeError, so
an `except` for eager's type catches it). Indices proven in range get no check.

Under FRAMEJIT_TEST_DEVICE=cuda the kernels run on the GPU, but eager never sees a bad index
there: its CUDA kernels would end in a device-side assert, which leaves the process's CUDA
context unusable. Eager's error for a bad index comes from CPU copies of the inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from framejit.backend import lookup_backend
from framejit.backend.triton.bounds import IndexOutOfBounds
from triton_helpers import aten_stages, check, kernel_device, require_interpreter

import framejit

torch.manual_seed(0)


@pytest.fixture(autouse=True)
def sync_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests expect the call that reads a bad index to raise (the CPU default), whatever
    FRAMEJIT_INDEX_CHECKS says; the deferred tests set their own mode."""
    monkeypatch.setattr(framejit.config, "index_checks", "sync")


def on_device(t: torch.Tensor) -> torch.Tensor:
    """A tensor made at import (on the CPU), on the tests' device."""
    return t.to(kernel_device())


def compiled(fn: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """`fn` through the triton backend only (no frontend, whose eager rerun of a failing graph
    would hide which error the kernels raised)."""
    require_interpreter()
    gm = torch.fx.symbolic_trace(fn)
    run = lookup_backend("triton")(gm, list(args))
    return lambda *a: run(*a)[0]


def eager_error(fn: Callable[..., Any], *args: Any) -> type[BaseException]:
    """The type of eager's error for `fn(*args)`, run on CPU copies (see the module doc)."""
    try:
        fn(*(a.cpu() if isinstance(a, torch.Tensor) else a for a in args))
    except (IndexError, RuntimeError) as e:
        return type(e)
    raise AssertionError("eager did not raise")


def settle() -> None:
    """Let a deferred check's copy of the error buffer land (on a GPU it is asynchronous)."""
    if kernel_device() == "cuda":
        torch.cuda.synchronize()


_X = torch.randn(5, 6)

# name -> (fn, a good index, bad indices (too large, too negative) with the value each reports,
#          op, dim, size)
CASES = {
    "gather": (
        lambda x, i: torch.gather(x, 1, i) * 2,
        torch.tensor([[0, 5], [1, 2], [3, 3], [4, 0], [5, 1]]),
        [(torch.tensor([[0, 5], [1, 6], [3, 3], [4, 0], [5, 1]]), 6), (torch.full((5, 2), -1), -1)],
        "aten.gather",
        1,
        6,
    ),
    "index": (
        lambda x, i: x[i] + 1,
        torch.tensor([4, -1, -5, 0]),  # negative indices wrap
        [(torch.tensor([4, 5, 0, 0]), 5), (torch.tensor([0, -6, 1, 2]), -6)],
        "aten.index.Tensor",
        0,
        5,
    ),
    "index_cols": (
        lambda x, i: x[:, i],
        torch.tensor([5, -6, 2]),
        [(torch.tensor([0, 6, 1]), 6), (torch.tensor([-7, 0, 1]), -7)],
        "aten.index.Tensor",
        1,
        6,
    ),
    "index_select": (
        lambda x, i: torch.index_select(x, 1, i),
        torch.tensor([5, 0, 3]),
        [(torch.tensor([5, 0, 9]), 9), (torch.tensor([5, -1, 3]), -1)],
        "aten.index_select",
        1,
        6,
    ),
    "embedding": (
        lambda w, i: F.embedding(i, w),
        torch.tensor([[4, 0], [2, 3]]),
        [(torch.tensor([[4, 0], [5, 3]]), 5), (torch.tensor([[4, -1], [2, 3]]), -1)],
        "aten.embedding",
        0,
        5,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_raises(name: str) -> None:
    fn, good, bads, op, dim, size = CASES[name]
    x, good = on_device(_X), on_device(good)
    run = compiled(fn, x, good)
    torch.testing.assert_close(run(x, good), fn(x, good))
    for bad, value in bads:
        bad = on_device(bad)
        expected = eager_error(fn, x, bad)
        message = f"index {value} is out of bounds for dimension {dim} with size {size} ({op}"
        with pytest.raises(expected) as info:
            run(x, bad)
        assert isinstance(info.value, IndexOutOfBounds)
        assert str(info.value).startswith(message), str(info.value)
    # the error buffer is per call: a good call after a bad one is right again
    torch.testing.assert_close(run(x, good), fn(x, good))


def test_multi_dim_advanced_indexing() -> None:
    def fn(x, i, j):
        return x.view(5, 2, 3)[i, :, j.view(1, 3)] * 3

    x = on_device(_X)
    i, j = torch.tensor([[4], [-5]]), torch.tensor([2, -3, 0])
    run = compiled(fn, x, i, j)
    torch.testing.assert_close(run(x, i, j), fn(x, i, j))
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dimension 2 with size 3"):
        run(x, i, torch.tensor([2, 3, 0]))
    with pytest.raises(IndexError, match=r"index -6 is out of bounds for dimension 0 with size 5"):
        run(x, torch.tensor([[4], [-6]]), j)


def test_indirect_load_in_the_middle_of_fused_graphs() -> None:
    def gathered_softmax(x, i):
        return torch.softmax(torch.gather(x.exp(), 1, i) + 1, dim=-1)

    def embed_norm(w, ids, g):
        e = F.embedding(ids, w * 2) + 1
        return F.layer_norm(e, (6,), g) * e.sum(-1, keepdim=True)

    x = on_device(_X)
    i = torch.randint(0, 6, (5, 4))
    run = compiled(gathered_softmax, x, i)
    torch.testing.assert_close(run(x, i), gathered_softmax(x, i))
    with pytest.raises(RuntimeError, match="aten.gather"):
        run(x, torch.where(i == i[2, 1], 6, i))

    ids, g = torch.tensor([[0, 4, 2]]), torch.randn(6)
    run = compiled(embed_norm, x, ids, g)
    torch.testing.assert_close(run(x, ids, g), embed_norm(x, ids, g))
    with pytest.raises(IndexError, match="index 7 .* with size 5 .aten.embedding"):
        run(x, torch.tensor([[0, 7, 2]]), g)


def test_through_jit_raises_as_eager() -> None:
    fn = framejit.jit(lambda x, i: x[i].relu() + x[-1], backend="triton", fullgraph=True)
    x, good = on_device(_X), torch.tensor([0, -5, 4])
    check(lambda x, i: x[i].relu() + x[-1], x, good)
    with torch.no_grad(), pytest.raises(IndexError, match="out of bounds"):
        fn(x, torch.tensor([0, 5, 4]))


def test_proven_indices_have_no_check() -> None:
    def fn(w, y):
        positions = F.embedding(torch.arange(5), w)
        best = w[y.argmax(1)]  # argmax over 5 elements indexes 5 rows
        return positions + best + w[torch.clamp(y.argmin(0), max=4)]

    w, y = torch.randn(5, 6), torch.randn(5, 5)
    found = aten_stages(fn, w, y)
    assert "in_bounds" not in found.lowered and "err_ptr" not in found.source
    check(fn, w, y, frontend=False)

    unproven = aten_stages(lambda w, i: w[i], w, torch.tensor([1]))
    assert "in_bounds" in unproven.lowered and "INDEX_CHECKS.end(errors" in unproven.source


def test_deferred_checks_raise_at_a_later_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """config.index_checks="deferred" (CUDA's default, forced here on the CPU): the call that
    reads a bad index returns, the next call of the graph (or check_index_errors) raises, once;
    the calls after that run normally."""
    monkeypatch.setattr(framejit.config, "index_checks", "deferred")
    w = torch.randn(5, 3)
    run = compiled(lambda w, i: F.embedding(i, w) * 2, w, torch.tensor([1, 2]))
    good, bad = torch.tensor([4, 0]), torch.tensor([1, 7])
    torch.testing.assert_close(run(w, good), F.embedding(good, w) * 2)
    out = run(w, bad)  # no error yet: the bad lane read nothing
    assert out.shape == (2, 3) and torch.equal(out[0], w[1] * 2)
    settle()
    with pytest.raises(IndexOutOfBounds, match="index 7 is out of bounds for dimension 0"):
        run(w, good)
    torch.testing.assert_close(run(w, good), F.embedding(good, w) * 2)  # raised once
    run(w, bad)
    with pytest.raises(IndexOutOfBounds, match="index 7"):
        framejit.check_index_errors()
    framejit.check_index_errors()  # nothing pending any more
    torch.testing.assert_close(run(w, good), F.embedding(good, w) * 2)


def test_deferred_checks_whatever_the_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host copy of the error buffer is made on the CPU even when the program set another
    default device (`torch.set_default_device("cuda")` made it on the GPU, where pinning
    failed: every checked graph fell back to aten, and a second graph loading the same module
    failed a bare assert)."""
    monkeypatch.setattr(framejit.config, "index_checks", "deferred")
    w = torch.randn(5, 3)
    run = compiled(lambda w, i: F.embedding(i, w) * 2, w, torch.tensor([1, 2]))
    good, bad = torch.tensor([4, 0]), torch.tensor([1, 7])
    torch.set_default_device("meta")
    try:
        got = run(w, good)
        run(w, bad)
        settle()
        with pytest.raises(IndexOutOfBounds, match="index 7 is out of bounds"):
            run(w, good)
    finally:
        torch.set_default_device(kernel_device() if kernel_device() == "cuda" else None)
    torch.testing.assert_close(got, F.embedding(good, w) * 2)


def test_sync_checks_raise_in_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framejit.config, "index_checks", "sync")
    w = torch.randn(5, 3)
    run = compiled(lambda w, i: F.embedding(i, w) * 2, w, torch.tensor([1, 2]))
    with pytest.raises(IndexOutOfBounds, match="index -1"):
        run(w, torch.tensor([-1, 0]))
    framejit.check_index_errors()  # nothing deferred


def test_deferred_error_is_not_hidden_by_the_eager_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the frontend, a graph that raises reruns the frame eagerly; an error about an
    earlier call must reach the user instead."""
    require_interpreter()
    monkeypatch.setattr(framejit.config, "index_checks", "deferred")
    w = torch.randn(5, 3)

    def fn(w: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return F.embedding(i, w) + 1

    jitted = framejit.jit(fn, backend="triton")
    torch.testing.assert_close(jitted(w, torch.tensor([0, 1])), fn(w, torch.tensor([0, 1])))
    jitted(w, torch.tensor([9, 1]))
    settle()
    with pytest.raises(IndexOutOfBounds, match="index 9 .*earlier call"):
        jitted(w, torch.tensor([0, 1]))


# index arithmetic that wraps in its dtype: exact-integer bounds would put every value in
# [0, 200) and drop the check, but the wrapped values are not. name -> (index of i = argmax,
# i = 0, 1, 2 -> the values; the i whose index stays in range)
WRAPPING_INDICES = {
    "int8_add": (lambda i: (i.to(torch.int8) + 126).long(), [0, 1]),  # 126, 127, -128
    "int8_sub": (lambda i: (i.to(torch.int8) - (-127)).long(), [0]),  # 127, -128, -127
    "int8_mul": (lambda i: (i.to(torch.int8) * 64).long(), [0, 1]),  # 0, 64, -128
    "int8_neg": (lambda i: (-(i.to(torch.int8) - 127 - 1)).long(), [1, 2]),  # -128, 127, 126
    "int32_add": (lambda i: (i.to(torch.int32) + (2**31 - 2)).long() - (2**31 - 150), [0, 1]),
    "int64_compare": (lambda i: torch.where(i + (2**63 - 2) > 0, i, i + 300), [0, 1]),
}


@pytest.mark.parametrize("name", sorted(WRAPPING_INDICES))
def test_wrapping_index_arithmetic_is_checked(name: str) -> None:
    index, fine = WRAPPING_INDICES[name]

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 0, index(y.argmax(1)))

    x = torch.arange(1000.0)[500:700]  # memory before the tensor holds 0..499
    expected = eager_error(fn, x, torch.eye(3))
    run = compiled(fn, x, torch.eye(3))
    with pytest.raises(expected, match="out of bounds for dimension 0 with size 200"):
        run(x, torch.eye(3))
    good = torch.eye(3)[[fine[k % len(fine)] for k in range(3)]]  # same shape, all in range
    torch.testing.assert_close(run(x, good), fn(x, good))


def test_index_select_of_wrapped_int8_index_raises() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x, 0, (y.argmax(1).to(torch.int8) + 126).long())

    x = torch.arange(1000.0)[500:700]
    with pytest.raises(IndexOutOfBounds, match="index -128 is out of bounds"):
        compiled(fn, x, torch.eye(3))(x, torch.eye(3))
