"""The AOT stage on training graphs: joint graph, min-cut partition, autograd.Function runtime.

Gradients are compared with eager autograd on the same inputs; the end-to-end tests run 20
optimizer steps of each model in tests/backend/models.py compiled and eager side by side.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from framejit.backend.aot.runtime import InferenceRunner, TrainingRunner
from helpers import aot, clone_inputs
from models import MODELS, batch, loss

import framejit


def grads_match(fn, *inputs, grad_out=None):
    """Outputs and input gradients of compiled `fn` equal eager's; returns the compiled runner."""
    compiled = aot(fn, *clone_inputs(inputs))
    eager_inputs, compiled_inputs = clone_inputs(inputs), clone_inputs(inputs)
    expected, actual = fn(*eager_inputs), compiled(*compiled_inputs)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
        assert a.requires_grad == e.requires_grad
    diff = [(a, e) for a, e in zip(actual, expected) if e.requires_grad]
    # weighted sums: a plain sum sends the same gradient to every element, which hides errors
    # that a softmax or a normalization cancels (their gradients sum to zero)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.rand(e.shape, generator=gen, dtype=e.dtype) for _, e in diff]
    sum((e * w).sum() for (_, e), w in zip(diff, weights)).backward()
    sum((a * w).sum() for (a, _), w in zip(diff, weights)).backward()
    for a, e in zip(compiled_inputs, eager_inputs):
        if e.requires_grad:
            torch.testing.assert_close(a.grad, e.grad)
    return compiled


def test_gradients_reach_inputs_and_parameters():
    def f(x, w, b):
        return (torch.tanh(F.linear(x, w, b)).sin(),)

    compiled = grads_match(
        f,
        torch.randn(4, 3, requires_grad=True),
        torch.randn(5, 3, requires_grad=True),
        torch.randn(5, requires_grad=True),
    )
    assert isinstance(compiled, TrainingRunner)


def test_no_input_requires_grad_is_inference():
    compiled = aot(lambda x: (x.exp(),), torch.randn(3))
    assert isinstance(compiled, InferenceRunner)


def test_no_grad_mode_is_inference():
    with torch.no_grad():
        compiled = aot(lambda x: (x.exp(),), torch.randn(3, requires_grad=True))
        assert isinstance(compiled, InferenceRunner)
        assert not compiled(torch.randn(3, requires_grad=True))[0].requires_grad


def test_pointwise_chain_is_recomputed_not_saved():
    def f(x, w):
        h = x @ w
        return ((h.sin() * 2 + 1).cos().exp(),)

    compiled = grads_match(f, torch.randn(8, 8), torch.randn(8, 8, requires_grad=True))
    forward = compiled.forward.__self__.graph
    outputs = next(n for n in forward.nodes if n.op == "output").args[0]
    saved = {n.name for n in outputs}
    # the matmul's input and output, and the result (exp's backward reads it) are saved; the
    # pointwise chain between them is recomputed in the backward
    assert saved == {"arg0_1", "mm", "exp"}


def test_layer_norm_output_is_recomputed_not_saved():
    def f(x, w, g, b):
        return (F.layer_norm(x, (8,), g, b) @ w,)

    compiled = grads_match(
        f,
        torch.randn(16, 8, requires_grad=True),
        torch.randn(8, 8, requires_grad=True),
        torch.randn(8, requires_grad=True),
        torch.randn(8, requires_grad=True),
    )
    # the matmul's weight gradient needs the normalized values: recomputed from x (which the
    # layer norm's backward reads anyway), so the forward keeps no activation at all
    assert compiled.saved_bytes == 0


def test_non_differentiable_and_integer_outputs():
    def f(x):
        y = x * 3
        return y, y.argmax(dim=1), y.detach() + 1, (y > 0)

    grads_match(f, torch.randn(3, 4, requires_grad=True))


def test_detach_blocks_gradient():
    def f(x, w):
        return (x * w.detach() + w * 2,)

    grads_match(f, torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True))


