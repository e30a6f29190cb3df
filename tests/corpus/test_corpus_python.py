"""Everyday Python around tensor code: generators, grad-mode blocks, class hierarchies,
configs, enums, namedtuples, functools/operator/math, formatting, unpacking, builtins,
recursion, recurrent layers, try/except that does not raise, asserts.

All of it is decided while tracing, so each case should compile to one graph.
"""

import dataclasses
import enum
import functools
import math
import operator
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from harness import EMPTY, Corpus, call, ints, rand
from torch import nn

corpus = Corpus(output=True)


# --- generators -----------------------------------------------------------------------


@corpus.program(lambda: ([rand(3) for _ in range(3)],))
def sum_of_generator(xs):
    return sum(x * i for i, x in enumerate(xs))


# capture gap: any()/all() over a generator of shape facts run the frame eagerly
@corpus.program(lambda: ([rand(3), rand(3, 2)],), graphs=(0, 1), fullgraph=False)
def any_all_of_generator_on_shapes(xs):
    if any(x.ndim > 1 for x in xs) and all(x.shape[0] == 3 for x in xs):
        return [x.flatten() for x in xs]
    return xs


@corpus.program(lambda: ([rand(2), rand(2), rand(2)],))
def tuple_and_list_of_generator(xs):
    doubled = tuple(x * 2 for x in xs)
    squared = list(x**2 for x in xs)  # noqa: C400
    return doubled, squared


@corpus.program(lambda: (rand(4),))
def dict_of_generator(x):
    return dict((f"p{k}", x**k) for k in range(1, 4))  # noqa: C402


def _powers(x, n):
    for k in range(n):
        yield x**k


def _pairs(xs):
    prev = None
    for x in xs:
        if prev is not None:
            yield prev, x
        prev = x


def _gen_with_return_and_from(x):
    yield x
    yield from (x + i for i in range(2))


@corpus.program(lambda: (rand(3),))
def user_generator_into_list(x):
    return list(_powers(x, 4))


@corpus.program(lambda: (rand(3),))
def user_generator_in_for_loop(x):
    acc = torch.zeros_like(x)
    for p in _powers(x, 3):
        acc = acc + p
    return acc


@corpus.program(lambda: ([rand(2) for _ in range(4)],))
def generator_of_pairs(xs):
    return torch.stack([a - b for a, b in _pairs(xs)])


# capture gap: `yield from` in a user generator runs the frame eagerly
@corpus.program(lambda: (rand(3),), graphs=(0, 1), fullgraph=False)
def yield_from_generator(x):
    return sum(_gen_with_return_and_from(x))


@corpus.program(lambda: (rand(3),))
def next_on_generator(x):
    g = _powers(x, 5)
    first = next(g)
    second = next(g)
    return first + second


@corpus.program(lambda: ([rand(2, 3), rand(2, 3)],))
def max_min_over_generator_of_sizes(xs):
    widest = max(x.shape[-1] for x in xs)
    return torch.cat([F.pad(x, (0, widest - x.shape[-1])) for x in xs])


# --- grad mode blocks -----------------------------------------------------------------


