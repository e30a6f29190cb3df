"""One compiled entry for every instance of a layer class (config.share_module_graphs).

When a layer's forward breaks the graph (a data-dependent op, an `.item()` the code branches
on), the model's frame runs each layer call for real and each layer's forward is compiled on
its own. Guarded by identity, every layer would compile its own entry (and a model with more
layers than config.recompile_limit would run the rest eagerly); once a recompile sees a second
instance of the class, the module is guarded by class and its state by source, so one entry
serves the other layers. These tests compare with eager on real tensors, count the entries, and
check that what would tie an entry to one instance (its id, a callee it calls for real, its
module tree) pins it by identity.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import framejit
from framejit.testing import CompileCounter


@pytest.fixture(autouse=True)
def _sharing() -> Iterator[None]:
    before = framejit.config.share_module_graphs
    framejit.config.share_module_graphs = True
    yield
    framejit.config.share_module_graphs = before


class Gate(nn.Module):
    """Breaks the graph on every call: which rows pass depends on the values."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        rows = torch.nonzero(h.sum(-1) > 0).flatten()  # output shape depends on the values
        out = torch.zeros_like(h)
        out[rows] = torch.tanh(h[rows])
        return out


class Layer(nn.Module):
    def __init__(self, d: int, scale: float = 0.5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.gate = Gate(d)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale * self.gate(self.norm(x))


class Stack(nn.Module):
    def __init__(self, layers: list[nn.Module], d: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.head = nn.Linear(d, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _entries(model: Any, cls: type) -> int:
    """Entries in the caches of `cls.forward`'s code (every jit of it framejit made)."""
    import gc

    from framejit.guards.cache import CodeCache

    code = cls.forward.__code__
    name = f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"
    return sum(len(c.entries) for c in gc.get_objects() if type(c) is CodeCache and c.name == name)


def _run(model: nn.Module, calls: int = 3, d: int = 8) -> CompileCounter:
    counter = CompileCounter()
    jitted = framejit.jit(model, backend=counter)
    torch.manual_seed(1)
    with torch.no_grad():
        for _ in range(calls):
            x = torch.randn(5, d)
            torch.testing.assert_close(jitted(x), model(x))
    return counter


@pytest.mark.parametrize("share", [True, False])
def test_layers_whose_forward_breaks_share_one_entry(share: bool) -> None:
    framejit.config.share_module_graphs = share
    torch.manual_seed(0)
    model = Stack([Layer(8) for _ in range(10)]).eval()
    counter = _run(model)
    layer_entries, gate_entries = _entries(model, Layer), _entries(model, Gate)
    if share:  # the first instance, then one entry for the class
        assert layer_entries == 2 and gate_entries == 2
    else:  # an entry per instance (a jit of its own per layer)
        assert layer_entries >= 8 and gate_entries >= 8
    assert counter.frame_count <= (60 if share else 200)


class Signed(Layer):
    def __init__(self, d: int, sign: str) -> None:
        super().__init__(d)
        self.sign = sign

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x) if self.sign == "+" else -self.norm(x)  # before the gate's break
        return x + self.gate(y)


def test_an_attribute_that_differs_between_layers_is_guarded() -> None:
    torch.manual_seed(0)
    model = Stack([Signed(8, s) for s in "++-+--"]).eval()
    _run(model)
    # the first instance; the shared entry holds for "+" only, "-" compiles its own
    assert _entries(model, Signed) == 3


class Outer(nn.Module):
    """Calls its submodule, whose forward breaks: the call runs for real, each layer its own."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.inner = Gate(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * 2 + x


def test_a_shared_entry_calls_each_instances_own_submodule() -> None:
    torch.manual_seed(0)
    model = Stack([Outer(8) for _ in range(5)]).eval()  # different weights per layer
    _run(model)
    assert _entries(model, Outer) == 2


class ById(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tag = float(id(self) % 997)  # reading id() pins the instance
        h = self.fc(x)
        rows = torch.nonzero(h[:, 0] > 0).flatten()
        return h.index_fill(0, rows, 0.0) + tag


def test_reading_the_id_of_a_shared_module_pins_it() -> None:
    torch.manual_seed(0)
    model = Stack([ById(8) for _ in range(4)]).eval()
    _run(model)
    assert _entries(model, ById) == 4


class Summed(nn.Module):
    """Adds the sum of its parameters: `parameters()` walks this instance's tree."""

    def __init__(self, d: int, bias: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        rows = torch.nonzero(h[:, 0] > 0).flatten()
        total = sum(p.sum() for p in self.parameters())
        return h.index_fill(0, rows, 0.0) + total


def test_a_module_tree_walk_pins_the_instance() -> None:
    torch.manual_seed(0)
    # without a bias first: a shared entry would miss the bias of the later layers
    model = Stack([Summed(8, bias) for bias in (False, False, True, True)]).eval()
    _run(model)


def _times_ten(m: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
    return out * 10


def test_a_hook_on_one_layer_is_seen() -> None:
    torch.manual_seed(0)
    layers = [Layer(8) for _ in range(4)]
    layers[2].gate.register_forward_hook(_times_ten)
    model = Stack(layers).eval()
    _run(model)
    layers[2].gate._forward_hooks.clear()
    layers[1].gate.register_forward_hook(_times_ten)
    _run(model)


def test_a_layer_switched_to_training_mode_is_seen() -> None:
    torch.manual_seed(0)
    layers = [Layer(8) for _ in range(4)]
    model = Stack(layers).eval()
    _run(model)
    layers[3].train()
    _run(model)


def test_the_setting_is_checked() -> None:
    with pytest.raises(TypeError, match="share_module_graphs must be True or False"):
        framejit.config.share_module_graphs = 1  # type: ignore[assignment]


class Last(nn.Module):
    """Skips its gate when it is the model's marked layer: `is` between modules."""

    marked: nn.Module | None = None

    def __init__(self, d: int) -> None:
        super().__init__()
        self.gate = Gate(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.gate(x)  # a break: the rest is a resume function, shared too
        if self is Last.marked:  # an identity comparison pins the instance
            return y * 3
        return x + y


def test_an_identity_comparison_pins_the_instance() -> None:
    torch.manual_seed(0)
    layers = [Last(8) for _ in range(5)]
    Last.marked = layers[3]
    try:
        _run(Stack(layers).eval())
    finally:
        Last.marked = None
