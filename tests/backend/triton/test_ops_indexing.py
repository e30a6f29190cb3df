"""cat/stack, padding, flip, repeat, diagonal, split, slice_scatter, gather, index,
index_select and embedding: lowered as index arithmetic (no extern copy), against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import check_lowered

torch.manual_seed(0)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool]


def sample(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, dtype=dtype)
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_dtypes(dtype: torch.dtype) -> None:
    a, b, c = sample(3, 4, dtype=dtype), sample(3, 1, dtype=dtype), sample(3, 6, dtype=dtype)
    check_lowered(lambda a, b, c: torch.cat([a, b, c], 1), a, b, c)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_dims_and_stack(dim: int) -> None:
    a, b = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    check_lowered(lambda a, b: torch.cat([a, b * 2, a.exp()], dim), a, b)
    check_lowered(lambda a, b: torch.stack([a, b], dim) + 1, a, b)


def test_cat_odd_cases() -> None:
    x = torch.randn(4, 7)
    check_lowered(lambda x: torch.cat([x, x[:, :0], x.t().t()], 1), x)  # a zero-width piece
    check_lowered(lambda x, e: torch.cat([x, e], 0), x, torch.randn(0, 7))
    check_lowered(lambda x, y: torch.cat([x.t(), y], 0), x, torch.randn(3, 4))  # transposed
    check_lowered(lambda x, i: torch.cat([x, i], 1), x, torch.arange(8).view(4, 2))  # promotes
    check_lowered(lambda x: torch.cat([x[:, :3], x[:, 5:]], 1).sum(-1), x)  # into a reduction


def test_cat_of_zero_size_result() -> None:
    check_lowered(lambda a, b: torch.cat([a, b], 1) * 2, torch.randn(0, 3), torch.randn(0, 2))


@pytest.mark.parametrize("pad", [(1, 2), (0, 0, 2, 1), (-1, 2), (3, -2, 1, 0), (1, 1, 1, 1, 1, 1)])
def test_constant_pad(pad: tuple[int, ...]) -> None:
    x = torch.randn(2, 3, 5)
    check_lowered(lambda x: F.pad(x, pad, value=-1.5), x)


def test_pad_int_and_half() -> None:
    check_lowered(lambda x: F.pad(x, (2, 1), value=7), sample(3, 4, dtype=torch.int64))
    check_lowered(lambda x: F.pad(x * 2, (1, 1)), sample(3, 4, dtype=torch.float16))


def test_flip_repeat_diagonal_split() -> None:
    x = torch.randn(4, 6)
    check_lowered(lambda x: x.flip(0) + 1, x)
    check_lowered(lambda x: x.flip(0, 1).reshape(3, 8) * 2, x)  # flip, then a view of it
    check_lowered(lambda x: torch.flip(x.t(), [1]), x)
    check_lowered(lambda x: x.repeat(2, 3), torch.randn(3, 5))
    check_lowered(lambda x: x.repeat(2, 1, 2) - 1, torch.randn(3, 5))
    check_lowered(lambda x: torch.diagonal(x, 1) * 3, x)
    check_lowered(lambda x: torch.diagonal(x, -2) + torch.diagonal(x).sum(), x)
    check_lowered(lambda x: [p + 1 for p in torch.split(x, [2, 3, 1], 1)], x)


def test_slice_scatter() -> None:
    base, src = torch.randn(6, 5), torch.randn(2, 5)
    check_lowered(lambda b, s: torch.slice_scatter(b, s, 0, 1, 5, 2), base, src)
    check_lowered(lambda b, s: torch.slice_scatter(b, s.t(), 1, 3), base, torch.randn(2, 6))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim: int) -> None:
    x = torch.randn(5, 6)
    size = x.shape[dim]
    index = torch.randint(0, size, (3, 4))
    check_lowered(lambda x, i: torch.gather(x, dim, i) * 2, x, index)
    check_lowered(lambda x, i: torch.gather(x.t(), dim, i), torch.randn(6, 5), index)


def test_gather_half_and_int() -> None:
    index = torch.randint(0, 6, (5, 6))
    check_lowered(lambda x, i: torch.gather(x, 1, i), sample(5, 6, dtype=torch.float16), index)
    check_lowered(lambda x, i: torch.gather(x, 1, i), sample(5, 6, dtype=torch.int32), index)


INDEXING = {
    "rows": lambda x, i, j: x[i] + 1,
    "cols": lambda x, i, j: x[:, j] * 2,
    "pair": lambda x, i, j: x[i, j],
    "negative": lambda x, i, j: x[-i - 1],
    "two_d": lambda x, i, j: x[i.view(2, 3)],
    "apart": lambda x, i, j: x.view(4, 2, 3, 2)[i % 4, :, j % 3] * 1,
    "broadcast": lambda x, i, j: x[i.view(6, 1), j[:4].view(1, 4)],
    "int32": lambda x, i, j: x[i.to(torch.int32)],
    "sliced_source": lambda x, i, j: x[1:, ::2][i % 3],
}


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_index_tensor(name: str) -> None:
    x = torch.randn(8, 6)
    i, j = torch.randint(0, 8, (6,)), torch.randint(0, 6, (6,))
    check_lowered(INDEXING[name], x, i, j)


def test_index_select_and_embedding() -> None:
    x = torch.randn(7, 5)
    i = torch.tensor([6, 0, 3, 3])
    check_lowered(lambda x, i: torch.index_select(x, 0, i), x, i)
    check_lowered(lambda x, i: torch.index_select(x, 1, i % 5) + 1, x, i)
    check_lowered(lambda w, i: F.embedding(i, w), x, torch.randint(0, 7, (2, 3)))
    w = torch.randn(11, 4, dtype=torch.bfloat16)
    check_lowered(lambda w, i: F.embedding(i, w) * 2, w, torch.randint(0, 11, (5,)))
    check_lowered(lambda w, i: F.embedding(i, w), x, torch.zeros(0, dtype=torch.int64))


def test_embedding_module_with_positions() -> None:
    import framejit

    tokens, positions = torch.nn.Embedding(13, 8), torch.nn.Embedding(6, 8)

    def fn(ids):
        return tokens(ids) + positions(torch.arange(ids.shape[1]))

    ids = torch.randint(0, 13, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(framejit.jit(fn, backend="triton")(ids), fn(ids))
