"""Lifetimes: framejit must not keep a program's objects alive longer than eager does.

Each test drops what eager would free and checks, through weak references, that it is gone:
a training loop that keeps its losses (the batches go at each backward), the first call's
inputs (the compiled entry keeps none), models made one per experiment (guards hold them
weakly), and objects with `__del__` made inside a compiled function (built for real, so their
`__del__` runs).
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import framejit
from framejit.testing import CompileCounter


def _step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).square().mean()


@pytest.mark.parametrize("backend", ["aot_eager", None])
def test_a_loop_that_keeps_its_losses_frees_its_batches(backend: str | None) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    step = framejit.jit(_step, backend=backend) if backend else framejit.jit(_step)
    losses, batches = [], []
    for _ in range(5):
        x = torch.randn(4, 8)
        batches.append(weakref.ref(x))
        loss = step(model, x)
        loss.backward()
        losses.append(loss)  # keeps the autograd graph's root, as eager programs often do
        del x, loss
    gc.collect()
    assert [r() is None for r in batches] == [True] * 5


def test_the_first_calls_inputs_are_not_kept_by_the_compiled_entry() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    step = framejit.jit(_step, backend="aot_eager")
    x = torch.randn(4, 8)
    ref = weakref.ref(x)
    step(model, x).backward()
    del x
    gc.collect()
    assert ref() is None
    y = torch.randn(4, 8)  # the entry still serves the next call
    torch.testing.assert_close(step(model, y), _step(model, y))


def test_a_model_per_experiment_is_freed_when_dropped() -> None:
    counter = CompileCounter()
    step = framejit.jit(_step, backend=counter)
    refs = []
    for _ in range(5):
        model = nn.Linear(8, 1)
        refs.append(weakref.ref(model))
        x = torch.randn(4, 8)
        torch.testing.assert_close(step(model, x), _step(model, x))
        del model
    gc.collect()
    assert [r() is None for r in refs] == [True] * 5
    # the first model's entry (by identity: dead, it matches nothing), then one shared by the
    # later models (config.share_module_graphs): each is an nn.Linear with the same metadata
    assert counter.frame_count == 2


class _Tracked:
    log: list[str] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def __del__(self) -> None:
        _Tracked.log.append(f"del {self.name}")


def _makes_a_tracked_object(x: torch.Tensor) -> torch.Tensor:
    t = _Tracked("a")
    return x * 2 if t.name == "a" else x


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_del_of_an_object_made_in_a_compiled_function_runs(backend: str) -> None:
    jitted = framejit.jit(_makes_a_tracked_object, backend=backend)
    x = torch.ones(2)
    for _ in range(3):
        _Tracked.log.clear()
        torch.testing.assert_close(jitted(x), x * 2)
        gc.collect()
        assert _Tracked.log == ["del a"]