@corpus.program(lambda: (rand(3, grad=True),), grad=True)
def no_grad_block_inside(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
    return y, z


@corpus.program(lambda: (rand(3, grad=True),), grad=False)
def enable_grad_block_inside(x):
    with torch.enable_grad():
        y = x * 2
    z = x * 3
    return y, z


@corpus.program(lambda: (rand(3, grad=True), False), grad=True)
def set_grad_enabled_flag_false(x, train):
    with torch.set_grad_enabled(train):
        y = x.exp()
    return y


@corpus.program(lambda: (rand(3, grad=True), True), grad=True)
def set_grad_enabled_flag_true(x, train):
    with torch.set_grad_enabled(train):
        y = x.exp()
    return y


@corpus.program(lambda: (rand(3, grad=True),), grad=True)
def nested_grad_blocks(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
        c = x * 4
    return a, b, c


@corpus.program(lambda: (rand(3, grad=True),), grad=True)
def is_grad_enabled_query(x):
    with torch.no_grad():
        flag = torch.is_grad_enabled()
    return x * 2, flag, torch.is_grad_enabled()


@torch.no_grad()
def _frozen_stats(t):
    return t.mean(), t.std()


@corpus.program(lambda: (rand(5, grad=True),), grad=True)
def no_grad_decorated_helper(x):
    m, s = _frozen_stats(x)
    return (x - m) / s


@corpus.program(lambda: (rand(3, grad=True),), grad=True)
def inference_style_detach(x):
    target = (x * 2).detach()
    return F.mse_loss(x, target), target


# --- classes: super(), properties, classmethods, staticmethods ------------------------


class Base(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x)


class Middle(Base):
    def forward(self, x):
        return super().forward(x).relu()


class Top(Middle):
    def __init__(self, dim):
        super().__init__(dim)
        self.scale = 2.0

    def forward(self, x):
        return super().forward(x) * self.scale


@corpus.builder(lambda: (rand(2, 4),), grad_modes=True)
def super_three_levels():
    return Top(4)


class Config:
    width = 4

    def __init__(self, depth):
        self.depth = depth

    @property
    def total(self):
        return self.depth * self.width

    @classmethod
    def small(cls):
        return cls(2)

    @staticmethod
    def act(t):
        return torch.tanh(t)


@corpus.program(lambda: (rand(8),))
def property_classmethod_staticmethod(x):
    cfg = Config.small()
    return Config.act(x[: cfg.total]) * cfg.depth


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self._alpha = 3.0

    @property
    def alpha(self):
        return self._alpha

    def forward(self, x):
        return x * self.alpha


@corpus.builder(lambda: (rand(3),))
def module_property():
    return Scaled()


class Mixin:
    def describe_shape(self, t):
        return t.shape[-1]


class WithMixin(Mixin, nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) / self.describe_shape(x)


@corpus.builder(lambda: (rand(2, 4),))
def mixin_method():
    return WithMixin()


class Shape:
    def area(self, t):
        raise NotImplementedError


class Square(Shape):
    def area(self, t):
        return t * t


class Circle(Shape):
    def area(self, t):
        return math.pi * t * t


@corpus.program(lambda: (rand(3),))
def polymorphic_dispatch(x):
    return [s.area(x) for s in (Square(), Circle())]


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Vec(self.t + other.t)

    def __mul__(self, k):
        return Vec(self.t * k)

    def __len__(self):
        return self.t.shape[0]


# capture gap: `+`/`*` on a user class with __add__/__mul__ run the frame eagerly
@corpus.program(lambda: (rand(3), rand(3)), graphs=(0, 1), fullgraph=False)
def dunder_operators_on_user_class(a, b):
    v = (Vec(a) + Vec(b)) * 2
    return v.t, len(v)


# --- dataclasses, enums, namedtuples --------------------------------------------------


@dataclasses.dataclass
class TrainConfig:
    lr: float = 0.1
    layers: list = dataclasses.field(default_factory=lambda: [4, 4])
    act: str = "relu"


@dataclasses.dataclass(frozen=True)
class FrozenConfig:
    eps: float = 1e-5
    scale: int = 2


@corpus.program(lambda: (rand(4), TrainConfig()))
def dataclass_config_with_default_factory(x, cfg):
    y = x
    for width in cfg.layers:
        y = y[:width] * cfg.lr
    return getattr(F, cfg.act)(y)


@corpus.program(lambda: (rand(4),))
def frozen_dataclass_built_inside(x):
    cfg = FrozenConfig(scale=3)
    return (x + cfg.eps) * cfg.scale


@corpus.program(lambda: (rand(4), TrainConfig(act="gelu")))
def dataclass_replace_and_asdict(x, cfg):
    fast = dataclasses.replace(cfg, lr=0.5)
    return x * fast.lr, fast.act


class Activation(enum.Enum):
    RELU = "relu"
    TANH = "tanh"


class Phase(enum.IntEnum):
    TRAIN = 0
    EVAL = 1


@corpus.program(lambda: (rand(4), Activation.TANH))
def enum_dispatch(x, act):
    if act is Activation.RELU:
        return x.relu()
    elif act == Activation.TANH:
        return x.tanh()
    return x


# capture gap: Enum lookup by value (`Activation("relu")`) breaks the graph
@corpus.program(lambda: (rand(4), Phase.EVAL), graphs=(1, 2), fullgraph=False)
def int_enum_arithmetic(x, phase):
    return x * (phase + 1), phase.name, Activation("relu").value


class Pair(NamedTuple):
    mean: torch.Tensor
    var: torch.Tensor


@corpus.program(lambda: (rand(4, 3),))
def namedtuple_return(x):
    return Pair(x.mean(0), x.var(0))


# capture gap: namedtuple._replace runs the frame eagerly
@corpus.program(lambda: (rand(4, 3),), graphs=(0, 1), fullgraph=False)
def namedtuple_fields_and_replace(x):
    p = Pair(mean=x.mean(0), var=x.var(0))
    q = p._replace(var=p.var + 1)
    return q.var / q.mean.abs(), p._fields


@corpus.program(lambda: (rand(4, 3),))
def structseq_attributes(x):
    res = x.max(dim=0)
    vals, idx = torch.sort(x, dim=1)
    return res.values + vals[:, 0].sum(), res.indices, idx


# --- functools, operator, math --------------------------------------------------------


@corpus.program(lambda: (rand(4),))
def partial_of_user_function(x):
    def affine(t, a, b=0.0):
        return t * a + b

    f = functools.partial(affine, a=2.0, b=1.0)
    return f(x)


@corpus.program(lambda: (rand(2, 6),))
def partial_of_torch_function(x):
    split3 = functools.partial(torch.chunk, chunks=3, dim=-1)
    return split3(x)


# capture gap: functools.reduce runs the frame eagerly
@corpus.program(lambda: ([rand(3) for _ in range(4)],), graphs=(0, 1), fullgraph=False)
def reduce_with_operator_add(xs):
    return functools.reduce(operator.add, xs)


@corpus.program(lambda: ([rand(2), rand(2), rand(2)],))
def operator_itemgetter(xs):
    pick = operator.itemgetter(0, 2)
    a, c = pick(xs)
    return a * c


@corpus.program(lambda: (rand(3), Config(3)))
def operator_attrgetter(x, cfg):
    get = operator.attrgetter("depth", "width")
    depth, width = get(cfg)
    return x * depth + width


@corpus.program(lambda: (rand(3), rand(3)))
def operator_functions(a, b):
    return operator.mul(a, b), operator.sub(a, b), operator.neg(a), operator.matmul(a, b)


@corpus.program(lambda: (rand(4),))
def math_module_constants_and_functions(x):
    k = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1 + torch.tanh(k * (x + 0.044715 * x**3))) + math.log(math.e)


@corpus.program(lambda: (rand(2, 3, 4),))
def math_prod_ceil_floor_isclose(x):
    n = math.prod(x.shape)
    half = math.ceil(x.shape[-1] / 3), math.floor(x.shape[-1] / 3)
    same = math.isclose(0.1 + 0.2, 0.3)
    return x.reshape(n) * half[0] + half[1], same


@corpus.program(lambda: (rand(4, 8),))
def scaled_dot_product_scale_from_math(q):
    scale = 1 / math.sqrt(q.shape[-1])
    return (q @ q.transpose(0, 1)) * scale


@functools.lru_cache(maxsize=32)
def _positions(n):
    return tuple(range(n))


# A functools.lru_cache-wrapped helper runs for real at a graph break, by design: calling the
# wrapped function through could differ from eager (a cached value computed under older
# globals, the same cached object returned each time, side effects only on a miss).
@corpus.program(lambda: (rand(4),), graphs=1, breaks=1, fullgraph=False)
def lru_cached_helper(x):
    return x * torch.tensor(_positions(x.shape[0]))


# --- strings and formatting -----------------------------------------------------------


@corpus.program(lambda: (rand(3),))
def fstring_keys(x):
    return {f"layer_{i}.out": x * i for i in range(3)}


@corpus.program(lambda: (rand(3), "Relu"))
def string_methods(x, name):
    key = name.lower().strip()
    if key.startswith("re") and key.endswith("lu"):
        return x.relu(), "{}-{:02d}".format(key, 3), "%s:%d" % (key, 7)  # noqa: UP031, UP032
    return x, key, ""


# capture gap: str.join over a generator of ints breaks (reported as `str.join on tensors`)
@corpus.program(lambda: (rand(3),), graphs=(1, 2), fullgraph=False)
def join_and_split(x):
    parts = "a,b,c".split(",")  # noqa: SIM905
    return x * len(parts), "-".join(parts), " ".join(str(d) for d in x.shape)


# --- unpacking, comprehensions, builtins ----------------------------------------------


@corpus.program(lambda: ([rand(2) for _ in range(4)],))
def star_unpacking(xs):
    first, *middle, last = xs
    return first + last, len(middle), sum(middle)


@corpus.program(lambda: (rand(2, 3, 4),))
def star_unpack_shape(x):
    b, *rest = x.shape
    return x.reshape(b, -1), rest


@corpus.program(lambda: ({"a": rand(2), "b": rand(2), "c": rand(2)},))
def dict_and_set_comprehensions(d):
    scaled = {k: v * 2 for k, v in d.items() if k != "b"}
    names = {k.upper() for k in d}
    return scaled, sorted(names)


@corpus.program(lambda: ([rand(2), rand(2)], [1.0, 2.0]))
def zip_strict(xs, ws):
    return sum(x * w for x, w in zip(xs, ws, strict=True))


@corpus.program(lambda: ([rand(2) * i for i in range(3)],))
def reversed_list(xs):
    out = []
    for x in reversed(xs):
        out.append(x + len(out))
    return out


@corpus.program(lambda: ({"z": rand(2), "a": rand(2), "m": rand(2)},))
def sorted_keys(d):
    return torch.stack([d[k] for k in sorted(d)]), sorted(d, reverse=True)


@corpus.program(lambda: ([rand(2), 3, 2.5, None, (rand(2),)],))
def isinstance_chain(items):
    out = []
    for item in items:
        if isinstance(item, torch.Tensor):
            out.append(item * 2)
        elif isinstance(item, bool):
            out.append(item)
        elif isinstance(item, (int, float)):
            out.append(item + 1)
        elif isinstance(item, tuple):
            out.append(item[0].sum())
        else:
            out.append("none")
    return out


@corpus.program(lambda: (rand(3), 2, 2.0))
def type_is_checks(x, n, f):
    a = x * n if type(n) is int else x
    b = x + f if type(f) is float else x
    return a, b, type(x) is torch.Tensor


@corpus.program(lambda: (rand(3), torch.sigmoid, None))
def callable_builtin(x, fn, maybe):
    y = fn(x) if callable(fn) else x
    return y if not callable(maybe) else maybe(y)


@corpus.program(lambda: (rand(3), Config(2)))
def hasattr_getattr_default(x, cfg):
    depth = getattr(cfg, "depth", 1)
    dropout = getattr(cfg, "dropout", 0.0)
    return x * depth + dropout, hasattr(cfg, "width"), hasattr(cfg, "missing")


@corpus.program(lambda: (rand(3),))
def builtins_on_python_numbers(x):
    n = abs(-3) + round(2.6) + divmod(7, 2)[0] + pow(2, 3) + int("4") + len(range(2, 10, 3))
    return x * n, min(3, 1, 2), max([1.5, 0.5]), bool(0), float(3)


@corpus.program(lambda: ([rand(2) for _ in range(3)],))
def enumerate_with_start(xs):
    return [x * i for i, x in enumerate(xs, start=1)]


@corpus.program(lambda: (rand(4, 4),))
def chained_comparisons_on_shapes(x):
    if 0 < x.shape[0] <= 4 == x.shape[1]:
        return x.T
    return x


@corpus.program(lambda: (rand(3),))
def walrus_operator(x):
    if (n := x.shape[0]) > 2:
        return x * n
    return x


@corpus.program(lambda: ([[rand(2), rand(2)], [rand(2), rand(2)]],))
def nested_comprehension(grid):
    return [[cell * (i + j) for j, cell in enumerate(row)] for i, row in enumerate(grid)]


@corpus.program(lambda: (rand(3),))
def slicing_python_lists_and_tuples(x):
    widths = [1, 2, 3, 4, 5]
    return x * sum(widths[1:4]), widths[::-1][:2], tuple(widths)[-2:]


# --- recursion, try/except, assert ----------------------------------------------------


def _tree_sum(node):
    if isinstance(node, torch.Tensor):
        return node.sum()
    if isinstance(node, dict):
        return sum(_tree_sum(v) for v in node.values())
    return sum(_tree_sum(v) for v in node)


@corpus.program(lambda: ({"a": rand(2), "b": [rand(3), (rand(1), rand(2))]},))
def recursive_tree_walk(tree):
    return _tree_sum(tree)


def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


@corpus.program(lambda: (rand(3),))
def recursive_python_number(x):
    return x * _fib(6)


@corpus.program(lambda: (rand(3),))
def try_except_not_raising(x):
    try:
        y = x * 2
    except RuntimeError:
        y = x
    return y + 1


@corpus.program(lambda: (rand(3), {"scale": 2.0}))
def try_except_key_error_lookup(x, opts):
    try:
        scale = opts["scale"]
    except KeyError:
        scale = 1.0
    return x * scale


@corpus.program(lambda: (rand(3),))
def try_finally_no_raise(x):
    out = x
    try:
        out = out.exp()
    finally:
        out = out + 1
    return out


@corpus.program(lambda: (rand(3),))
def try_else_clause(x):
    try:
        y = x.sin()
    except ValueError:
        y = x
    else:
        y = y * 2
    return y


@corpus.program(lambda: (rand(2, 3, 4),))
def asserts_on_shapes(x):
    b, t, d = x.shape
    assert d % 2 == 0, f"dim {d} must be even"
    assert x.ndim == 3
    assert isinstance(b, int)
    return x.view(b, t, 2, d // 2).sum(-1)


# --- recurrent layers -----------------------------------------------------------------


class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, tokens):
        out, (h, c) = self.lstm(self.emb(tokens))
        return self.head(out).log_softmax(-1), h.squeeze(0)


@corpus.builder(lambda: (ints(10, 2, 5),), grad_modes=True)
def lstm_tagger():
    return LSTMTagger()


class GRUEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 5, num_layers=2, bidirectional=True)

    def forward(self, x, h0=None):
        out, h = self.gru(x, h0)
        return out.mean(0), h


