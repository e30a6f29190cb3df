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


# --- effects a recompute repeats: eager's backward runs the checkpointed function again ------


class Counted(torch.nn.Module):
    """A layer whose forward counts its calls three ways: an attribute, a buffer, a list."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.how = how
        self.calls = 0
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))
        self.log: list = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "attribute":
            self.calls += 1
        elif self.how == "buffer":
            self.steps.add_(1)
        elif self.how == "list":
            self.log.append(1)
        elif self.how == "batch_norm":  # running statistics given by keyword
            x = F.batch_norm(x, running_var=self.var, running_mean=self.mean, training=True)
        return torch.tanh(self.lin(x))


def _state(model: torch.nn.Module) -> dict:
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for name, m in model.named_modules():
        state.update({f"{name}.calls": getattr(m, "calls", None), f"{name}.log": len(m.log)}
                     if isinstance(m, Counted) else {})  # fmt: skip
    return state


def _steps_match(build: Any, call: Any, backend: str, reentrant: bool, steps: int = 3) -> None:
    """Train a model eagerly and compiled from the same start: outputs, gradients, buffers
    and Python counters equal after every step."""
    torch.manual_seed(0)
    eager_model = build()
    fast_model = copy.deepcopy(eager_model)

    def step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return call(model, x, reentrant).pow(2).sum()

    fast = framejit.jit(step, backend=backend)
    for i in range(steps):
        torch.manual_seed(i)
        x = torch.randn(8, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        torch.manual_seed(100 + i)
        expected = step(eager_model, x)
        expected.backward()
        torch.manual_seed(100 + i)
        out = fast(fast_model, x2)
        out.backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x2.grad, x.grad)
        for p, q in zip(fast_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        a, b = _state(fast_model), _state(eager_model)
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], torch.Tensor):
                torch.testing.assert_close(a[key], b[key], msg=key)
            else:
                assert a[key] == b[key], key


def _checkpointed(model: torch.nn.Module, x: torch.Tensor, reentrant: bool) -> torch.Tensor:
    return checkpoint(model, x, use_reentrant=reentrant)


def _bn() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))


def _hooked() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    model[0].hook_calls = []  # type: ignore[assignment]
    model[0].register_forward_hook(lambda m, i, o: m.hook_calls.append(1))
    return model


def _hook_calls(model: torch.nn.Module, x: torch.Tensor, reentrant: bool) -> torch.Tensor:
    out = checkpoint(model, x, use_reentrant=reentrant)
    return out * len(model[0].hook_calls)  # what the counter holds when the step runs


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    ("build", "call", "reason"),
    [
        (_bn, _checkpointed, "in-place write to a tensor from outside"),
        (lambda: Counted("buffer"), _checkpointed, "in-place write to a tensor from outside"),
        (lambda: Counted("batch_norm"), _checkpointed, "in-place write to a tensor from outside"),
        (lambda: Counted("attribute"), _checkpointed, "change to a Python object"),
        (lambda: Counted("list"), _checkpointed, "change to a Python object"),
        (_hooked, _hook_calls, "change to a Python object"),
    ],
    ids=["batchnorm", "buffer", "F.batch_norm", "attribute", "list", "hook"],
)
def test_a_checkpointed_function_with_effects_runs_as_in_eager(
    build: Any, call: Any, reason: str, backend: str, reentrant: bool
) -> None:
    """BatchNorm's running statistics, a buffer written in place, a counter, a forward hook:
    eager's recompute makes each of these effects a second time in the backward."""
    model = build()
    explained = framejit.explain(
        lambda x: call(model, x, reentrant), torch.randn(8, 4, requires_grad=True)
    )
    assert explained.graph_break_count >= 1
    assert any(reason in str(r) for r in explained.break_reasons), explained.break_reasons
    _steps_match(build, call, backend, reentrant)


COUNTER = 0


def test_global_and_closure_counters_in_a_checkpoint_run_as_in_eager() -> None:
    lin = torch.nn.Linear(4, 4)
    count = 0

    def bump_global(x: torch.Tensor) -> torch.Tensor:
        global COUNTER
        COUNTER += 1
        return lin(x)

    def bump_closure(x: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        return lin(x)

    for inner, reason in [(bump_global, "a global"), (bump_closure, "a closure variable")]:

        def fn(x: torch.Tensor, inner: Any = inner) -> torch.Tensor:
            return checkpoint(inner, x, use_reentrant=False).sum()

        explained = framejit.explain(fn, torch.randn(2, 4, requires_grad=True))
        assert any(reason in str(r) for r in explained.break_reasons), explained.break_reasons
        fast = framejit.jit(fn, backend="aot_eager")
        counts = []
        for f in (fn, fast, fast):
            before = (COUNTER, count)
            f(torch.randn(2, 4, requires_grad=True)).backward()
            counts.append((COUNTER - before[0], count - before[1]))
        assert counts[0] == counts[1] == counts[2], counts


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_pure_checkpoints_with_local_in_place_ops_stay_in_the_graph(backend: str) -> None:
    """In-place ops on tensors the checkpointed function made itself, and BatchNorm in eval
    mode, are not effects: the call is captured."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).eval()

    def inner(x: torch.Tensor) -> torch.Tensor:
        y = model(x) * 2
        y.add_(1)
        return y.relu_()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(inner, x, use_reentrant=False).sum()

    explained = framejit.explain(fn, torch.randn(8, 4, requires_grad=True))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained
    fast = framejit.jit(fn, backend=backend, fullgraph=True)
    for _ in range(2):
        x = torch.randn(8, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        out, expected = fast(x), fn(x2)
        out.backward()
        expected.backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_checkpoint_without_preserved_rng_state_draws_again_as_in_eager(backend: str) -> None:
    """preserve_rng_state=False: eager's recompute draws a new dropout mask (the gradient uses
    it) and advances the generator; a region with no random ops is still captured."""
    lin = torch.nn.Linear(4, 4)

    def fn(x: torch.Tensor) -> torch.Tensor:
        out = checkpoint(
            lambda t: F.dropout(lin(t), 0.5, True), x, use_reentrant=False,
            preserve_rng_state=False,
        )  # fmt: skip
        return out.sum()

    def no_random(x: torch.Tensor) -> torch.Tensor:
        out = checkpoint(
            lambda t: torch.tanh(lin(t)), x, use_reentrant=False, preserve_rng_state=False
        )
        return out.sum()

    explained = framejit.explain(fn, torch.ones(2, 4, requires_grad=True))
    assert "random numbers drawn by dropout" in str(explained.break_reasons[0])
    explained = framejit.explain(no_random, torch.ones(2, 4, requires_grad=True))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    for f in (fn, no_random):
        fast = framejit.jit(f, backend=backend)
        for seed in range(3):
            results = []
            for g in (f, fast):
                torch.manual_seed(seed)
                x = torch.ones(2, 4, requires_grad=True)
                g(x).backward()
                results.append((x.grad, torch.rand(3)))  # and the next random numbers
            torch.testing.assert_close(results[0][0], results[1][0])
            torch.testing.assert_close(results[0][1], results[1][1])
