"""Calls: user helpers (inlined), closures and cells, globals, argument passing, methods.

`@corpus.builder` cases build the thing to compile inside the test (under the fixed seed):
a closure over a tensor, a bound method of a user object, a lambda.
"""

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from harness import EMPTY, Corpus, call, rand

corpus = Corpus()

SCALE = 0.5
OFFSETS = (1.0, 2.0, 3.0)
CONFIG = {"eps": 1e-6, "power": 2}
GLOBAL_WEIGHT = torch.randn(4, 4, generator=torch.Generator().manual_seed(1234))


def _square(x):
    return x * x


def _normalize(x, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps)


def _apply_twice(f, x):
    return f(f(x))


def _split_sum(x, *, parts=2):
    return sum(x.chunk(parts, dim=-1))


def _many_outputs(x):
    return x + 1, x - 1, {"sq": _square(x)}


def _recursive_power(x, n):
    if n == 0:
        return torch.ones_like(x)
    return x * _recursive_power(x, n - 1)


# --- helpers and globals --------------------------------------------------------------


@corpus.program(lambda: (rand(3, 4),))
def call_helper(x):
    return _square(x) + 1


@corpus.program(lambda: (rand(3, 8),))
def call_helper_with_default_and_keyword(x):
    return _normalize(x), _normalize(x, eps=1e-2)


@corpus.program(lambda: (rand(3, 4),))
def helper_calls_helper(x):
    return _apply_twice(_square, x)


@corpus.program(lambda: (rand(3, 8),))
def keyword_only_argument(x):
    return _split_sum(x, parts=4), _split_sum(x)


@corpus.program(lambda: (rand(3),))
def helper_returning_structure(x):
    a, b, d = _many_outputs(x)
    return a * b + d["sq"]


@corpus.program(lambda: (rand(3),))
def recursive_helper_with_python_depth(x):
    return _recursive_power(x, 3)


@corpus.program(lambda: (rand(4, 4),))
def reads_global_constants(x):
    return x * SCALE + OFFSETS[1] + CONFIG["eps"] ** CONFIG["power"]


@corpus.program(lambda: (rand(3, 4),))
def reads_global_tensor(x):
    return x @ GLOBAL_WEIGHT


@corpus.program(lambda: (rand(4),))
def reads_module_attribute_functions(x):
    return math.pi * x + F.relu(x) + torch.nn.functional.silu(x)


# --- argument passing -----------------------------------------------------------------


@corpus.program(lambda: call(rand(3), rand(3), alpha=2.0))
def keyword_arguments(x, y, alpha=1.0, beta=0.0):
    return alpha * x + beta * y


@corpus.program(lambda: (rand(3),))
def default_arguments_used(x, alpha=3.0, bias=None, op=torch.tanh):
    y = op(x) * alpha
    return y if bias is None else y + bias


@corpus.program(lambda: (rand(3), rand(3), rand(3)))
def star_args(*tensors):
    return torch.stack(tensors).sum(0), len(tensors)


@corpus.program(lambda: call(rand(3), a=rand(3), b=rand(3)))
def star_kwargs(x, **named):
    out = x
    for name in sorted(named):
        out = out + named[name]
    return out, list(named)


@corpus.program(lambda: call(rand(3), rand(3), scale=2.0))
def forward_star_args_and_kwargs(*args, **kwargs):
    return _forwarded(*args, **kwargs)


def _forwarded(x, y, scale=1.0):
    return (x + y) * scale


@corpus.program(lambda: (rand(3), [rand(3), rand(3)], {"scale": 3.0}))
def call_with_unpacking(x, extra, options):
    return _forwarded(*extra, **options) + _forwarded(x, *extra[:1])


@corpus.program(lambda: (rand(2, 3),))
def functools_partial(x):
    softmax_last = functools.partial(torch.softmax, dim=-1)
    return softmax_last(x)


# --- closures, cells, lambdas ---------------------------------------------------------


