"""torch.func transforms inside a compiled function (frontend/functorch.py): one graph op per
transformed call, compared with eager on real tensors, forward and backward; functions the op
cannot hold are a graph break with the reason, and still give eager's answer."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.func import grad, grad_and_value, hessian, jacfwd, jacrev, vmap

import framejit
from framejit.testing import CompileCounter


def loss(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return ((x @ w).tanh() ** 2).sum()


def vmap_of_a_lambda(x, w):
    return vmap(lambda r: r.sin() * 2)(x)


def vmap_closing_over_a_weight(x, w):
    return vmap(lambda r: (r @ w).relu())(x) + 1


def grad_of_a_global_function(x, w):
    return grad(loss)(w, x)


def grad_and_value_with_argnums(x, w):
    g, v = grad_and_value(loss, argnums=(0, 1))(w, x)
    return g[0] + 1, g[1], v


def per_sample_grads(x, w):
    return vmap(grad(loss), in_dims=(None, 0))(w, x.unsqueeze(1))


def jacobians_and_hessian(x, w):
    return (
        jacrev(torch.sin)(x[0]),
        jacfwd(lambda t: t.cos() * t)(x[0]),
        hessian(lambda t: (t**3).sum())(x[0]),
    )


def grad_over_a_dict_of_parameters(x, w):
    params = {"w": w, "b": x[0, :1]}
    grads = grad(lambda p, inp: ((inp @ p["w"]) + p["b"]).pow(2).mean())(params, x)
    return grads["w"], grads["b"]


CASES = [
    vmap_of_a_lambda,
    vmap_closing_over_a_weight,
    grad_of_a_global_function,
    grad_and_value_with_argnums,
    per_sample_grads,
    jacobians_and_hessian,
    grad_over_a_dict_of_parameters,
]


def _flat(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_transforms_are_one_graph_and_match_eager(fn, backend: str) -> None:
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter if backend == "eager" else backend)
    for _ in range(2):
        x, w = torch.randn(5, 4), torch.randn(4, 4)
        for got, expected in zip(_flat(jitted(x, w)), _flat(fn(x, w)), strict=True):
            torch.testing.assert_close(got, expected)
    explained = framejit.explain(fn, x, w)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    if backend == "eager":
        assert counter.frame_count == 1


def test_gradients_flow_through_a_vmap_in_a_training_graph() -> None:
    def fn(x, w):
        return vmap(lambda r: (r @ w).relu().sum())(x)

    x, w = torch.randn(5, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
    framejit.jit(fn, backend="aot_eager")(x, w).sum().backward()
    fn(x2, w2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


SEEN: list[Any] = []


def records(r):
    SEEN.append(r.shape)  # a write outside the function: it must run as Python
    return r * 2


model = torch.nn.Linear(4, 4)


def closes_over_a_module(x):
    m = model
    return vmap(lambda r: m(r))(x)


def test_an_impure_function_is_a_break_with_eagers_answer() -> None:
    def fn(x):
        return vmap(records)(x)

    x = torch.randn(3, 4)
    SEEN.clear()
    torch.testing.assert_close(framejit.jit(fn, backend="aot_eager")(x), fn(x))
    explained = framejit.explain(fn, x)
    assert explained.graph_break_count >= 1
    assert "uses the global `SEEN`" in explained.break_reasons[0]


class Counts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, r):
        self.calls += 1  # an effect: a module with it may not be called inside the op
        return r * 2


@pytest.mark.parametrize(
    "fn, graphs",
    [
        (lambda x: vmap(lambda r: model(r))(x), 1),
        (closes_over_a_module, 1),
        (lambda x: vmap(lambda r: COUNTS(r))(x), None),
    ],
    ids=["module-global", "module-closure", "module-with-effects"],
)
def test_modules_inside_transforms(fn, graphs) -> None:
    x = torch.randn(3, 4)
    torch.testing.assert_close(framejit.jit(fn, backend="aot_eager")(x), fn(x))
    explained = framejit.explain(fn, x)
    if graphs is None:
        assert "sets the attribute `calls`" in explained.break_reasons[0]
    else:
        assert explained.graph_count == graphs and explained.graph_break_count == 0


COUNTS = Counts()


def test_a_different_function_with_the_same_code_recompiles() -> None:
    def make(scale):
        def f(r):
            return r * 2

        return f

    f1, f2 = make(1), make(2)

    def fn(x, f):
        return vmap(f)(x)

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    x = torch.randn(3, 2)
    torch.testing.assert_close(jitted(x, f1), fn(x, f1))
    torch.testing.assert_close(jitted(x, f2), fn(x, f2))
    torch.testing.assert_close(jitted(x, f1), fn(x, f1))


# --- torch.func.functional_call ------------------------------------------------------------------


class TiedNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 4)
        self.head.weight = self.embed.weight  # tied
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x, scale=1.0):
        return self.head(self.norm(self.embed(x)).relu()) * scale


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_functional_call_swaps_parameters_and_buffers_for_the_call(backend: str) -> None:
    torch.manual_seed(0)
    net = TiedNet().eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}

    def fn(x, params):
        return torch.func.functional_call(net, params, (x,), {"scale": 2.0})

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter if backend == "eager" else backend)
    for _ in range(2):
        x = torch.randn(3, 4)
        params = {
            "embed.weight": torch.randn(4, 4),  # head.weight is tied to it: swapped too
            "embed.bias": torch.randn(4),
            "norm.running_mean": torch.randn(4),
        }
        torch.testing.assert_close(jitted(x, params), fn(x, params))
    for k, v in net.state_dict().items():  # the module itself never changes
        torch.testing.assert_close(v, before[k])
    assert framejit.explain(fn, x, params).graph_break_count == 0
    if backend == "eager":
        assert counter.frame_count == 1


def test_functional_call_gradients_reach_the_given_tensors() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def fn(x, params):
        return torch.func.functional_call(net, params, x).pow(2).mean()

    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    twins = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
    x = torch.randn(5, 4)
    framejit.jit(fn, backend="aot_eager")(x, params).backward()
    fn(x, twins).backward()
    for k in params:
        torch.testing.assert_close(params[k].grad, twins[k].grad)
    assert all(p.grad is None for p in net.parameters())


def test_functional_call_with_a_break_inside_runs_as_python() -> None:
    class Printing(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            print("", end="")
            return self.lin(x)

    net = Printing()

    def fn(x, params):
        return torch.func.functional_call(net, params, (x,)) + 1

    x, params = torch.randn(2, 3), {"lin.weight": torch.randn(3, 3)}
    torch.testing.assert_close(framejit.jit(fn, backend="aot_eager")(x, params), fn(x, params))


# --- modules inside transformed functions: their state is passed in ------------------------------

torch.manual_seed(0)
classifier = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def compute_loss(params, buffers, sample, target):
    predictions = torch.func.functional_call(classifier, (params, buffers), (sample.unsqueeze(0),))
    return torch.nn.functional.cross_entropy(predictions, target.unsqueeze(0))


def per_sample_gradients(x, y):
    """torch.func's per-sample-gradient recipe, with the model read as a global."""
    params = {k: v.detach() for k, v in classifier.named_parameters()}
    buffers = {k: v.detach() for k, v in classifier.named_buffers()}
    return vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_per_sample_gradients_of_a_global_model_are_one_graph(backend: str) -> None:
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    got, expected = (
        framejit.jit(per_sample_gradients, backend=backend)(x, y),
        per_sample_gradients(x, y),
    )
    assert got.keys() == expected.keys()
    for k in expected:
        torch.testing.assert_close(got[k], expected[k])
    assert framejit.explain(per_sample_gradients, x, y).graph_break_count == 0


