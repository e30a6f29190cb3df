"""The aten graphs of the training models stay inside the documented core op set, and the
decomposition table keeps random ops whole."""

from __future__ import annotations

import pytest
import torch
from framejit.backend.aot import aot_compile
from framejit.backend.aot.core_ops import CORE_OPS, RANDOM_OPS, decomposition_table, op_name
from models import MODELS, batch, loss

import framejit


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_graphs_use_core_ops(name):
    seen: set[str] = set()

    def inner(gm, example_inputs):
        seen.update(op_name(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    model = MODELS[name]().train()
    compiled = framejit.jit(
        model, backend=lambda gm, inputs: aot_compile(gm, inputs, inner), fullgraph=True
    )
    x, target = batch(name)
    loss(name, compiled(x), target).backward()  # compiles the backward graph too
    assert seen and seen <= CORE_OPS | {"operator.getitem"}, sorted(seen - CORE_OPS)
    assert any(p.grad is not None for p in model.parameters())


def test_random_ops_are_not_decomposed():
    table = decomposition_table()
    assert not {op_name(op) for op in table} & RANDOM_OPS
    assert torch.ops.aten.native_dropout.default not in table


def test_dropout_in_training_stays_one_op():
    def f(x):
        return (torch.nn.functional.dropout(x, 0.5, True) * 2,)

    seen = []

    def inner(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(64, requires_grad=True)
    out = aot_compile(gm, [x], inner)(x)[0]
    out.sum().backward()
    kept = (out != 0).float()
    torch.testing.assert_close(x.grad, kept * 4)  # same mask in forward and backward
    forward_ops = [op_name(n.target) for n in seen[0].graph.nodes if n.op == "call_function"]
    assert "aten.native_dropout" in forward_ops
