"""Setup code that model libraries run around their tensor work and that holds no tensor values:
views of a function's signature parameters, list subclasses made in the frame (Hugging Face's
`LogitsProcessorList`), and `re` on constant strings. torch.compile users expect these to be
constants of the trace, so each case asserts one graph and no break, and compares with the
plain Python call.
"""

from __future__ import annotations

import inspect
import re

import torch
from torch import nn

import framejit
from framejit.testing import CompileCounter


def run(fn, *args, graphs: int = 1):
    """`fn` under jit, twice, against the plain call; one graph and no break."""
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter, fullgraph=True)
    for _ in range(2):
        got, want = jitted(*args), fn(*args)
        same(got, want)
    assert counter.frame_count == graphs
    assert framejit.explain(fn, *args).graph_break_count == 0
    return got


def same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        assert vars(a) == vars(b) if hasattr(a, "__dict__") else True
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, re.Match):
        assert type(b) is re.Match and a.span() == b.span() and a.groups() == b.groups()
    else:
        assert a == b


# --- views of a signature's parameters ---------------------------------------------------------


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, attention_mask=None, logits_to_keep=0, **kwargs):
        return self.fc(x)


def supports(model, x):
    params = inspect.signature(model.forward).parameters
    keys = params.keys()
    y = x * 2
    if "attention_mask" in set(keys):
        y = y + 1
    if "mm_encoder_outputs" in set(inspect.signature(model.forward).parameters.keys()):
        y = y * 100
    names = list(keys)
    kinds = [p.kind for p in params.values()]
    pairs = [(name, p.default) for name, p in params.items()]
    count = 0
    for name in keys:
        count += len(name)
    return y, names, kinds, pairs, len(keys), "x" in keys, count, sorted(keys)


def test_views_of_signature_parameters_are_constants():
    run(supports, Decoder(), torch.randn(2, 4))


def test_views_of_a_dict_from_outside_stay_live():
    """A view of a mutable dict is not a constant: a key added after the first call shows."""
    table = {"a": 1}

    def reads(x):
        return x + len(set(table.keys())), list(table.values())

    counter = CompileCounter()
    jitted = framejit.jit(reads, backend=counter)
    x = torch.ones(2)
    same(jitted(x), reads(x))
    table["b"] = 2
    same(jitted(x), reads(x))


class Registry:
    scale = 1


def reads_class_dict(x):
    return x + 1, "extra" in set(vars(Registry).keys())


def test_views_of_a_class_dict_stay_live():
    """A class's `__dict__` is a read-only proxy too, but of a dict that `setattr` changes."""
    counter = CompileCounter()
    jitted = framejit.jit(reads_class_dict, backend=counter)
    x = torch.ones(2)
    same(jitted(x), reads_class_dict(x))
    Registry.extra = 2
    try:
        same(jitted(x), reads_class_dict(x))
    finally:
        del Registry.extra
