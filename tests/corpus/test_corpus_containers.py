"""Tuples, lists, dicts, namedtuples, dataclasses: built, indexed, unpacked, iterated, returned."""

import dataclasses
from collections import OrderedDict, namedtuple
from typing import NamedTuple

import pytest
import torch
from harness import EMPTY, Corpus, call, rand

corpus = Corpus()

Pair = namedtuple("Pair", ["first", "second"])


class Stats(NamedTuple):
    mean: torch.Tensor
    std: torch.Tensor
    count: int


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: torch.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: torch.Tensor
    scale: float


# --- inputs that are containers -------------------------------------------------------


@corpus.program(lambda: ([rand(3), rand(3), rand(3)],))
def list_of_tensors_input(xs):
    return xs[0] + xs[1] * xs[-1]


@corpus.program(lambda: ([rand(2, 3) for _ in range(4)],))
def sum_over_list_input(xs):
    total = torch.zeros(2, 3)
    for x in xs:
        total = total + x
    return total, len(xs)


@corpus.program(lambda: ((rand(3), rand(3)),))
def tuple_input_unpacked(pair):
    a, b = pair
    return a * b


@corpus.program(lambda: ({"x": rand(3, 4), "y": rand(3, 4)},))
def dict_of_tensors_input(batch):
    return batch["x"] + batch["y"]


@corpus.program(lambda: ({"a": rand(3), "b": rand(3), "c": rand(3)},))
def iterate_dict_items(d):
    out = {}
    for key, value in d.items():
        out[key] = value * 2
    return out


@corpus.program(lambda: ({"a": rand(3), "b": rand(3)},))
def iterate_dict_keys_and_values(d):
    keys = list(d.keys())
    total = sum(d.values())
    return keys, total, "a" in d, d.get("missing") is None


@corpus.program(lambda: ({"inputs": [rand(2, 2), rand(2, 2)], "scale": 3.0},))
def nested_input_structure(batch):
    a, b = batch["inputs"]
    return (a @ b) * batch["scale"]


@corpus.program(lambda: (Pair(rand(3), rand(3)),))
def namedtuple_input(pair):
    return pair.first - pair.second, pair[0] * 2


@corpus.program(lambda: (rand(3), [1, 2, 3]))
def list_of_python_ints_input(x, scales):
    return [x * s for s in scales]


# --- building containers --------------------------------------------------------------


@corpus.program(lambda: (rand(3), rand(3)))
def return_tuple(x, y):
    return x + y, x - y


@corpus.program(lambda: (rand(3), rand(3)))
def return_list(x, y):
    return [x * 2, y * 3, x + y]


@corpus.program(lambda: (rand(3), rand(3)))
def return_dict(x, y):
    return {"sum": x + y, "diff": x - y, "n": x.shape[0]}


@corpus.program(lambda: (rand(3), rand(3)))
def return_nested(x, y):
    return {"pair": (x + 1, [y + 2, {"deep": x * y}]), "empty": [], "none": None}


@corpus.program(lambda: (rand(3), rand(3)))
def return_namedtuple(x, y):
    return Pair(x + y, x * y)


@corpus.program(lambda: (rand(4, 5),))
def return_typed_namedtuple(x):
    return Stats(x.mean(0), x.std(0), x.shape[0])


@corpus.program(lambda: (rand(4, 5), rand(4, 5)))
def return_dataclass(x, target):
    return Output(logits=x * 2, loss=((x - target) ** 2).mean())


@corpus.program(lambda: (rand(4, 5),))
def return_dataclass_with_default(x):
    return Output(x.softmax(-1))


@corpus.program(lambda: (rand(4, 5),))
def return_frozen_dataclass(x):
    return Frozen(x.relu(), 0.5)


@corpus.program(lambda: (rand(3), rand(3)))
def return_ordered_dict(x, y):
    out = OrderedDict()
    out["first"] = x
    out["second"] = x + y
    return out


@corpus.program(lambda: (rand(2, 3),))
def list_comprehension(x):
    return torch.cat([x * i for i in range(3)], dim=0)


@corpus.program(lambda: (rand(2, 3),))
def dict_comprehension(x):
    return {f"power_{p}": x**p for p in (1, 2, 3)}


@corpus.program(lambda: (rand(6, 4),))
def unpack_chunk_star(x):
    first, *rest = x.chunk(3)
    return first, torch.cat(rest)


@corpus.program(lambda: (rand(6, 4),))
def swap_by_tuple_assignment(x):
    a, b = x[:3], x[3:]
    a, b = b, a
    return a - b


@corpus.program(lambda: (rand(3), rand(3), rand(3)))
def list_append_extend_insert_pop(x, y, z):
    items = [x]
    items.append(y)
    items.extend([z, x])
    items.insert(0, y * 10)
    last = items.pop()
    return torch.stack(items), last


@corpus.program(lambda: (rand(3), rand(3)))
def dict_update_setdefault(x, y):
    d = {"x": x}
    d.update({"y": y})
    d.setdefault("z", x + y)
    d["x"] = d["x"] * 2
    del d["y"]
    return d


@corpus.program(lambda: (rand(4),))
def tuple_concat_and_slice(x):
    t = (x, x + 1) + (x + 2,)
    return t[1:], t[::-1], len(t)


@corpus.program(lambda: ([rand(3), rand(3), rand(3), rand(3)],))
def list_slice_and_reverse(xs):
    return torch.stack(xs[1:3]), torch.stack(xs[::-1]), torch.stack(list(reversed(xs)))


@corpus.program(lambda: (rand(5),))
def containers_of_python_numbers(x):
    sizes = [1, 2, 2]
    widths = {"a": 3, "b": 4}
    return x * sum(sizes) + max(widths.values()) - min(sizes), len(widths)


@corpus.program(lambda: (rand(3), rand(3)))
def zip_two_lists(x, y):
    return [a * b for a, b in zip([x, y], [y, x])]


@corpus.program(lambda: ([rand(3), rand(3)],), graphs=EMPTY)
def return_input_list_elements_as_is(xs):
    return xs[1], xs[0]


@corpus.program(lambda: ({"w": rand(3)},), graphs=EMPTY)
def return_input_dict_value_as_is(d):
    return d["w"]


@corpus.program(lambda: call(rand(3), extra={"bias": rand(3)}))
def keyword_dict_argument(x, extra=None):
    return x + extra["bias"]


@corpus.program(lambda: (rand(2, 3),))
def tuple_of_shapes(x):
    shapes = (x.shape, x.T.shape)
    return shapes, torch.zeros(shapes[1])


@corpus.program(lambda: (rand(4, 4),))
def enumerate_over_rows_of_unbind(x):
    rows = x.unbind(0)
    return [row * i for i, row in enumerate(rows)]


@pytest.mark.parametrize("case", corpus.params())
def test_containers(case):
    case.run()
