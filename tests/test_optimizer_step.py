"""Optimizer steps inside compiled functions (`frontend/optimizers.py`).

Each case trains the same model twice from the same seed, eagerly and with a jitted step, and
compares losses, parameters and `opt.state_dict()` exactly (`aot_eager` keeps torch's ops
undecomposed, so Adam's `lerp_`/`addcmul_` round as eager's). With
`config.capture_optimizer_steps` on (the fixture; it is off by default), the steps of SGD (with
or without momentum), Adam and AdamW are captured into the graph from their second call on (the
first creates the state, a break); `zero_grad` stays a break when it has gradients to drop.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import framejit
from framejit.testing import CompileCounter

STEPS = 5

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov": lambda p: torch.optim.SGD(
        p, lr=0.1, momentum=0.9, weight_decay=1e-2, nesterov=True, dampening=0.0
    ),
    "adam": lambda p: torch.optim.Adam(p),
    "adamw": lambda p: torch.optim.AdamW(p),
    "adam_amsgrad": lambda p: torch.optim.Adam(
        p, lr=1e-2, amsgrad=True, weight_decay=1e-2, maximize=True
    ),
}
CAPTURED = ("sgd", "sgd_momentum", "sgd_nesterov", "adam", "adamw", "adam_amsgrad")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(framejit.config, "capture_optimizer_steps", True)  # off by default
    framejit.reset()
    yield
    framejit.reset()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _data(n: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(5, 8, generator=g), torch.randint(0, 4, (5,), generator=g)) for _ in range(n)
    ]


def _pair(kind: str) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, torch.optim.Optimizer]:
    model = _model()
    twin = copy.deepcopy(model)
    return model, OPTIMIZERS[kind](model.parameters()), twin, OPTIMIZERS[kind](twin.parameters())


def _assert_same_training(
    model: nn.Module, opt: torch.optim.Optimizer, twin: nn.Module, twin_opt: torch.optim.Optimizer
) -> None:
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p, q)
    expected, got = opt.state_dict(), twin_opt.state_dict()
    assert expected["param_groups"] == got["param_groups"]
    assert expected["state"].keys() == got["state"].keys()
    for key, state in expected["state"].items():
        assert state.keys() == got["state"][key].keys()
        for name, value in state.items():
            assert torch.equal(value, got["state"][key][name]), (key, name)


def _eager_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _break_reasons(fn: Callable[[], Any]) -> list[str]:
    return [r.split(" — ")[0] for r in framejit.explain(fn).break_reasons]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("kind", list(OPTIMIZERS))
def test_a_jitted_optimizer_step_matches_eager(kind: str, backend: str) -> None:
    """`@jit def step(): opt.step(); opt.zero_grad()` next to an eager forward and backward:
    parameters, optimizer state and losses equal eager's exactly, under both backends."""
    model, opt, twin, twin_opt = _pair(kind)

    @framejit.jit(backend=backend)
    def step() -> None:
        twin_opt.step()
        twin_opt.zero_grad()

    for x, y in _data():
        expected = _eager_step(model, opt, x, y)
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
        step()
        assert loss.item() == expected.item()
        assert all(p.grad is None for p in twin.parameters())
    _assert_same_training(model, opt, twin, twin_opt)


@pytest.mark.parametrize("kind", CAPTURED)
def test_the_step_is_captured_from_the_second_call(kind: str) -> None:
    """The first step creates the optimizer's state (momentum buffers, Adam's moments and step
    counters; SGD without momentum creates none) and runs as Python; from then on the step is
    one graph whose inputs are the parameters, their gradients and the state, written in
    place. Adam's step counters are read at each call as float inputs (its bias corrections
    are Python-float nodes of the graph, as eager computes them from `.item()`), so the moving
    counter costs no recompile."""
    model, opt, twin, twin_opt = _pair(kind)
    counter = CompileCounter()

    @framejit.jit(backend=counter)
    def step() -> None:
        twin_opt.step()

    for i, (x, y) in enumerate(_data()):
        expected = F.cross_entropy(model(x), y)
        expected.backward()
        opt.step()
        opt.zero_grad()
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
        if i in (0, 1):  # explain runs the step itself
            reasons = _break_reasons(step)
            first = [
                "`optimizer state created for a parameter` is not captured: mutating "
                "Python state seen outside the frame is not captured yet (the first step "
                "runs as Python; later steps are compiled)"
            ]
            assert reasons == (first if i == 0 and kind != "sgd" else [])
        else:
            step()
        twin_opt.zero_grad(set_to_none=True)
    _assert_same_training(model, opt, twin, twin_opt)
    # one graph with the update, compiled at the third step (explain compiles on its own);
    # Adam's pins the step counters there, and the fourth step compiles the one that reads them
    assert counter.frame_count == (1 if kind.startswith("sgd") else 2)
    graph = counter.graphs[-1].graph
    written = [n for n in graph.nodes if n.op == "call_method" and str(n.target).endswith("_")]
    assert written, graph


