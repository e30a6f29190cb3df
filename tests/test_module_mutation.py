"""Module state that changes between calls of a compiled model or training step.

Each test changes something about a module after the first calls (its submodules, their
settings, hooks, which tensors it holds) and checks that the next call gives eager's answer:
the compiled entry either still holds or is compiled again, never replayed stale.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

import framejit

BACKENDS = ["eager", "aot_eager"]


class Halved(nn.Module):
    """Halves its input in training mode only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5 if self.training else x


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.act = nn.Tanh()
        self.norm = nn.LayerNorm(3)
        self.halve = Halved()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.halve(self.act(self.lin(self.norm(x)))) * self.scale


# read as a global by the functions below (a torch.func transform calls the module for real)
MODEL = Block()


def per_row_sums(x: torch.Tensor) -> torch.Tensor:
    return vmap(lambda row: MODEL(row).sum())(x)


def input_gradient(x: torch.Tensor) -> torch.Tensor:
    return grad(lambda inp: MODEL(inp).sum())(x)


def parameter_gradients(params: dict[str, torch.Tensor], x: torch.Tensor) -> Any:
    return grad(lambda p, inp: functional_call(MODEL, p, (inp,)).sum())(params, x)


def _tied(m: Block) -> None:
    m.norm.weight = nn.Parameter(torch.full((3,), 2.0))
    m.norm.bias = m.norm.weight


# what changes on the module the transform calls
TRANSFORM_CHANGES: dict[str, Callable[[Block], Any]] = {
    "submodule replaced": lambda m: setattr(m, "act", nn.ReLU()),
    "submodule setting": lambda m: setattr(m.norm, "eps", 10.0),
    "top-level attribute": lambda m: setattr(m, "scale", 3.0),
    "hook on a submodule": lambda m: m.act.register_forward_hook(lambda mod, i, o: o * 7),
    "forward set on a submodule": lambda m: setattr(m.act, "forward", lambda x: x * 0),
    "submodule switched to eval": lambda m: m.halve.eval(),
    "bias set to None": lambda m: setattr(m.lin, "bias", None),
    "parameters tied": _tied,
}


@pytest.fixture
def model() -> Any:
    global MODEL
    before = MODEL
    torch.manual_seed(0)
    MODEL = Block()
    yield MODEL
    MODEL = before


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("change", list(TRANSFORM_CHANGES))
@pytest.mark.parametrize("fn", [per_row_sums, input_gradient])
def test_a_module_changed_under_a_transform_is_seen(model, fn, change, backend) -> None:
    compiled = framejit.jit(fn, backend=backend)
    x = torch.randn(4, 3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn(x))
    TRANSFORM_CHANGES[change](model)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_submodule_replaced_under_functional_call_in_grad_is_seen(model, backend) -> None:
    compiled = framejit.jit(parameter_gradients, backend=backend)
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(params, x), parameter_gradients(params, x))
    model.act = nn.ReLU()
    torch.testing.assert_close(compiled(params, x), parameter_gradients(params, x))


def test_a_transform_over_a_module_is_one_graph(model) -> None:
    explained = framejit.explain(per_row_sums, torch.randn(4, 3))
    assert explained.graph_count == 1 and explained.graph_break_count == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_global_module_hook_registered_later_is_seen_under_a_transform(model, backend) -> None:
    compiled = framejit.jit(per_row_sums, backend=backend)
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), per_row_sums(x))
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: out * 2 if isinstance(mod, nn.Linear) else None
    )
    try:
        torch.testing.assert_close(compiled(x), per_row_sums(x))
    finally:
        handle.remove()
    torch.testing.assert_close(compiled(x), per_row_sums(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.out = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.lin(x)))


def l2_penalized(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).sum() + sum(p.pow(2).sum() for p in model.parameters())


def scaled_by_counts(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    counts = len(list(model.named_parameters())) + 10 * len(list(model.buffers()))
    return model(x) * (counts + 100 * len(list(model.modules())))


def evaluated(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[bool]]:
    model.eval()
    return model(x), [m.training for m in model.modules()]


def _new_linear(seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(3, 3)


# changes to the tree a walk (`parameters()`, `modules()`, `eval()`) lists
TREE_CHANGES: dict[str, Callable[[Net], Any]] = {
    "submodule added": lambda n: setattr(n, "extra", _new_linear(1)),
    "submodule added deeper": lambda n: setattr(n.lin, "inner", _new_linear(2)),
    "parameter added": lambda n: n.out.register_parameter("gain", nn.Parameter(torch.ones(3))),
    "buffer added": lambda n: n.lin.register_buffer("seen", torch.zeros(2)),
    "bias set to None": lambda n: setattr(n.out, "bias", None),
    "parameters tied": lambda n: setattr(n.out, "weight", n.lin.weight),
    "submodule registered twice": lambda n: setattr(n, "again", n.lin),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("change", list(TREE_CHANGES))
@pytest.mark.parametrize("step", [l2_penalized, scaled_by_counts, evaluated])
def test_a_tree_walk_in_a_step_sees_the_changed_tree(step, change, backend) -> None:
    torch.manual_seed(0)
    model, reference = Net(), Net()
    reference.load_state_dict(model.state_dict())
    compiled = framejit.jit(step, backend=backend)
    x = torch.randn(2, 3)
    for _ in range(2):
        model.train(), reference.train()
        torch.testing.assert_close(compiled(model, x), step(reference, x))
    TREE_CHANGES[change](model)
    TREE_CHANGES[change](reference)
    for _ in range(2):
        model.train(), reference.train()
        torch.testing.assert_close(compiled(model, x), step(reference, x))


def with_first_weight(model: Net, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return functional_call(model, {"lin.weight": weight}, (x,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_functional_call_follows_weights_tied_later(backend) -> None:
    """With tie_weights=True, a given tensor replaces every name of the same parameter."""
    torch.manual_seed(0)
    model = Net()
    compiled = framejit.jit(with_first_weight, backend=backend)
    weight, x = torch.ones(3, 3), torch.randn(2, 3)
    for tie in (None, "out", "lin", None):
        if tie == "out":
            model.out.weight = model.lin.weight
        elif tie == "lin":
            model.lin.weight = model.out.weight = nn.Parameter(torch.randn(3, 3))
        else:
            model.out.weight = nn.Parameter(torch.randn(3, 3))
        want = with_first_weight(model, weight, x)
        torch.testing.assert_close(compiled(model, weight, x), want)