def test_grad_mode_toggled_inside_graph():
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    y = graph.call_function(torch.mul, (x, w))
    graph.call_function(torch._C._set_grad_enabled, (False,))
    z = graph.call_function(torch.mul, (y, 2))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output((graph.call_function(torch.add, (y, z)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    xs, ws = torch.randn(3), torch.randn(3, requires_grad=True)
    (out,) = aot(gm, xs, ws)(xs, ws)
    out.sum().backward()
    torch.testing.assert_close(ws.grad, xs)  # z is a constant for autograd


def test_retain_graph_and_second_backward():
    x = torch.randn(4, requires_grad=True)
    compiled = aot(lambda x: (x.sin() * x,), x.detach().requires_grad_())
    (out,) = compiled(x)
    out.sum().backward(retain_graph=True)
    first = x.grad.clone()
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * first)


def test_double_backward_runs_the_graph_again_under_autograd():
    x = torch.randn(4, requires_grad=True)
    (out,) = aot(lambda x: (x.sin() * x,), x.detach().requires_grad_())(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    g.sum().backward()
    x2 = x.detach().requires_grad_()
    (g2,) = torch.autograd.grad((x2.sin() * x2).sum(), x2, create_graph=True)
    g2.sum().backward()
    torch.testing.assert_close(g, g2)
    torch.testing.assert_close(x.grad, x2.grad)


def _gradient_penalty_matches_eager(critic: torch.nn.Module, backend: str, rows: int) -> None:
    """WGAN-GP: the critic's gradient with respect to its input, penalized, trains the critic;
    gradients and buffers (BatchNorm's running statistics) as in eager."""
    twin = copy.deepcopy(critic)
    compiled = framejit.jit(critic, backend=backend)
    points = torch.randn(rows, 4)

    def penalty(model):
        x = points.clone().requires_grad_()
        (grad,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
        return ((grad.norm(2, dim=1) - 1) ** 2).mean()

    for _ in range(2):
        penalty(compiled).backward()
        penalty(twin).backward()
    for a, b in zip(critic.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    for a, b in zip(critic.buffers(), twin.buffers(), strict=True):
        torch.testing.assert_close(a, b)


def test_gradient_penalty_of_a_critic_matches_eager():
    torch.manual_seed(0)
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    _gradient_penalty_matches_eager(critic, "aot_eager", 5)


@pytest.mark.parametrize("backend", ["aot_eager", "triton"])
def test_gradient_penalty_through_train_mode_batch_norm_matches_eager(backend):
    # the graph writes BatchNorm's running statistics, which its outputs do not read: the
    # double backward runs it again on copies of them, so they are updated once, as in eager
    torch.manual_seed(0)
    critic = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    )
    _gradient_penalty_matches_eager(critic, backend, 6)


def test_double_backward_of_a_graph_reading_what_it_writes_raises_clearly():
    def f(x, s):
        s.add_(1)
        return (x * s).tanh().sum()

    x = torch.randn(4, requires_grad=True)
    s = torch.ones(4)
    out = framejit.jit(f, backend="aot_eager")(x, s)
    (g,) = torch.autograd.grad(out, x, create_graph=True)
    torch.testing.assert_close(s, torch.full((4,), 2.0))
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


def test_double_backward_through_dropout_matches_eager():
    # the graph runs again from the random states its forward started from: the same masks,
    # and the program's random stream after the step is eager's (the replay draws nothing)
    torch.manual_seed(0)
    critic = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )
    twin = copy.deepcopy(critic)
    compiled = framejit.jit(critic, backend="aot_eager")
    points = torch.randn(6, 4)

    def step(model):
        torch.manual_seed(1)
        x = points.clone().requires_grad_()
        (grad,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        penalty.backward()
        return penalty, grad, torch.rand(3)

    for _ in range(2):
        for want, got in zip(step(twin), step(compiled), strict=True):
            torch.testing.assert_close(got, want)
    for a, b in zip(critic.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)


def test_double_backward_through_triton_random_numbers_raises_clearly():
    # Triton kernels draw their own numbers: the captured graph cannot replay them
    x = torch.randn(4, requires_grad=True)
    out = framejit.jit(lambda x: F.dropout(x.sin(), 0.5).sum(), backend="triton")(x)
    (g,) = torch.autograd.grad(out, x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


def test_backward_compiled_lazily_once():
    x = torch.randn(4, requires_grad=True)
    compiled = aot(lambda x: (x.tanh(),), x.detach().requires_grad_())
    assert compiled.backward is None
    compiled(x)[0].sum().backward()
    first = compiled.backward
    compiled(x)[0].sum().backward()
    assert first is not None and compiled.backward is first


def test_mutated_non_leaf_input_keeps_gradient():
    def f(a):
        a.mul_(3)
        return (a.sin(),)

    w = torch.randn(4, requires_grad=True)
    compiled = aot(f, w * 1.0)
    w_eager = w.detach().clone().requires_grad_()
    a_eager = w_eager * 1.0
    (expected,) = f(a_eager)
    (expected.sum() + a_eager.sum()).backward()
    a = w * 1.0
    (out,) = compiled(a)
    (out.sum() + a.sum()).backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w.grad, w_eager.grad)


def test_view_output_of_parameter_gets_gradient():
    grads_match(lambda w: (w.t(), w * 2), torch.randn(2, 3, requires_grad=True))


def test_compiled_under_saved_tensor_hooks():
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    x = torch.randn(4, 3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled = aot(lambda x: (x.matmul(x.t()).tanh(),), x.detach().requires_grad_())
        (out,) = compiled(x)
    out.sum().backward()
    torch.testing.assert_close(out, x.matmul(x.t()).tanh())
    assert packed and all(isinstance(s, torch.Size) for s in packed)


@pytest.mark.parametrize("backend", ["auto", "aot_eager"])
def test_first_call_under_offloading_hooks_packs_only_real_tensors(backend):
    # a CPU-offload pack hook (numpy copies) fails on a FakeTensor: the compile's traces must
    # not reach it, and the hook must see the tensors the compiled graph saves, as a later call
    seen = []

    def pack(t):
        seen.append(type(t))
        return torch.from_numpy(t.detach().numpy().copy()).requires_grad_(t.requires_grad)

    def f(x, w):
        return torch.tanh(x @ w).sum()

    x = torch.randn(3, 4)
    w = torch.randn(4, 5, requires_grad=True)
    jitted = framejit.jit(f, backend=backend)
    grads = []
    for _ in range(2):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = jitted(x, w)
        (grad,) = torch.autograd.grad(out, w)
        grads.append(grad)
    (want,) = torch.autograd.grad(f(x, w), w)
    for grad in grads:
        torch.testing.assert_close(grad, want)
    assert seen and set(seen) == {torch.Tensor}, seen


@pytest.mark.parametrize("name", sorted(MODELS))
def test_twenty_optimizer_steps_match_eager(name):
    torch.manual_seed(0)
    model = MODELS[name]().train()
    eager = copy.deepcopy(model)
    compiled = framejit.jit(model, backend="aot_eager", fullgraph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    for _ in range(20):
        x, target = batch(name)
        for net, optimizer in ((compiled, opt), (eager, eager_opt)):
            optimizer.zero_grad()
            value = loss(name, net(x), target)
            value.backward()
            optimizer.step()
            if net is compiled:
                compiled_loss = value.detach()
            else:
                torch.testing.assert_close(compiled_loss, value.detach(), rtol=1e-4, atol=1e-5)
    for (key, a), b in zip(model.state_dict().items(), eager.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 2, 3, 4), (1, 1, 5, 8), (2, 3, 4)])
def test_scaled_dot_product_attention_gradients(shape, is_causal):
    """4-D inputs take the CPU flash kernel, whose backward reads its logsumexp output: the
    stage keeps it whole (its decomposition returns something else there)."""

    def f(q, k, v):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),)

    grads_match(f, *(torch.randn(*shape, requires_grad=True) for _ in range(3)))


def test_transformer_encoder_layer_training_gradients():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    twin = copy.deepcopy(layer)
    x = torch.randn(2, 5, 8)
    gen = torch.Generator().manual_seed(1)
    weight = torch.rand(2, 5, 8, generator=gen)
    (layer(x) * weight).sum().backward()
    (framejit.jit(twin, backend="aot_eager")(x) * weight).sum().backward()
    for (name, p), q in zip(layer.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def _index_add(x, w):
    x[torch.tensor([0, 2])] += w[:2]


_WRITES_WITH_GRAD = {
    "mul_": lambda x, w: x.mul_(w),
    "add_": lambda x, w: x.add_(w),
    "addcmul_": lambda x, w: x.addcmul_(w, w),
    "lerp_": lambda x, w: x.lerp_(w, 0.3),
    "index_add_": lambda x, w: x.index_add_(0, torch.tensor([0, 2]), w[:2]),
    "index_copy_": lambda x, w: x.index_copy_(0, torch.tensor([2, 0]), w[:2]),
    "masked_scatter_": lambda x, w: x.masked_scatter_(torch.tensor([True, False, True]), w),
    "setitem": _index_add,
    "slice_mul_": lambda x, w: x[:2].mul_(w[:2]),
}


@pytest.mark.parametrize("name", sorted(_WRITES_WITH_GRAD))
def test_input_without_grad_written_with_one_that_has_grad(name):
    """`x.mul_(w)` where only `w` requires grad: `x` joins the autograd graph as in eager, and
    `w` gets the gradient of the outputs and of `x`'s new value (the joint graph once handed
    the gradient of `x`'s new value to `w`)."""
    write = _WRITES_WITH_GRAD[name]

    def f(x, w):
        write(x, w)
        return w * 2, x * 3

    weights = [torch.tensor([1.0, 10.0, 100.0]), torch.tensor([3.0, 7.0, 11.0])]
    x_weight = torch.tensor([2.0, 5.0, 13.0])
    results = []
    for fn in (f, framejit.jit(f, backend="aot_eager")):
        x = torch.tensor([1.0, 2.0, 3.0])
        w = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
        outs = fn(x, w)
        assert x.requires_grad and not x.is_leaf
        (sum((o * u).sum() for o, u in zip(outs, weights)) + (x * x_weight).sum()).backward()
        results.append((*outs, x, w.grad))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want)


def test_leaf_made_inside_the_graph_requires_grad():
    """`torch.zeros(3, requires_grad=True)` inside: the graph runs as captured, so outputs
    computed from the new leaf require grad and its gradient is eager's."""

    def f(x):
        t = torch.zeros(3, requires_grad=True)
        return t, t * x + x, t + 1

    x = torch.randn(3)
    for fn in (f, framejit.jit(f, backend="aot_eager")):
        t, y, z = fn(x)
        assert t.is_leaf and y.requires_grad and z.requires_grad
        (y * 2).sum().backward()
        torch.testing.assert_close(t.grad, 2 * x)


def test_input_returned_by_a_no_op_conversion_stays_in_the_stage():
    """`w.float()` of a float leaf is `w` itself: no new leaf, the graph goes through the stage."""
    compiled = grads_match(
        lambda w: (w.float() * 2, w.contiguous()), torch.randn(3, requires_grad=True)
    )
    assert isinstance(compiled, TrainingRunner)


class _ReverseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.alpha * grad, None


def test_a_view_an_autograd_function_returns_keeps_its_backward():
    # a gradient-reversal layer's output leaves the graph: rebuilt as a plain view of its
    # input it lost the Function's backward (gradients came back with the wrong sign)
    def f(feat, w):
        return _ReverseGradient.apply(feat @ w, 2.0)

    feat, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    framejit.jit(f, backend="aot_eager")(feat, w).pow(2).sum().backward()
    got, w.grad = w.grad, None
    f(feat, w).pow(2).sum().backward()
    torch.testing.assert_close(got, w.grad)


def test_writes_through_data_or_detach_of_a_leaf_are_allowed_as_in_eager():
    # a hand-written SGD step and an EMA update write parameters through .data or detach()
    def sgd(model, lr):
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)

    def forward_then_scale(p, x):
        out = (p * x).sum()
        p.detach().mul_(2)
        return out

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    twin = copy.deepcopy(model)
    for m in (model, twin):
        m(torch.ones(4, 2)).sum().backward()
    framejit.jit(sgd, backend="aot_eager")(model, 0.1)
    sgd(twin, 0.1)
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b)

    p, q = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    x = torch.arange(3.0)
    framejit.jit(forward_then_scale, backend="aot_eager")(p, x).backward()
    forward_then_scale(q, x).backward()
    torch.testing.assert_close(p, q)
    torch.testing.assert_close(p.grad, q.grad)