@pytest.mark.parametrize("kind", CAPTURED)
def test_a_whole_training_step_matches_eager(kind: str) -> None:
    """forward, `loss.backward()` (a break), `opt.step()` (captured in the resume function)
    and `opt.zero_grad()` (a break where it drops gradients) in one jitted function."""
    model, opt, twin, twin_opt = _pair(kind)
    counter = CompileCounter()

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
        twin_opt.step()
        twin_opt.zero_grad()
        return loss

    jitted = framejit.jit(train_step, backend=counter)
    for x, y in _data():
        expected = _eager_step(model, opt, x, y)
        assert jitted(x, y).item() == expected.item()
    _assert_same_training(model, opt, twin, twin_opt)
    x, y = _data(1)[0]
    _eager_step(model, opt, x, y)
    reasons = [r.split(" — ")[0] for r in framejit.explain(train_step, x, y).break_reasons]
    _assert_same_training(model, opt, twin, twin_opt)
    assert not any("SGD.step" in r or "optimizer state" in r for r in reasons), reasons
    assert any("backward" in r for r in reasons)
    assert any("Tensor.grad" in r for r in reasons)  # zero_grad's `p.grad = None`: a clean break


def test_an_adam_step_compiled_first_with_its_counter_pinned() -> None:
    """A jitted step whose first call already finds the state (and no dynamic shapes yet):
    the counter is pinned by value in that graph, and the next call, where it moved, compiles
    the graph that reads it at each call. Later steps reuse that one."""
    model, opt, twin, twin_opt = _pair("adam")
    counter = CompileCounter()

    @framejit.jit(backend=counter)
    def step() -> None:
        twin_opt.step()

    for i, (x, y) in enumerate(_data(8)):
        _eager_step(model, opt, x, y)
        F.cross_entropy(twin(x), y).backward()
        if i == 0:
            twin_opt.step()  # the state, created eagerly
        else:
            step()
        twin_opt.zero_grad()
    _assert_same_training(model, opt, twin, twin_opt)
    assert counter.frame_count == 2, counter.frame_count


def test_an_adam_step_counter_set_by_hand_runs_as_python() -> None:
    """A step counter that is not a whole number (state edited by hand), or one at which its
    float32 value no longer counts exactly: eager's `.item()` arithmetic runs as Python."""
    model, opt, twin, twin_opt = _pair("adam")

    @framejit.jit(backend="eager")
    def step() -> None:
        twin_opt.step()

    for i, (x, y) in enumerate(_data(6)):
        if i == 3:
            for o in (opt, twin_opt):
                for state in o.state.values():
                    state["step"].fill_(2.5)
        _eager_step(model, opt, x, y)
        F.cross_entropy(twin(x), y).backward()
        step()
        twin_opt.zero_grad()
        if i == 4:
            for o in (opt, twin_opt):
                for state in o.state.values():
                    state["step"].fill_(2.0**24)
    x, y = _data(1)[0]
    _eager_step(model, opt, x, y)
    F.cross_entropy(twin(x), y).backward()
    reasons = _break_reasons(step)  # explain runs the step
    twin_opt.zero_grad()
    _assert_same_training(model, opt, twin, twin_opt)
    assert any("a step counter of 16777216.0" in r for r in reasons), reasons


@pytest.mark.parametrize("kind", ["sgd_momentum", "adam_amsgrad"])
def test_where_torch_would_pick_foreach_the_for_loop_is_traced(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `foreach` left to torch, eager picks its foreach update for CUDA parameters (made
    to pick it here for the CPU ones); the captured step traces the for-loop update, whose
    values are the same."""
    from torch.optim import optimizer

    monkeypatch.setattr(optimizer, "_get_foreach_kernels_supported_devices", lambda: ["cpu"])
    model, opt, twin, twin_opt = _pair(kind)
    counter = CompileCounter()

    @framejit.jit(backend=counter)
    def step() -> None:
        twin_opt.step()

    for x, y in _data():
        _eager_step(model, opt, x, y)
        F.cross_entropy(twin(x), y).backward()
        step()
        twin_opt.zero_grad()
    _assert_same_training(model, opt, twin, twin_opt)
    assert counter.frame_count >= 1
    graph = counter.graphs[-1].graph
    assert not any("_foreach" in str(n.target) for n in graph.nodes), graph


def test_adams_foreach_update_runs_as_python() -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), foreach=True)
    F.cross_entropy(model(_data(1)[0][0]), _data(1)[0][1]).backward()
    reasons = _break_reasons(lambda: opt.step())
    assert len(reasons) == 1 and "runs as Python" in reasons[0], reasons


def test_options_that_take_another_path_run_as_python() -> None:
    model = _model()
    for options in ({"foreach": True}, {"differentiable": True}):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, **options)
        reasons = _break_reasons(lambda: opt.step())  # noqa: B023
        assert len(reasons) == 1 and "runs as Python" in reasons[0], (options, reasons)


def test_an_lr_scheduler_changing_lr_every_step() -> None:
    """The scheduler wraps `opt.step` (its wrapper is traced). The lr changes every step: the
    first change makes it a symbolic float input (automatic dynamic), and SGD's `alpha=-lr`
    keeps it symbolic (a negation node in the graph), so the steps share one graph: a few
    compiles, not one per step. Results equal eager's throughout."""
    model, opt, twin, twin_opt = _pair("sgd_momentum")
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)
    twin_sched = torch.optim.lr_scheduler.ExponentialLR(twin_opt, 0.9)
    counter = CompileCounter()

    @framejit.jit(backend=counter)
    def step() -> None:
        twin_opt.step()

    steps = 14
    for x, y in _data(steps):
        expected = F.cross_entropy(model(x), y)
        expected.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
        step()
        twin_opt.zero_grad()
        twin_sched.step()
        assert loss.item() == expected.item()
    _assert_same_training(model, opt, twin, twin_opt)
    assert twin_sched.state_dict() == sched.state_dict()
    assert counter.frame_count <= 3, counter.frame_count


