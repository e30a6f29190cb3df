"""Gradients per output of a compiled training graph, as in eager.

A compiled graph runs as one autograd node, but eager autograd gives each output its own
history: a backward through one output leaves `.grad` None on what only the others depend on,
`autograd.grad` of an input only another output uses raises, and two outputs with no shared
saved tensors (two losses, a GAN step) can each have a backward without `retain_graph`.
Everything is compared with eager on real tensors.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from framejit.backend.aot.runtime import TrainingRunner
from helpers import aot
from torch.multiprocessing.reductions import StorageWeakRef

import framejit


def two_losses(x, wa, wb):
    """Two losses without shared history (two models trained in one step)."""
    return torch.tanh(x @ wa).sum(), torch.tanh(x @ wb).sum()


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def error_of(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.fixture
def inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=gen)
    wa = torch.randn(4, 4, generator=gen, requires_grad=True)
    wb = torch.randn(4, 4, generator=gen, requires_grad=True)
    return x, wa, wb


def test_independent_losses_backward_one_after_the_other(inputs):
    compiled = aot(two_losses, *leaves(*inputs))
    assert isinstance(compiled, TrainingRunner)
    eager, ours = leaves(*inputs), leaves(*inputs)
    for fn, (x, wa, wb) in ((two_losses, eager), (compiled, ours)):
        la, lb = fn(x, wa, wb)
        la.backward()
        assert wb.grad is None  # lb's parameter: untouched by la's backward
        lb.backward()
    for a, e in zip(ours[1:], eager[1:]):
        torch.testing.assert_close(a.grad, e.grad)


def test_backward_of_one_output_leaves_the_others_inputs_grad_none(inputs):
    compiled = aot(two_losses, *leaves(*inputs))
    for fn in (two_losses, compiled):
        x, wa, wb = leaves(*inputs)
        la, _ = fn(x, wa, wb)
        la.backward()
        assert wa.grad is not None and wb.grad is None


def test_autograd_grad_of_an_input_only_another_output_uses(inputs):
    compiled = aot(two_losses, *leaves(*inputs))
    results = []
    for fn in (two_losses, compiled):
        x, wa, wb = leaves(*inputs)
        la, lb = fn(x, wa, wb)
        error = error_of(lambda la=la, wb=wb: torch.autograd.grad(la, wb, retain_graph=True))
        (unused,) = torch.autograd.grad(la, wb, allow_unused=True, retain_graph=True)
        (used,) = torch.autograd.grad(lb, wb)
        results.append((error, unused, used))
    (eager_error, eager_unused, eager_used), (error, unused, used) = results
    assert error == eager_error
    assert eager_unused is None and unused is None
    torch.testing.assert_close(used, eager_used)


def test_second_backward_through_the_same_output_raises_eagers_error(inputs):
    compiled = aot(two_losses, *leaves(*inputs))
    errors = []
    for fn in (two_losses, compiled):
        x, wa, wb = leaves(*inputs)
        la, lb = fn(x, wa, wb)
        la.backward()
        lb.backward()
        errors.append(error_of(la.backward))
    assert errors[0] == errors[1]
    assert "second time" in errors[1][1]


def test_second_backward_of_a_single_output_raises_eagers_error(inputs):
    def f(x, w):
        return (torch.tanh(x @ w).sum(),)

    x, wa, _ = inputs
    compiled = aot(f, *leaves(x, wa))
    errors = []
    for fn in (f, compiled):
        (loss,) = fn(*leaves(x, wa))
        loss.backward()
        errors.append(error_of(loss.backward))
    assert errors[0] == errors[1]


def test_outputs_sharing_saved_tensors_raise_on_the_second_backward(inputs):
    def f(x, w):
        h = torch.tanh(x @ w)
        return h.sum(), (h * h).sum()

    x, wa, _ = inputs
    compiled = aot(f, *leaves(x, wa))
    errors = []
    for fn in (f, compiled):
        a, b = fn(*leaves(x, wa))
        a.backward()
        errors.append(error_of(b.backward))
    assert errors[0] == errors[1]


def test_outputs_sharing_only_nodes_without_saved_tensors(inputs):
    # the shared `wa + wb` saves nothing in eager: both backwards work there
    def f(wa, wb):
        h = wa + wb
        return h.sum(), h.mean()

    _, wa, wb = inputs
    compiled = aot(f, *leaves(wa, wb))
    results = []
    for fn in (f, compiled):
        a, b = leaves(wa, wb)
        s, m = fn(a, b)
        s.backward()
        m.backward()
        results.append((a.grad, b.grad))
    for got, expected in zip(results[1], results[0]):
        torch.testing.assert_close(got, expected)


def test_retain_graph_then_other_output_then_again(inputs):
    compiled = aot(two_losses, *leaves(*inputs))
    outcomes = []
    for fn in (two_losses, compiled):
        x, wa, wb = leaves(*inputs)
        la, lb = fn(x, wa, wb)
        la.backward(retain_graph=True)
        lb.backward()
        la.backward()  # retained above: a second backward through la works
        outcomes.append((wa.grad.clone(), wb.grad.clone(), error_of(lb.backward)))
    (ea, eb, e_error), (a, b, error) = outcomes
    torch.testing.assert_close(a, ea)
    torch.testing.assert_close(b, eb)
    assert error == e_error


def test_unused_head_parameters_keep_grad_none_and_adamw_skips_them():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.main, self.aux = nn.Linear(4, 8), nn.Linear(8, 3), nn.Linear(8, 2)

        def forward(self, x):
            h = torch.tanh(self.body(x))
            return self.main(h), self.aux(h)

    torch.manual_seed(0)
    base = Net()
    x, y = torch.randn(5, 4), torch.randn(5, 3)

    def train(compiled):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
        run = framejit.jit(model, backend="aot_eager") if compiled else model
        for _ in range(3):
            out, _ = run(x)
            ((out - y) ** 2).mean().backward()
            assert model.aux.weight.grad is None and model.aux.bias.grad is None
            opt.step()
            opt.zero_grad()
        return model

    eager, ours = train(False), train(True)
    for a, e in zip(ours.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a, e)
    assert torch.equal(ours.aux.weight, base.aux.weight)


def test_gan_step_with_both_losses_in_one_graph():
    def setup():
        torch.manual_seed(0)
        G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        D = nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        return G, D, torch.optim.Adam(G.parameters(), 1e-2), torch.optim.Adam(D.parameters(), 1e-2)

    def gan_step(G, D, opt_g, opt_d, z, real):
        fake = G(z)
        d_loss = F.softplus(-D(real)).mean() + F.softplus(D(fake.detach())).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = F.softplus(-D(fake)).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        return d_loss.detach(), g_loss.detach()

    gen = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(5, 4, generator=gen), torch.randn(5, 3, generator=gen)) for _ in range(3)
    ]
    results = []
    for step in (gan_step, framejit.jit(gan_step, backend="aot_eager")):
        G, D, opt_g, opt_d = setup()
        losses = [step(G, D, opt_g, opt_d, z, real) for z, real in batches]
        results.append((losses, [*G.parameters(), *D.parameters()]))
    (eager_losses, eager_params), (losses, params) = results
    torch.testing.assert_close(losses, eager_losses)
    for a, e in zip(params, eager_params, strict=True):
        torch.testing.assert_close(a, e)


def test_double_backward_of_one_output_of_two(inputs):
    x, wa, wb = inputs
    x.requires_grad_()
    compiled = aot(two_losses, *leaves(x, wa, wb))
    results = []
    for fn in (two_losses, compiled):
        xs, a, b = leaves(x, wa, wb)
        la, _ = fn(xs, a, b)
        gx, gb = torch.autograd.grad(la, (xs, b), create_graph=True, allow_unused=True)
        gx.pow(2).sum().backward()
        results.append((gx.detach(), gb, a.grad, b.grad))
    (egx, egb, ea, eb), (gx, gb, a, b) = results
    torch.testing.assert_close(gx, egx)
    torch.testing.assert_close(a, ea)
    assert egb is None and gb is None and eb is None and b is None


def saved_storages():
    """saved_tensors_hooks recording a weak reference to the storage of each saved tensor."""
    refs = []

    def pack(t):
        refs.append(StorageWeakRef(t.untyped_storage()))
        return t

    return refs, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def test_saved_tensors_freed_once_every_group_had_its_backward():
    def f(x, wa, wb):
        return torch.tanh(torch.tanh(x @ wa)).sum(), torch.tanh(torch.tanh(x @ wb)).sum()

    x = torch.randn(64, 64)
    wa, wb = torch.randn(64, 64, requires_grad=True), torch.randn(64, 64, requires_grad=True)
    compiled = aot(f, *leaves(x, wa, wb))
    inputs = {StorageWeakRef(t.untyped_storage()) for t in (x, wa, wb)}
    refs, hooks = saved_storages()
    with hooks:
        la, lb = compiled(x, wa, wb)
    activations = [r for r in refs if r not in inputs]
    assert activations
    la.backward()
    assert not all(r.expired() for r in activations)  # lb's backward still needs them
    lb.backward()
    assert all(r.expired() for r in activations)  # while la and lb are alive


def test_single_loss_frees_saved_tensors_at_its_backward():
    def f(x, w):
        return (torch.tanh(torch.tanh(x @ w)).sum(),)

    x, w = torch.randn(64, 64), torch.randn(64, 64, requires_grad=True)
    compiled = aot(f, *leaves(x, w))
    inputs = {StorageWeakRef(t.untyped_storage()) for t in (x, w)}
    refs, hooks = saved_storages()
    with hooks:
        (loss,) = compiled(x, w)
    activations = [r for r in refs if r not in inputs]
    assert activations
    loss.backward()
    assert all(r.expired() for r in activations)


def test_outputs_with_shared_history_keep_nothing_beyond_the_engine():
    # `loss, logits`: one group, so the loss's backward frees everything, as a plain step does
    def f(x, w):
        logits = torch.tanh(torch.tanh(x @ w))
        return logits.pow(2).sum(), logits

    x, w = torch.randn(64, 64), torch.randn(64, 64, requires_grad=True)
    compiled = aot(f, *leaves(x, w))
    inputs = {StorageWeakRef(t.untyped_storage()) for t in (x, w)}
    refs, hooks = saved_storages()
    with hooks:
        loss, logits = compiled(x, w)
    assert compiled.dependencies.num_groups == 1
    outputs = {StorageWeakRef(t.untyped_storage()) for t in (loss, logits)}
    activations = [r for r in refs if r not in inputs and r not in outputs]
    assert activations
    loss.backward()
    assert all(r.expired() for r in activations)