def test_create_graph_through_two_graphs_counts_each_path_once():
    # `y = x * x`, a graph break, then the gradient of `y.sum()` with create_graph: the second
    # graph takes x too (unused there); its gradient must not also reach x through y's history
    def f(x):
        y = x * x
        print("a break")
        s = y.sum()
        return torch.autograd.grad(s, x, create_graph=True)[0]

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    got = framejit.jit(f, backend="aot_eager")(x)
    torch.testing.assert_close(got, 2 * x.detach())
    got.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2,), 2.0))


def _returns_its_sigmoid(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (h @ w).sigmoid()


def test_a_returned_output_is_saved_rather_than_its_input() -> None:
    # sigmoid's backward reads its output; the caller holds that output anyway, so saving it
    # costs nothing, while saving the matmul before it (to recompute the sigmoid) held a second
    # tensor of the same size, as eager never does
    h = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 4, requires_grad=True)
    saved: list[torch.Tensor] = []
    jitted = framejit.jit(_returns_its_sigmoid, backend="aot_eager")
    jitted(h, w)  # compiled first: the hooks then see the real tensors the forward saves
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = jitted(h, w)
    storages = {t.untyped_storage().data_ptr() for t in (h, w, out)}
    assert saved and all(t.untyped_storage().data_ptr() in storages for t in saved)
    out.sum().backward()
    want_h, want_w = torch.autograd.grad(_returns_its_sigmoid(h, w).sum(), (h, w))
    torch.testing.assert_close(h.grad, want_h)
    torch.testing.assert_close(w.grad, want_w)