def test_a_constant_lr_with_a_scheduler_compiles_once() -> None:
    """A scheduler whose lr does not change (StepLR before its step) costs no recompile."""
    model, opt, twin, twin_opt = _pair("sgd_momentum")
    torch.optim.lr_scheduler.StepLR(opt, step_size=100)
    twin_sched = torch.optim.lr_scheduler.StepLR(twin_opt, step_size=100)
    counter = CompileCounter()

    @framejit.jit(backend=counter)
    def step() -> None:
        twin_opt.step()

    for x, y in _data():
        _eager_step(model, opt, x, y)
        F.cross_entropy(twin(x), y).backward()
        step()
        twin_opt.zero_grad()
        twin_sched.step()
    _assert_same_training(model, opt, twin, twin_opt)
    assert counter.frame_count == 1
    assert twin_opt._opt_called is True  # the scheduler's wrapper's write, replayed


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_state_dict_round_trip_after_compiled_steps(backend: str) -> None:
    """Save the state after compiled steps, load it into a new optimizer (new state tensors,
    same parameters): the compiled step reads the loaded state, as eager does."""
    model, opt, twin, twin_opt = _pair("sgd_momentum")
    holder = {"opt": twin_opt}

    @framejit.jit(backend=backend)
    def step() -> None:
        holder["opt"].step()

    data = _data(2 * STEPS)
    for x, y in data[:STEPS]:
        _eager_step(model, opt, x, y)
        F.cross_entropy(twin(x), y).backward()
        step()
        twin_opt.zero_grad()
    saved = copy.deepcopy(twin_opt.state_dict())
    before = copy.deepcopy(saved)
    loaded = OPTIMIZERS["sgd_momentum"](twin.parameters())
    loaded.load_state_dict(saved)
    holder["opt"] = loaded
    for x, y in data[STEPS:]:
        _eager_step(model, opt, x, y)
        F.cross_entropy(twin(x), y).backward()
        step()
        loaded.zero_grad()
    _assert_same_training(model, opt, twin, loaded)
    # the old optimizer's buffers were left alone after the switch
    assert before["state"].keys() == twin_opt.state_dict()["state"].keys()
    for key, state in before["state"].items():
        for name, value in state.items():
            assert torch.equal(value, twin_opt.state_dict()["state"][key][name])


def test_a_parameter_without_a_gradient_is_skipped() -> None:
    """Parameters whose `.grad` is None are left alone (guarded: `p.grad is None`)."""
    model, opt, twin, twin_opt = _pair("sgd_momentum")

    @framejit.jit(backend="eager")
    def step() -> None:
        twin_opt.step()

    for i, (x, y) in enumerate(_data()):
        for m in (model, twin):
            loss = F.cross_entropy(m(x), y) if i % 2 else m[0].weight.sum()
            loss.backward()
        opt.step()
        opt.zero_grad()
        step()
        twin_opt.zero_grad()
    _assert_same_training(model, opt, twin, twin_opt)


def test_by_default_the_step_runs_as_python_at_a_break(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framejit.config, "capture_optimizer_steps", False)
    model, opt, twin, twin_opt = _pair("sgd_momentum")

    def step() -> None:
        twin_opt.step()
        twin_opt.zero_grad()

    jitted = framejit.jit(step, backend="eager")
    for x, y in _data():
        expected = _eager_step(model, opt, x, y)
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
        jitted()
        assert loss.item() == expected.item()
    _assert_same_training(model, opt, twin, twin_opt)
    reasons = _break_reasons(step)
    assert any("SGD.step" in r for r in reasons), reasons


def test_the_step_is_captured_after_torch_compile_has_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile, once used in the process, wraps every optimizer's `_init_group` in its
    own disable wrapper (done here the way it does it); the step under it is still traced."""
    import torch._dynamo

    original = torch.optim.SGD._init_group
    monkeypatch.setattr(torch.optim.SGD, "_init_group", torch._dynamo.disable(original))
    model, opt, twin, twin_opt = _pair("sgd_momentum")
    counter = CompileCounter()

    @framejit.jit(backend=counter)
    def step() -> None:
        twin_opt.step()

    for x, y in _data():
        expected = _eager_step(model, opt, x, y)
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
        step()
        twin_opt.zero_grad()
        assert loss.item() == expected.item()
    _assert_same_training(model, opt, twin, twin_opt)
    assert counter.frame_count == 1  # the first step (state created) runs as Python
    assert _break_reasons(step) == []
