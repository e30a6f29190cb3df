"""Control flow decided by facts known while tracing: constants, flags, shapes, dtypes, types.

Branches on tensor *values* (`if x.sum() > 0`) are graph breaks and belong elsewhere.
"""

import pytest
import torch
from harness import Corpus, call, ints, rand

corpus = Corpus()

DEBUG = False


@corpus.program(lambda: (rand(4),))
def if_on_constant(x):
    if True:
        x = x + 1
    if 0:
        x = x * 100
    return x


@corpus.program(lambda: (rand(4),))
def if_on_module_level_flag(x):
    if DEBUG:
        return x * 0
    return x.relu()


@corpus.program(lambda: (rand(4), True))
def if_on_bool_argument_true(x, use_relu):
    if use_relu:
        return torch.relu(x)
    return torch.tanh(x)


@corpus.program(lambda: (rand(4), False))
def if_on_bool_argument_false(x, use_relu):
    if use_relu:
        return torch.relu(x)
    return torch.tanh(x)


@corpus.program(lambda: call(rand(4), mode="gelu"))
def if_on_string_argument(x, mode="relu"):
    if mode == "relu":
        return torch.relu(x)
    elif mode == "gelu":
        return torch.nn.functional.gelu(x)
    else:
        return x


@corpus.program(lambda: (rand(5, 3),))
def if_on_shape(x):
    if x.shape[0] > 2:
        x = x[:2]
    return x * 2


@corpus.program(lambda: (rand(2, 3, 4),))
def if_on_ndim(x):
    if x.ndim == 3:
        x = x.flatten(0, 1)
    elif x.ndim == 1:
        x = x.unsqueeze(0)
    return x.sum(-1)


@corpus.program(lambda: (rand(4, dtype=torch.float64),))
def if_on_dtype(x):
    if x.dtype == torch.float32:
        return x * 2
    elif x.dtype in (torch.float16, torch.bfloat16):
        return x.float()
    return x.float() * 3


@corpus.program(lambda: (ints(5, 4),))
def if_on_is_floating_point(x):
    if not x.is_floating_point():
        x = x.float()
    return x / 2


@corpus.program(lambda: (rand(4),))
def if_on_device_type(x):
    if x.device.type == "cpu":
        return x + 1
    return x - 1


@corpus.program(lambda: (rand(4), 3.0))
def isinstance_checks(x, scale):
    if isinstance(x, torch.Tensor) and isinstance(scale, (int, float)):
        return x * scale
    return x


@corpus.program(lambda: (rand(4), None))
def optional_argument_none(x, bias):
    if bias is not None:
        x = x + bias
    return x * 2


@corpus.program(lambda: (rand(4), rand(4)))
def optional_argument_given(x, bias):
    if bias is not None:
        x = x + bias
    return x * 2


@corpus.program(lambda: call(rand(4, 3)))
def optional_keyword_default(x, mask=None, scale=None):
    if mask is None:
        mask = torch.ones_like(x)
    scale = scale or x.shape[-1] ** -0.5
    return x * mask * scale


@corpus.program(lambda: (rand(4), rand(4)))
def ternary_expression(x, y):
    z = x if x.shape == y.shape else y.expand_as(x)
    return z + (1 if x.ndim > 1 else 2)


@corpus.program(lambda: (rand(4), 0))
def boolean_operators_on_python_values(x, n):
    flag = n > 0 or x.shape[0] == 4
    other = not (n == 0 and x.ndim == 2)
    return x + flag + other


@corpus.program(lambda: (rand(3, 4),))
def for_range_unrolled(x):
    for _ in range(3):
        x = torch.sin(x) + x
    return x


@corpus.program(lambda: (rand(3, 4),))
def for_range_with_index_use(x):
    acc = x
    for i in range(1, 4):
        acc = acc + x * i
    return acc


@corpus.program(lambda: ([rand(3), rand(3), rand(3)],))
def for_enumerate(xs):
    out = torch.zeros(3)
    for i, x in enumerate(xs):
        out = out + x * (i + 1)
    return out


@corpus.program(lambda: ([rand(3), rand(3)], [rand(3), rand(3)]))
def for_zip(xs, ys):
    out = []
    for x, y in zip(xs, ys):
        out.append(x @ y)
    return out


@corpus.program(lambda: (rand(3, 4),))
def for_over_shape(x):
    total = 1
    for dim in x.shape:
        total *= dim
    return x.reshape(total)


@corpus.program(lambda: (rand(6, 4),))
def for_with_break_and_continue(x):
    out = x
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 5:
            break
        out = out + i
    return out


@corpus.program(lambda: (rand(3),))
def while_loop_on_python_counter(x):
    i = 0
    while i < 3:
        x = x * 2
        i += 1
    return x


@corpus.program(lambda: (rand(2, 8),))
def nested_loops(x):
    pieces = []
    for i in range(2):
        for j in range(2):
            pieces.append(x[i, j * 4 : (j + 1) * 4] + i + j)
    return torch.stack(pieces)


@corpus.program(lambda: (rand(4),))
def early_return_on_flag(x, fast=True):
    if fast:
        return x + 1
    y = x.exp()
    return y / y.sum()


@corpus.program(lambda: (rand(4, 4),))
def assert_on_shape(x):
    assert x.shape[0] == x.shape[1], "square input expected"
    return x @ x


@corpus.program(lambda: ([rand(3), rand(3), rand(3)],))
def any_all_builtins_on_python_bools(xs):
    if all([x.shape == xs[0].shape for x in xs]):  # noqa: C419 (no generators yet)
        return torch.stack(xs)
    return torch.cat(xs)


@corpus.program(lambda: (rand(4, 3),))
def match_on_ndim(x):
    match x.ndim:
        case 1:
            return x * 2
        case 2:
            return x.sum(0)
        case _:
            return x


@pytest.mark.parametrize("case", corpus.params())
def test_control(case):
    case.run()