@pytest.mark.parametrize("backend", ["auto", "aot_eager"])
def test_an_input_used_only_detached_gets_no_edge_into_its_history(backend):
    # SAC's temperature loss on `log_prob.detach()` after the actor's backward freed the
    # log-prob's graph: eager never walks into that history, nor may the compiled graph
    w = torch.randn(3, requires_grad=True)
    log_alpha = torch.zeros(1, requires_grad=True)

    def alpha_loss(lp):
        return -(log_alpha * (lp.detach() - 2.0)).mean()

    jitted = framejit.jit(alpha_loss, backend=backend)
    for fn in (alpha_loss, jitted, jitted):
        log_alpha.grad = None
        lp = (torch.arange(3.0) * w).sum()
        lp.backward()  # frees lp's graph
        fn(lp).backward()
        torch.testing.assert_close(log_alpha.grad, -(lp.detach() - 2.0).reshape(1))


def test_tangents_are_made_on_the_outputs_device():
    """The joint graph's tangents follow the outputs' device, not the default device: they
    were made with the default one, so every training graph on a GPU failed to trace
    ("invalid gradient ... expected device cuda:0 but got cpu") and ran as eager. A default
    device other than the tensors' shows it on the CPU."""
    model = torch.nn.Linear(4, 3)
    reference = copy.deepcopy(model)
    x = torch.randn(2, 4)
    fast = framejit.jit(model, backend="aot_eager", fullgraph=True)
    torch.set_default_device("meta")
    try:
        out = fast(x)
    finally:
        torch.set_default_device(None)
    out.square().sum().backward()
    reference(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_grad_mode_switches_inside_a_training_graph_are_traced():
    """A no_grad region inside a training graph (Hugging Face's rotary embeddings,
    `torch.set_grad_enabled(False)` around a statistic): the joint trace runs the switches, so
    the region's ops have no history and get no gradient, as in eager; the graph is compiled
    (it ran as captured before)."""
    from framejit.backend import lookup_backend

    def f(x, w):
        with torch.no_grad():
            s = (x * w).sum()
        y = (x @ w).relu() * s
        torch.set_grad_enabled(False)
        z = y * 3
        torch.set_grad_enabled(True)
        return y.sum(), z

    runners = []

    def backend(gm, example_inputs):
        runners.append(lookup_backend("aot_eager")(gm, example_inputs))
        return runners[-1]

    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
    a, z = framejit.jit(f, backend=backend, fullgraph=True)(x, w)
    b, z2 = f(x2, w2)
    assert isinstance(runners[0], TrainingRunner)
    assert torch.is_grad_enabled() and not z.requires_grad
    a.backward()
    b.backward()
    torch.testing.assert_close((a, z), (b, z2))
    torch.testing.assert_close((x.grad, w.grad), (x2.grad, w2.grad))


@pytest.mark.parametrize("backend", ["auto", "aot_eager"])
def test_an_output_whose_backward_gives_no_gradient_still_requires_grad(backend):
    # torch.norm(x, 0) counts the nonzeros: its backward gives x no gradient, yet eager's
    # result has a grad_fn, and `.backward()` on it runs (x.grad stays None)
    x = torch.randn(4, 5, requires_grad=True)
    expected = torch.norm(x, 0)
    got = framejit.jit(lambda x: torch.norm(x, 0), backend=backend)(x)
    assert got.requires_grad == expected.requires_grad
    torch.testing.assert_close(got, expected)
    got.backward()
    assert x.grad is None


@pytest.mark.parametrize(
    "objective",
    [
        lambda m, x, y: m(x).pow(2).sum(),
        lambda m, x, y: F.cross_entropy(m(x).flatten(0, 1), y.flatten()),
        lambda m, x, y: F.silu(m(x)).sum(),
    ],
    ids=["layer_norm", "cross_entropy", "silu"],
)
def test_aot_eager_gradients_are_eagers_bit_for_bit(objective) -> None:
    """`aot_eager` runs torch's own ops (undecomposed): a layer norm's, cross-entropy's and
    SiLU's gradients equal eager's exactly (decomposed, they differed in their last bits)."""
    torch.manual_seed(17)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.LayerNorm(6))
    twin = copy.deepcopy(model)
    x, y = torch.randn(4, 5, 6), torch.randint(0, 6, (4, 5))
    expected = objective(model, x, y)
    expected.backward()
    got = framejit.jit(objective, backend="aot_eager")(twin, x, y)
    got.backward()
    assert torch.equal(got, expected)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)
