"""Indexing and slicing: ints, slices, steps, negatives, None, Ellipsis, index tensors.

Boolean-mask indexing that selects a data-dependent number of elements is left out on
purpose: its output shape depends on the data.
"""

import pytest
import torch
from harness import Corpus, bools, ints, rand

corpus = Corpus()


@corpus.program(lambda: (rand(4, 5),))
def int_index(x):
    return x[0], x[-1], x[1, 2], x[0][3]


@corpus.program(lambda: (rand(6, 5),))
def basic_slices(x):
    return x[1:3], x[:, 2:], x[:-1, :-2], x[2:]


@corpus.program(lambda: (rand(8, 6),))
def slices_with_step(x):
    return x[::2], x[1::3, ::2], x[1:7:2, -1]


@corpus.program(lambda: (rand(4, 5),))
def none_adds_dimensions(x):
    return x[None], x[:, None, :], x[..., None].shape, x[None, :, None]


@corpus.program(lambda: (rand(2, 3, 4, 5),))
def ellipsis(x):
    return x[..., 0], x[0, ...], x[..., 1:3], x[:, ..., -1]


@corpus.program(lambda: (rand(4, 6),))
def slice_bounds_from_shape(x):
    half = x.shape[1] // 2
    return x[:, :half] * x[:, half:]


@corpus.program(lambda: (rand(4, 6), 1, 4))
def slice_bounds_from_arguments(x, start, stop):
    return x[start:stop], x[:, start:stop:2]


@corpus.program(lambda: (rand(6, 3), ints(6, 4)))
def index_with_long_tensor(x, idx):
    return x[idx], x[idx, 1:], x[:, torch.tensor([0, 2])]


@corpus.program(lambda: (rand(5, 5), ints(5, 3), ints(5, 3)))
def advanced_index_two_tensors(x, rows, cols):
    return x[rows, cols], x[rows[:, None], cols[None, :]]


@corpus.program(lambda: (rand(10, 4), ints(10, 2, 3)))
def embedding_style_lookup(table, tokens):
    return table[tokens].sum(1)


@corpus.program(lambda: (rand(5, 3), torch.tensor([True, False, True, True, False])))
def static_bool_mask_in_where(x, keep):
    return torch.where(keep[:, None], x, torch.zeros_like(x))


@corpus.program(lambda: (rand(4, 4), bools(4, 4)))
def mask_multiply_static_shape(x, mask):
    return x * mask, (x * mask.float()).sum(-1)


@corpus.program(lambda: (rand(4, 5),))
def index_select_and_narrow(x):
    return torch.index_select(x, 1, torch.tensor([4, 0])), x.narrow(0, 1, 2), x.select(1, -1)


@corpus.program(lambda: (rand(4, 5), rand(5)))
def setitem_row_on_clone(x, row):
    y = x.clone()
    y[1] = row
    y[-1, :] = 0
    return y


@corpus.program(lambda: (rand(4, 5),))
def setitem_slice_with_step_on_input(x):
    x[::2] = 1.0
    return x


@corpus.program(lambda: (rand(6, 3), torch.tensor([4, 1]), rand(2, 3)))
def setitem_with_index_tensor(x, idx, values):
    out = x.clone()
    out[idx] = values
    return out


@corpus.program(lambda: (rand(4, 6),))
def setitem_ellipsis_and_none(x):
    out = torch.zeros(4, 6)
    out[..., :3] = x[..., 3:]
    out[:, None, 3:] += 1
    return out


@corpus.program(lambda: (rand(5, 4), ints(5, 3), rand(3, 4)))
def index_put_and_index_add(x, idx, src):
    return x.index_add(0, idx, src), x.index_put((idx,), src, accumulate=True)


@corpus.program(lambda: (rand(3, 4),))
def inplace_through_view_of_input(x):
    row = x[1]
    row.mul_(10)
    return x


@corpus.program(lambda: (rand(3, 4),))
def chained_index_and_method(x):
    return x[1:].T[0].unsqueeze(0), x[:, -1].softmax(0)


@corpus.program(lambda: (rand(2, 3, 4),))
def index_with_tuple_variable(x):
    key = (slice(None), 0, slice(1, 3))
    return x[key]


@corpus.program(lambda: (rand(8, 16),))
def split_heads_by_slicing(x):
    heads = []
    for h in range(4):
        heads.append(x[:, h * 4 : (h + 1) * 4])
    return torch.stack(heads, dim=0)


@corpus.program(lambda: (rand(3, 7),))
def last_token_index(x):
    return x[:, -1:], x[:, x.shape[1] - 1]


@corpus.program(lambda: (rand(6, 3), ints(6, 6)))
def index_tensor_arithmetic(x, idx):
    shifted = (idx + 1) % x.shape[0]
    return x[shifted], x[idx.flip(0)]


@corpus.program(lambda: (rand(4, 4),))
def masked_fill_causal_with_triu(x):
    mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    return x.masked_fill(mask, float("-inf")).softmax(-1)


@pytest.mark.parametrize("case", corpus.params())
def test_indexing(case):
    case.run()