@corpus.builder(lambda: (rand(4, 2, 3),), grad_modes=True)
def gru_bidirectional_two_layers():
    return GRUEncoder().eval()


@corpus.builder(lambda: (rand(2, 4, 3), rand(1, 2, 5)))
def rnn_tanh_with_initial_state():
    return nn.RNN(3, 5, batch_first=True)


class LSTMCellLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(3, 4)

    def forward(self, xs):
        h = xs.new_zeros(xs.shape[1], 4)
        c = torch.zeros_like(h)
        for x in xs:
            h, c = self.cell(x, (h, c))
        return h


@corpus.builder(lambda: (rand(3, 2, 3),), grad_modes=True)
def lstm_cell_loop():
    return LSTMCellLoop()


# --- functools.wraps decorators (users decorate their helpers) -------------------------


def _timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@_timed
def _decorated_gelu(t, approximate="none"):
    return F.gelu(t, approximate=approximate)


@corpus.program(lambda: (rand(3),))
def calls_wraps_decorated_helper(x):
    return _decorated_gelu(x, approximate="tanh") + 1


@corpus.program(
    lambda: call(rand(3), approximate="tanh"),
)
@_timed
def jit_of_wraps_decorated_function(t, approximate="none"):
    return F.gelu(t, approximate=approximate)


@corpus.program(lambda: (rand(3),), graphs=EMPTY)
def returns_python_values_only(x):
    return x.shape[0] * 2, x.dtype, str(x.device)


@pytest.mark.parametrize("case", corpus.params())
def test_python(case):
    case.run()
