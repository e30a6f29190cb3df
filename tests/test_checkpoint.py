"""Activation checkpointing (`torch.utils.checkpoint.checkpoint`) inside compiled code: the
checkpointed function is traced into the graph, the AOT partitioner saves none of its values
(the backward recomputes it), and outputs and gradients equal eager's with checkpointing."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from framejit.backend import lookup_backend
from framejit.backend.aot.runtime import TrainingRunner
from torch.utils.checkpoint import checkpoint

import framejit
from framejit.testing import CompileCounter


class Block(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Stack(torch.nn.Module):
    def __init__(self, ckpt: Any, layers: int = 3) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
        self.ckpt = ckpt  # None: no checkpointing; else the function that checkpoints

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x) if self.ckpt is None else self.ckpt(block, x)
        return x.square().mean()


class RecordingBackend:
    """aot_eager, remembering the compiled runners and counting graphs."""

    def __init__(self) -> None:
        self.runners: list[Any] = []
        self.counter = CompileCounter()
        self.inner = lookup_backend("aot_eager")

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        self.counter(gm, example_inputs)
        runner = self.inner(gm, example_inputs)
        self.runners.append(runner)
        return runner


def _train_matches(model: torch.nn.Module, backend: Any, steps: int = 3) -> None:
    reference = copy.deepcopy(model)
    fast = framejit.jit(model, backend=backend)
    for _ in range(steps):
        x = torch.randn(4, 8, 16, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        loss, expected = fast(x), reference(x2)
        torch.testing.assert_close(loss, expected)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(x.grad, x2.grad)
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_blocks_match_eager_and_save_less(reentrant: bool) -> None:
    torch.manual_seed(0)
    plain = Stack(None)
    ckpt = functools.partial(checkpoint, use_reentrant=reentrant)  # as Hugging Face does
    checkpointed = Stack(ckpt)
    checkpointed.load_state_dict(plain.state_dict())
    sizes = {}
    for name, model in [("plain", plain), ("checkpointed", checkpointed)]:
        explained = framejit.explain(model, torch.randn(4, 8, 16, requires_grad=True))
        assert (explained.graph_count, explained.graph_break_count) == (1, 0)
        backend = RecordingBackend()
        _train_matches(model, backend)
        assert backend.counter.frame_count == 1
        (runner,) = backend.runners
        assert isinstance(runner, TrainingRunner)
        sizes[name] = runner.saved_bytes
    # Kept for the backward: each block's output (the next block's input, and the loss's),
    # 4x8x16 floats each; nothing computed inside a block. (The first block's input and the
    # weights are the caller's tensors: kept by reference, not counted.)
    assert sizes["checkpointed"] == 3 * (4 * 8 * 16 * 4)
    assert sizes["checkpointed"] < sizes["plain"] / 3


def test_checkpoint_with_keyword_arguments_and_several_outputs() -> None:
    lin = torch.nn.Linear(6, 6)

    def inner(x: torch.Tensor, *, scale: float, bias: torch.Tensor) -> tuple:
        h = torch.tanh(lin(x)) * scale
        return h + bias, h.sum(-1)

    def fn(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        a, b = checkpoint(inner, x, use_reentrant=False, scale=0.5, bias=bias)
        return (a * b.unsqueeze(-1)).sum()

    x, bias = torch.randn(3, 6, requires_grad=True), torch.randn(6, requires_grad=True)
    x2, bias2 = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    backend = RecordingBackend()
    fast = framejit.jit(fn, backend=backend, fullgraph=True)
    out = fast(x, bias)
    expected = fn(x2, bias2)
    torch.testing.assert_close(out, expected)
    out.backward()
    w_grad = lin.weight.grad.clone()
    lin.weight.grad = None
    expected.backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(bias.grad, bias2.grad)
    torch.testing.assert_close(w_grad, lin.weight.grad)
    assert backend.counter.frame_count == 1


def test_dropout_inside_a_checkpoint_keeps_its_mask() -> None:
    lin = torch.nn.Linear(8, 8)

    def inner(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(torch.relu(lin(x)), p=0.5, training=True) * 3

    def fn(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(inner, x, use_reentrant=False).sum(0)

    fast = framejit.jit(fn, backend="aot_eager", fullgraph=True)
    weights = torch.arange(8.0)
    for seed in (1, 2):
        x = torch.randn(16, 8, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        torch.manual_seed(seed)
        expected = fn(x)
        (expected * weights).sum().backward()
        torch.manual_seed(seed)
        out = fast(x2)
        (out * weights).sum().backward()
        # same random mask as eager, and the backward used the forward's mask (a recomputed
        # dropout would draw a new one)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x2.grad, x.grad)


def test_checkpoint_runs_eagerly_where_eager_would_warn(recwarn: pytest.WarningsRecorder) -> None:
    lin = torch.nn.Linear(4, 4)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(lin, x).sum()  # no use_reentrant: torch warns

    x = torch.randn(2, 4, requires_grad=True)
    out = framejit.jit(fn, backend="aot_eager")(x)
    torch.testing.assert_close(out, lin(x).sum())
    assert any("use_reentrant" in str(w.message) for w in recwarn.list)


def test_checkpoint_under_no_grad_is_plain_inference() -> None:
    block = Block()
    fast = framejit.jit(
        lambda x: checkpoint(block, x, use_reentrant=False), backend="aot_eager", fullgraph=True
    )
    with torch.no_grad():
        x = torch.randn(2, 3, 16)
        torch.testing.assert_close(fast(x), block(x))


def test_reentrant_checkpoint_without_inputs_requiring_grad_runs_as_in_eager(
    recwarn: pytest.WarningsRecorder,
) -> None:
    block = Block()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(block, x, use_reentrant=True)

    explained = framejit.explain(fn, torch.randn(2, 16))
    assert explained.graph_break_count == 1
    assert "no input requiring grad" in str(explained.break_reasons[0])
    x = torch.randn(2, 16)
    out = framejit.jit(fn, backend="aot_eager")(x)
    torch.testing.assert_close(out, block(x))
    assert not out.requires_grad  # eager's reentrant checkpoint: no graph to the parameters
