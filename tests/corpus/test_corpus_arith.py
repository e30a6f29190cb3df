"""Arithmetic, comparisons and in-place updates on tensors and Python numbers."""

import math
import operator

import pytest
import torch
from harness import Corpus, call, ints, rand

corpus = Corpus()


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def add_tensors(x, y):
    return x + y


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def sub_mul_div(x, y):
    return (x - y) * y / (x.abs() + 1)


@corpus.program(lambda: (rand(8),))
def tensor_and_int_scalar(x):
    return x * 2 + 1


@corpus.program(lambda: (rand(8),))
def scalar_on_the_left(x):
    return 1.5 - x, 2 / (x.abs() + 1), 3 * x


@corpus.program(lambda: (rand(8),))
def power_and_negation(x):
    return -(x**2) + x.abs() ** 0.5


@corpus.program(lambda: (rand(8), 3))
def python_int_argument(x, n):
    return x * n + n


@corpus.program(lambda: (rand(8), 0.25))
def python_float_argument(x, alpha):
    return x * (1 - alpha) + alpha


@corpus.program(lambda: (rand(4, 64),))
def constant_folded_scale(x):
    scale = 1.0 / math.sqrt(64)
    return x * scale


@corpus.program(lambda: (rand(4, 64),))
def scale_from_shape(x):
    d = x.shape[-1]
    return x / math.sqrt(d)


@corpus.program(lambda: (rand(4, 4),))
def python_arithmetic_on_constants(x):
    eps = 1e-5
    hidden = 4 * 3 + 2
    ratio = hidden // 4 + hidden % 4
    return x * ratio + eps * hidden


@corpus.program(lambda: (ints(10, 6), ints(10, 6)))
def integer_tensor_ops(a, b):
    return a + b, a * b, a // (b + 1), a % (b + 1)


@corpus.program(lambda: (rand(6), rand(6)))
def true_and_floor_division(x, y):
    return x / 3, x // 0.5, torch.floor_divide(x, y.abs() + 1)


@corpus.program(lambda: (rand(5), rand(5)))
def comparisons(x, y):
    return x > y, x <= 0.5, x == x, x != y  # noqa: PLR0124


@corpus.program(lambda: (rand(5), rand(5)))
def comparison_used_as_mask(x, y):
    return torch.where(x > y, x, y) + (x > 0).float()


@corpus.program(
    lambda: (torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False]))
)
def boolean_logic(a, b):
    return a & b, a | b, a ^ b, ~a


@corpus.program(lambda: (ints(16, 5), ints(16, 5)))
def bitwise_int(a, b):
    return a & b, a | b, a << 1, a >> 1


@corpus.program(lambda: (rand(3, 4),))
def inplace_add_on_input(x):
    x += 1
    return x


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def inplace_add_method_on_input(x, y):
    x.add_(y)
    return x


@corpus.program(lambda: (rand(3, 4),))
def inplace_mul_on_input_returns_nothing(x):
    x.mul_(2)


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def inplace_on_intermediate(x, y):
    z = x * y
    z += 1
    z.mul_(2)
    z.sub_(x)
    return z


@corpus.program(lambda: (rand(3, 4), rand(4)))
def inplace_with_broadcast(x, bias):
    out = x.clone()
    out.add_(bias, alpha=0.5)
    return out


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def augmented_assignment_chain(x, y):
    acc = torch.zeros_like(x)
    acc += x
    acc -= y
    acc *= 3
    acc /= 2
    return acc


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def rebinding_augmented_assignment_on_number(x, y):
    total = 0
    total += x.shape[0]
    total *= 2
    return x * total + y


@corpus.program(lambda: (rand(3, 4),))
def inplace_clamp_and_relu(x):
    y = x * 3
    y.clamp_(-1, 1)
    y.relu_()
    return y


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def mutate_input_and_return_other(x, y):
    x.copy_(y * 2)
    return y + 1


@corpus.program(lambda: (rand(3, 4),))
def mutate_slice_of_input(x):
    x[0] = 0.0
    x[:, 1] += 5
    return x.sum()


@corpus.program(lambda: (rand(4, 4),))
def elementwise_math(x):
    return torch.exp(x) + torch.log(x.abs() + 1) + torch.sin(x) * torch.cos(x) + torch.sqrt(x.abs())


@corpus.program(lambda: (rand(4, 4),))
def rsqrt_reciprocal_sign(x):
    return torch.rsqrt(x.abs() + 1), torch.reciprocal(x.abs() + 1), torch.sign(x)


@corpus.program(lambda: (rand(4, 4),))
def rounding(x):
    y = x * 10
    return y.floor(), y.ceil(), y.round(), y.trunc(), y.frac()


@corpus.program(lambda: (rand(4, 4), rand(4, 4)))
def min_max_elementwise(x, y):
    return torch.maximum(x, y), torch.minimum(x, y), torch.max(x, y)


@corpus.program(lambda: (rand(4, 4, dtype=torch.float64), rand(4, 4, dtype=torch.float64)))
def float64_arith(x, y):
    return (x * y + 1) / (y.abs() + 2)


@corpus.program(lambda: (rand(4), ints(5, 4)))
def type_promotion_float_int(x, n):
    return x + n, n * 2, n / 2


@corpus.program(lambda: (rand(4, 3), rand(3)))
def operator_module_functions(x, y):
    return operator.add(x, y), operator.mul(x, 2), operator.neg(x)


@corpus.program(lambda: (rand(2, 3), rand(3, 4)))
def matmul_operator(a, b):
    return a @ b


@corpus.program(lambda: (rand(2, 3), rand(3, 3)))
def inplace_matmul_result_update(a, w):
    h = a @ w
    h @= w
    return h


@corpus.program(lambda: (rand(4, 4), 2.0, 3))
def python_number_math_mixed(x, scale, n):
    factor = scale**n / (n + 1)
    return x * factor, factor


@corpus.program(lambda: (rand(5),))
def abs_builtin_and_pow_builtin(x):
    return abs(x), pow(x, 2), -abs(x)


@corpus.program(lambda: (rand(3, 3), rand(3, 3)))
def lerp_addcmul_addcdiv(x, y):
    return (
        torch.lerp(x, y, 0.3),
        torch.addcmul(x, x, y, value=0.5),
        torch.addcdiv(x, x, y.abs() + 1),
    )


@corpus.program(lambda: call(rand(3, 4, grad=True), rand(3, 4)))
def arith_on_input_requiring_grad(x, y):
    return (x * y).sigmoid() + x


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def isclose_isfinite_isnan(x, y):
    z = x / (y * 0)
    return torch.isclose(x, x + 1e-9), torch.isfinite(z), torch.isnan(z)


@pytest.mark.parametrize("case", corpus.params())
def test_arith(case):
    case.run()