@corpus.builder(lambda: (rand(3, 4),))
def closure_over_tensor():
    weight = torch.randn(4, 2)

    def project(x):
        return x @ weight

    return project


@corpus.builder(lambda: (rand(3),))
def closure_over_number():
    factor = 2.5

    def scale(x):
        return x * factor + factor

    return scale


@corpus.builder(lambda: (rand(3),))
def closure_factory_with_argument():
    def make_activation(kind):
        def activation(x):
            return torch.relu(x) if kind == "relu" else torch.sigmoid(x)

        return activation

    return make_activation("sigmoid")


@corpus.builder(lambda: (rand(3),))
def nested_closures_two_levels():
    base = torch.randn(3)

    def outer(x):
        shift = 1.0

        def inner(y):
            return y + base + shift

        return inner(x) * 2

    return outer


@corpus.program(lambda: (rand(3),))
def inner_function_defined_and_called(x):
    bias = x.mean()

    def add_bias(t):
        return t + bias

    return add_bias(x) * add_bias(x * 2)


@corpus.program(lambda: (rand(3),))
def nonlocal_read_in_inner_function(x):
    count = 3

    def repeat(t):
        nonlocal count
        return t * count

    return repeat(x)


@corpus.program(lambda: (rand(3),))
def nonlocal_write_in_inner_function(x):
    steps = 0

    def step(t):
        nonlocal steps
        steps += 1
        return t + steps

    y = step(step(x))
    return y, steps


@corpus.program(lambda: (rand(4),))
def lambdas(x):
    double = lambda t: t * 2  # noqa: E731 - users write this
    return double(x), (lambda t, k=3: t + k)(x)  # noqa: PLC3002


@corpus.program(lambda: ([rand(3), rand(3)],))
def map_with_lambda(xs):
    return list(map(lambda t: t.relu(), xs))  # noqa: C417


@corpus.builder(lambda: (rand(3),))
def lambda_capturing_tensor():
    w = torch.randn(3)
    return lambda x: x * w + 1


# --- methods of user objects ----------------------------------------------------------


class Scaler:
    def __init__(self, factor: float, bias: torch.Tensor) -> None:
        self.factor = factor
        self.bias = bias

    def apply(self, x):
        return self._scale(x) + self.bias

    def _scale(self, x):
        return x * self.factor

    @staticmethod
    def clip(x):
        return x.clamp(-1, 1)

    @classmethod
    def unit(cls, x):
        return cls.clip(x) * 0 + 1

    @property
    def double_factor(self):
        return self.factor * 2


@corpus.builder(lambda: (rand(3),))
def bound_method_of_user_object():
    return Scaler(1.5, torch.randn(3)).apply


@corpus.program(lambda: (rand(3),))
def user_object_created_and_used_inside(x):
    scaler = Scaler(2.0, torch.ones(3))
    return scaler.apply(x) + scaler.double_factor


@corpus.program(lambda: (rand(3),))
def staticmethod_and_classmethod(x):
    return Scaler.clip(x * 3), Scaler.unit(x)


@corpus.program(lambda: (Scaler(3.0, rand(3)), rand(3)))
def user_object_as_argument(scaler, x):
    return scaler.apply(x) * scaler.double_factor


@corpus.program(lambda: (rand(3),), graphs=EMPTY)
def returns_constant(x):
    return 42


@corpus.program(lambda: (rand(3),), graphs=EMPTY)
def returns_none(x):
    return None


@corpus.program(lambda: (rand(3),), graphs=EMPTY)
def returns_input_unchanged(x):
    return x


@corpus.program(lambda: (rand(3, 5),), graphs=EMPTY)
def returns_python_value_from_shape(x):
    return x.shape[0] * 2


@corpus.program(lambda: (rand(3, 5),))
def returns_tensor_and_size(x):
    y = x.relu()
    return y, x.size(1)


@corpus.program(lambda: (rand(3), rand(3)))
def returns_input_and_new_tensor(x, y):
    return x, x + y, y


@pytest.mark.parametrize("case", corpus.params())
def test_functions(case):
    case.run()
