"""`copy.copy` and `copy.deepcopy` of the values the translator tracks are captured: the copy is
an object of the frame, writes to it stay off the original, and the original's attributes are
guarded. Compared with eager on real tensors."""

from __future__ import annotations

import copy
from typing import Any

import torch

import framejit
from framejit.testing import CompileCounter


class Sub:
    def __init__(self) -> None:
        self.k = {"a": 1}


class Config:
    def __init__(self) -> None:
        self.hidden = 4
        self.layers = [1, 2]
        self.sub = Sub()


def derive(x: torch.Tensor, cfg: Config) -> tuple[Any, ...]:
    deep = copy.deepcopy(cfg)
    deep.hidden = 5
    deep.layers.append(3)
    deep.sub.k["b"] = 2
    shallow = copy.copy(cfg)
    shallow.hidden = 7
    table = copy.deepcopy({"x": [1, 2], "t": (1, "a")})
    table["x"].append(9)
    y = x * deep.hidden + len(deep.layers) + shallow.hidden + cfg.hidden
    y = y + len(table["x"]) + len(deep.sub.k) * 10 + len(cfg.sub.k) * 100 + len(cfg.layers)
    return y, deep, shallow


def test_deep_and_shallow_copies_are_captured() -> None:
    x = torch.randn(3)
    eager_cfg, cfg = Config(), Config()
    expected, eager_deep, eager_shallow = derive(x, eager_cfg)
    counter = CompileCounter()
    fast = framejit.jit(derive, backend=counter)
    y, deep, shallow = fast(x, cfg)
    torch.testing.assert_close(y, expected)
    assert (deep.hidden, deep.layers, deep.sub.k) == (5, [1, 2, 3], {"a": 1, "b": 2})
    assert deep.sub is not cfg.sub and deep.layers is not cfg.layers
    assert shallow.hidden == 7 and shallow.layers is cfg.layers and shallow.sub is cfg.sub
    assert (cfg.hidden, cfg.layers, cfg.sub.k) == (4, [1, 2], {"a": 1})  # untouched
    assert type(deep) is Config and vars(deep).keys() == vars(eager_deep).keys()
    assert counter.frame_count == 1
    explained = framejit.explain(derive, x, cfg)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)

    cfg.hidden = 10  # guarded: a new value is a new graph with the right answer
    eager_cfg.hidden = 10
    torch.testing.assert_close(fast(x, cfg)[0], derive(x, eager_cfg)[0])
    cfg.extra = 1  # a new attribute changes the instance dict's keys: guarded too
    eager_cfg.extra = 1
    assert fast(x, cfg)[1].extra == 1


class Custom:
    def __init__(self) -> None:
        self.copies = 0

    def __deepcopy__(self, memo: Any) -> Custom:
        new = Custom()
        new.copies = self.copies + 1
        return new


def test_copies_the_translator_does_not_model_run_as_python() -> None:
    def fn(x: torch.Tensor, obj: Custom) -> tuple[torch.Tensor, torch.Tensor]:
        twin = copy.deepcopy(obj)  # the class's own __deepcopy__
        t = copy.deepcopy(x)  # a tensor: a break, copied for real
        t.add_(1)
        return x * twin.copies, t

    x = torch.randn(3)
    expected = fn(x, Custom())
    got = framejit.jit(fn, backend="eager")(x, Custom())
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)
    reasons = " ".join(str(r) for r in framejit.explain(fn, x, Custom()).break_reasons)
    assert "copy.deepcopy" in reasons