def test_a_module_called_in_a_vmap_is_read_at_each_call_and_gets_gradients() -> None:
    def fn(x, m):
        return vmap(lambda r: m(r).sum())(x)

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    twin = copy.deepcopy(model)
    jitted = framejit.jit(fn, backend="aot_eager")
    x = torch.randn(6, 4)
    jitted(x, model).sum().backward()
    fn(x, twin).sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    with torch.no_grad():  # an update after compiling: the op reads the new weights
        for p, q in zip(model.parameters(), twin.parameters()):
            p.add_(1.0)
            q.add_(1.0)
    torch.testing.assert_close(jitted(x, model), fn(x, twin))
    assert all(p.grad is not None for p in model.parameters())


torch.manual_seed(0)
MEMBERS = [torch.nn.Linear(4, 3) for _ in range(5)]
ENSEMBLE_BASE = copy.deepcopy(MEMBERS[0]).to("meta")


def one_member(p, b, x):
    return torch.func.functional_call(ENSEMBLE_BASE, (p, b), (x,))


def ensemble(x, p, b):
    return vmap(one_member, in_dims=(0, 0, None))(p, b, x)


def test_model_ensembling_with_stacked_parameters_is_one_graph() -> None:
    """torch.func's ensembling recipe: `vmap` over `functional_call` of a meta-device copy."""
    params, buffers = torch.func.stack_module_state(MEMBERS)
    x = torch.randn(2, 4)
    for backend in ("eager", "aot_eager"):
        got = framejit.jit(ensemble, backend=backend)(x, params, buffers)
        torch.testing.assert_close(got, ensemble(x, params, buffers))
        torch.testing.assert_close(got[1], MEMBERS[1](x))
    assert framejit.explain(ensemble, x, params, buffers).graph_break_count == 0


def test_a_helper_defined_in_another_function_may_close_over_a_model_tensors_and_numbers():
    model = torch.nn.Linear(4, 2)
    scale = 3.0
    w = torch.randn(4)

    def helper(r):
        return model(r * w).sum() * scale

    def set_scale(value):
        nonlocal scale
        scale = value

    def step(x):
        return vmap(grad(helper))(x)

    x = torch.randn(5, 4)
    jitted = framejit.jit(step, backend="aot_eager")
    torch.testing.assert_close(jitted(x), step(x))
    assert framejit.explain(step, x).graph_break_count == 0
    w.add_(1.0)  # a tensor in a cell is an input: read at each call
    torch.testing.assert_close(jitted(x), step(x))
    set_scale(5.0)  # a number in a cell is guarded: a new graph
    torch.testing.assert_close(jitted(x), step(x))


_PSG_MODEL = torch.nn.Linear(4, 2)
_PSG_PARAMS = {k: v.detach() for k, v in _PSG_MODEL.named_parameters()}


def _per_sample_grads() -> Any:
    from torch.func import functional_call as call  # a local import: a closure cell

    def loss_fn(params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = call(_PSG_MODEL, params, (x[None],))
        return torch.nn.functional.cross_entropy(out, y[None])

    def fn(x: torch.Tensor, y: torch.Tensor) -> dict:
        return torch.func.vmap(torch.func.grad(loss_fn), in_dims=(None, 0, 0))(_PSG_PARAMS, x, y)

    return fn


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_per_sample_gradients_with_functional_call_in_a_closure(backend: str) -> None:
    """The per-sample-gradient recipe with `functional_call` imported inside the enclosing
    function (a closure cell holding torch's function) broke; then the params dict reached
    the transform as torch.fx's immutable dict, which functional_call could not update."""
    fn = _per_sample_grads()
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    explained = framejit.explain(fn, x, y)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(fn, backend=backend)(x, y), fn(x, y)
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k])
