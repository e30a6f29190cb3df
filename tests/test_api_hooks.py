"""The JitModule wrapper is invisible, and user torch modes see what eager shows them.

Each test runs a scenario twice, on the plain model or function and on framejit's, and compares
what the program observes: results, hook calls (and which module they saw), state_dict keys,
the calls a TorchFunctionMode or TorchDispatchMode sees.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
from framejit.frontend import hook
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.nn.modules import module as nn_module
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import framejit
from framejit.testing import CompileCounter

BACKENDS = ["eager", "aot_eager"]


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def both(scenario: Callable[[nn.Module], Any], backend: str = "eager") -> tuple[Any, Any]:
    """`scenario` on a fresh model, and on framejit's wrapper of another fresh model."""
    eager = scenario(make_model())
    jitted = scenario(framejit.jit(make_model(), backend=backend))
    return eager, jitted


def names(log: Any) -> Any:
    """A hook log with modules replaced by their class names (the objects differ per run)."""
    if isinstance(log, (list, tuple)):
        return type(log)(names(x) for x in log)
    return type(log).__name__ if isinstance(log, nn.Module) else log


# --- hooks registered through the wrapper -----------------------------------------------------


def test_state_dict_hooks_registered_on_the_wrapper_run() -> None:
    def scenario(m: nn.Module) -> list[Any]:
        log: list[Any] = []
        m.register_state_dict_pre_hook(lambda mod, prefix, keep: log.append(("sd_pre", mod)))
        m.register_state_dict_post_hook(lambda mod, sd, prefix, meta: log.append(("sd", mod)))
        m._register_state_dict_hook(lambda mod, sd, prefix, meta: log.append(("old_sd", mod)))
        m.register_load_state_dict_pre_hook(lambda mod, *a: log.append(("load_pre", mod)))
        m.register_load_state_dict_post_hook(lambda mod, keys: log.append(("load", mod)))
        for _ in range(2):
            state = m.state_dict()
            log.append(list(state))
            log.append(str(m.load_state_dict(state)))
        return names(log)

    eager, jitted = both(scenario)
    assert jitted == eager
    assert ("sd_pre", "Sequential") in eager  # the hooks saw the model, not a wrapper


def test_forward_hooks_registered_on_the_wrapper_run_once_on_each_call() -> None:
    def scenario(m: nn.Module) -> list[Any]:
        log: list[Any] = []
        x = torch.ones(2, 3, requires_grad=True)
        m.register_forward_pre_hook(lambda mod, args: log.append(("pre", mod)))
        m.register_forward_pre_hook(
            lambda mod, args, kwargs: log.append(("pre_kw", mod)), with_kwargs=True
        )
        handle = m.register_forward_hook(lambda mod, args, out: out * 2)
        m.register_forward_hook(lambda mod, args, out: log.append(("post", mod)))
        for _ in range(2):
            log.append(m(x).sum().item())
        handle.remove()
        log.append(m(x).sum().item())
        return names(log)

    for backend in BACKENDS:
        eager, jitted = both(scenario, backend)
        assert jitted == eager


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_hooks_registered_on_the_wrapper_run(backend: str) -> None:
    def scenario(m: nn.Module) -> list[Any]:
        log: list[Any] = []
        m.register_full_backward_pre_hook(lambda mod, grad_out: log.append(("bw_pre", mod)))
        m.register_full_backward_hook(lambda mod, gin, gout: log.append(("bw", mod)))
        x = torch.ones(2, 3, requires_grad=True)
        for _ in range(2):
            m(x).sum().backward()
            log.append(x.grad.sum().item())
        return names(log)

    eager, jitted = both(scenario, backend)
    assert jitted == eager


def test_hooks_of_the_original_and_of_the_wrapper_are_the_same_hooks() -> None:
    model = make_model()
    fast = framejit.jit(model, backend="eager")
    seen: list[nn.Module] = []
    handle = fast.register_forward_hook(lambda mod, args, out: seen.append(mod))
    x = torch.ones(1, 3)
    model(x)
    fast(x)
    assert seen == [model, model]
    handle.remove()
    fast(x)
    model(x)
    assert len(seen) == 2 and not model._forward_hooks


# --- global module hooks ----------------------------------------------------------------------


GLOBAL_HOOKS = {
    "forward": lambda log: nn_module.register_module_forward_hook(
        lambda mod, args, out: log.append(("forward", mod))
    ),
    "forward_pre": lambda log: nn_module.register_module_forward_pre_hook(
        lambda mod, args: log.append(("forward_pre", mod))
    ),
    "full_backward": lambda log: nn_module.register_module_full_backward_hook(
        lambda mod, gin, gout: log.append(("full_backward", mod))
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(GLOBAL_HOOKS))
@pytest.mark.parametrize("own_hook", [False, True])
def test_global_module_hooks_see_the_model_not_the_wrapper(
    kind: str, own_hook: bool, backend: str
) -> None:
    def scenario(m: nn.Module) -> list[Any]:
        log: list[Any] = []
        if own_hook:
            m.register_forward_hook(lambda mod, args, out: log.append(("own", mod)))
        x = torch.ones(2, 3, requires_grad=True)
        log.append(m(x).sum().item())  # compiled before the global hook exists
        handle = GLOBAL_HOOKS[kind](log)
        try:
            for _ in range(2):
                out = m(x)
                out.sum().backward()
                log.append(out.sum().item())
        finally:
            handle.remove()
        log.append(m(x).sum().item())  # and after it is gone
        return names(log)

    eager, jitted = both(scenario, backend)
    assert jitted == eager
    assert "JitModule" not in str(jitted)


def test_global_hooks_see_the_wrapper_of_a_submodule_as_the_submodule() -> None:
    """A compiled submodule inside a plain parent: the parent's call runs the child's call."""

    def scenario(wrap: bool) -> list[Any]:
        model = make_model()
        if wrap:
            model[0] = framejit.jit(model[0], backend="eager")
        log: list[Any] = []
        handle = GLOBAL_HOOKS["forward"](log)
        try:
            model(torch.ones(1, 3))
            model(torch.ones(1, 3))
        finally:
            handle.remove()
        return names(log)

    assert scenario(True) == scenario(False)


@pytest.mark.parametrize("global_hook", [False, True])
def test_a_jit_module_called_from_a_compiled_function(global_hook: bool) -> None:
    def scenario(wrap: bool) -> list[Any]:
        model = make_model()
        log: list[Any] = []
        model.register_forward_hook(lambda mod, args, out: log.append(("own", mod)) or out * 2)
        inner = framejit.jit(model, backend="eager") if wrap else model

        def program(x: torch.Tensor) -> torch.Tensor:
            return inner(x) + 1

        run = framejit.jit(program, backend="eager") if wrap else program
        handle = GLOBAL_HOOKS["forward"](log) if global_hook else None
        try:
            for _ in range(2):
                log.append(run(torch.ones(1, 3)).sum().item())
        finally:
            if handle is not None:
                handle.remove()
        # the own hook sees the model itself (not a wrapper)
        return [(e[0], e[1] is model) if isinstance(e, tuple) else e for e in log]

    assert scenario(True) == scenario(False)


# --- the rest of the nn.Module API ------------------------------------------------------------


def test_registering_state_through_the_wrapper_lands_on_the_original() -> None:
    def scenario(m: nn.Module) -> list[Any]:
        m.register_buffer("scale", torch.full((2,), 3.0))
        m.register_buffer("scratch", torch.zeros(1), persistent=False)
        m.register_parameter("extra", nn.Parameter(torch.ones(2)))
        m.add_module("head", nn.Linear(2, 2))
        m.register_module("tail", nn.Identity())
        m.tag = "set through"
        assert m.get_parameter("extra") is m.extra and m.get_buffer("scale") is m.scale
        assert m.get_submodule("head") is m.head
        return [list(m.state_dict()), [n for n, _ in m.named_modules()], m.tag]

    eager, jitted = both(scenario)
    assert jitted == eager
    model = make_model()
    fast = framejit.jit(model, backend="eager")
    fast.register_buffer("scale", torch.ones(1))
    assert model.scale is fast.scale
    del fast.scale
    assert not hasattr(model, "scale") and not hasattr(fast, "scale")


def identity(item: Any) -> Any:
    return (item[0], id(item[1])) if isinstance(item, tuple) else id(item)


def test_iterators_yield_the_original_modules() -> None:
    model = make_model()
    fast = framejit.jit(model, backend="eager")
    for method in (
        "modules",
        "named_modules",
        "children",
        "named_children",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
    ):
        got, want = list(getattr(fast, method)()), list(getattr(model, method)())
        assert [identity(g) for g in got] == [identity(w) for w in want], method
    assert next(fast.modules()) is model


def test_apply_visits_the_model_and_returns_the_wrapper() -> None:
    def scenario(m: nn.Module) -> tuple[list[str], bool]:
        seen: list[str] = []
        returned = m.apply(lambda mod: seen.append(type(mod).__name__))
        return seen, returned is m

    eager, jitted = both(scenario)
    assert jitted == eager == (["Linear", "ReLU", "Linear", "Sequential"], True)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.to(torch.float64),
        lambda m: m.double(),
        lambda m: m.half().float(),
        lambda m: m.type(torch.float64),
        lambda m: m.cpu(),
        lambda m: m.requires_grad_(False),
        lambda m: m.train(False),
        lambda m: m.eval().train(),
        lambda m: m.share_memory(),
        lambda m: m._apply(lambda t: t * 2),
    ],
)
def test_methods_that_return_the_module_return_the_wrapper(call: Callable[[Any], Any]) -> None:
    def scenario(m: nn.Module) -> list[Any]:
        returned = call(m)
        x = torch.ones(2, 3, dtype=next(m.parameters()).dtype)
        state = m.state_dict(keep_vars=True)
        state = [(k, v.dtype, v.requires_grad, v.sum().item()) for k, v in state.items()]
        return [returned is m, m.training, next(m.children()).training, m(x).tolist(), state]

    eager, jitted = both(scenario)
    assert jitted == eager


def test_zero_grad_reaches_the_original() -> None:
    def scenario(m: nn.Module) -> list[Any]:
        m(torch.ones(2, 3)).sum().backward()
        m.zero_grad(set_to_none=False)
        zeros = [float(p.grad.abs().sum()) for p in m.parameters()]
        m.zero_grad()
        return [zeros, [p.grad for p in m.parameters()]]

    eager, jitted = both(scenario)
    assert jitted == eager


def test_overridden_module_methods_of_the_original_are_used() -> None:
    class Custom(nn.Linear):
        def state_dict(self, *args: Any, **kwargs: Any) -> Any:
            state = super().state_dict(*args, **kwargs)
            state["custom"] = torch.zeros(1)
            return state

        def train(self, mode: bool = True) -> Custom:
            self.trained_with = mode
            return super().train(mode)

    model = Custom(2, 2)
    fast = framejit.jit(model, backend="eager")
    assert "custom" in fast.state_dict()
    assert fast.eval() is fast and model.trained_with is False


def test_attribute_passthrough_dir_and_repr() -> None:
    model = make_model()
    model.note = "hello"
    fast = framejit.jit(model, backend="eager")
    assert fast.note == "hello"
    fast.note = "changed"
    assert model.note == "changed"
    del fast.note
    assert not hasattr(model, "note")
    with pytest.raises(AttributeError):
        fast.note  # noqa: B018
    fast.training = False
    assert model.training is False and fast.training is False
    assert set(dir(model)) <= set(dir(fast)) and "state_dict" in dir(fast)
    assert repr(model) in repr(fast)


def test_copies_and_pickles_are_independent_wrappers() -> None:
    model = make_model()
    fast = framejit.jit(model, backend="eager")
    x = torch.ones(2, 3)
    want = model(x)
    for copied in (copy.deepcopy(fast), pickle.loads(pickle.dumps(fast))):
        assert isinstance(copied, framejit.JitModule)
        assert copied._orig_mod is not model
        torch.testing.assert_close(copied(x), want)
        with torch.no_grad():
            copied[0].weight.zero_()
        torch.testing.assert_close(fast(x), want)  # the original is untouched
    shallow = copy.copy(fast)
    assert isinstance(shallow, framejit.JitModule) and shallow[0] is model[0]
    torch.testing.assert_close(shallow(x), want)
    # a model holding the wrapper and the original: deepcopy keeps them one model
    pair = nn.ModuleDict({"fast": fast})
    pair.plain = model
    pair_copy = copy.deepcopy(pair)
    assert pair_copy.fast._orig_mod is pair_copy.plain


def test_a_parent_sees_a_wrapped_child_as_the_child() -> None:
    def scenario(wrap: bool) -> list[Any]:
        model = make_model()
        if wrap:
            model[2] = framejit.jit(model[2], backend="eager")
        visited: list[str] = []
        model.apply(lambda m: visited.append(type(m).__name__))
        model.to(torch.float64)
        state = model.state_dict()
        model.load_state_dict(state)
        x = torch.ones(1, 3, dtype=torch.float64)
        return [visited, list(state), model(x).tolist()]

    assert scenario(True) == scenario(False)


# --- user torch modes -------------------------------------------------------------------------


class LogCalls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class ScaleProducts(TorchFunctionMode):
    """Changes results: every product comes out ten times larger."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        return out * 10 if "mul" in getattr(func, "__name__", "") else out


class LogAten(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


LINEAR = nn.Linear(3, 3)


def small_program(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (x + 1) * 2, LINEAR(x)


def calls_under(mode_type: type, fn: Callable[..., Any], *args: Any) -> list[str]:
    mode = mode_type()
    with mode:
        fn(*args)
    return mode.calls


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode_type", [LogCalls, LogAten])
def test_a_user_mode_sees_only_the_programs_own_calls(backend: str, mode_type: type) -> None:
    x = torch.ones(3)
    want = calls_under(mode_type, small_program, x)
    jitted = framejit.jit(small_program, backend=backend)
    assert calls_under(mode_type, jitted, x) == want  # first call: nothing compiles
    jitted(x)  # compiled outside the mode
    assert calls_under(mode_type, jitted, x) == want  # the compiled entry does not run
    torch.testing.assert_close(jitted(x), small_program(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_result_changing_mode_applies_once(backend: str) -> None:
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    x = torch.ones(3)
    with ScaleProducts():
        want = double(x)
    jitted = framejit.jit(double, backend=backend)
    for _ in range(2):
        with ScaleProducts():
            torch.testing.assert_close(jitted(x), want)
    torch.testing.assert_close(jitted(x), x * 2)


def test_a_user_mode_around_a_jit_module() -> None:
    x = torch.ones(2, 3)
    eager, jitted = both(lambda m: calls_under(LogCalls, m, x))
    assert jitted == eager and eager


def test_the_device_context_mode_still_compiles() -> None:
    def makes(t: torch.Tensor) -> tuple[str, torch.Tensor]:
        return torch.empty(2).device.type, t * 2

    counter = CompileCounter()
    jitted = framejit.jit(makes, backend=counter)
    x = torch.ones(2)
    with torch.device("meta"):
        assert jitted(x)[0] == "meta"
        assert jitted(x)[0] == "meta"
        compiled = counter.frame_count
        assert compiled == 1
        # a user mode on top of it: this call runs as Python, the mode sees eager's calls
        want = calls_under(LogCalls, makes, x)
        assert calls_under(LogCalls, jitted, x) == want
    assert counter.frame_count == compiled
    assert jitted(x)[0] == "cpu"


def test_a_jit_function_called_inside_a_dispatch_handler_runs_as_python() -> None:
    """A mode's handler runs with the mode off the stack, in the middle of an op: compiling
    there would trace inside that op's dispatch."""

    def helper(t: torch.Tensor) -> torch.Tensor:
        return (t * 2).softmax(-1)

    class CallsHelper(TorchDispatchMode):
        def __init__(self, fn: Callable[..., Any]) -> None:
            super().__init__()
            self.fn = fn
            self.results: list[torch.Tensor] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.add.Tensor:
                self.results.append(self.fn(out))
            return out

    x = torch.ones(3)
    counter = CompileCounter()
    jitted = framejit.jit(helper, backend=counter)
    results = []
    for fn in (helper, jitted):
        mode = CallsHelper(fn)
        with mode:
            x + 1
        results.append(mode.results)
    torch.testing.assert_close(results[1], results[0])
    assert counter.frame_count == 0
    assert not hook.inside_torch_dispatch()


def test_which_modes_count_as_the_users() -> None:
    assert not hook.user_mode_active()
    with torch.device("meta"):
        assert not hook.user_mode_active()
        with LogCalls():
            assert hook.user_mode_active()
    with LogAten():
        assert hook.user_mode_active()
    torch.set_default_device("cpu")
    try:
        assert not hook.user_mode_active()
    finally:
        torch.set_default_device(None)
    with FakeTensorMode():
        assert hook.user_mode_active()
    assert not hook.user_mode_active()


def test_a_call_under_fake_tensor_mode_runs_as_python() -> None:
    x = torch.ones(2, 3)
    model = make_model()
    fast = framejit.jit(model, backend="eager")
    fast(x)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = mode.from_tensor(x)
        for m in (fast, model):
            out = m(fake)
            assert isinstance(out, FakeTensor) and out.shape == (2, 2)


# --- the same in whole-script mode ------------------------------------------------------------


needs_hook = pytest.mark.skipif(not hook.available(), reason=hook.unavailable_reason())


def hooked_program(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.add_(1)  # the AOT stage's graph has an out-of-place add here: a dispatch mode would see it
    return (y * 2).softmax(-1)


def entries_of(fn: Callable[..., Any]) -> int:
    """How many compiled entries the frame hook holds for `fn`'s code."""
    state = hook.require().get_code_state(fn.__code__)
    return len(state.entries) if state is not None and state is not ... else 0


@needs_hook
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode_type", [LogCalls, LogAten])
def test_whole_script_mode_leaves_a_user_mode_alone(mode_type: type, backend: str) -> None:
    x = torch.ones(3)
    want = calls_under(mode_type, hooked_program, x)
    with framejit.enabled(backend=backend):
        first = calls_under(mode_type, hooked_program, x)  # nothing compiles under the mode
        assert entries_of(hooked_program) == 0
        hooked_program(x)
        hooked_program(x)
        assert entries_of(hooked_program) == 1
        again = calls_under(mode_type, hooked_program, x)  # the compiled entry does not run
        torch.testing.assert_close(hooked_program(x), ((x + 1) * 2).softmax(-1))
    assert first == again == want
    assert entries_of(hooked_program) == 1  # and nothing compiled for the mode's call


@needs_hook
def test_whole_script_mode_under_the_device_context_and_a_user_mode() -> None:
    def makes(t: torch.Tensor) -> tuple[str, torch.Tensor]:
        return torch.empty(2).device.type, t * 2

    x = torch.ones(2)
    with torch.device("meta"):
        want = calls_under(LogCalls, makes, x)
        with ScaleProducts():
            scaled = makes(x)
    with framejit.enabled(backend="eager"), torch.device("meta"):
        assert makes(x)[0] == "meta"
        assert makes(x)[0] == "meta"
        assert entries_of(makes) == 1  # torch's device context still compiles
        assert calls_under(LogCalls, makes, x) == want
        with ScaleProducts():
            got = makes(x)
    assert got[0] == scaled[0] == "meta"
    torch.testing.assert_close(got[1], scaled[1])
    assert entries_of(makes) == 1


def test_container_methods_of_the_original() -> None:
    def scenario(m: nn.Module) -> list[Any]:
        first = m[0]
        m[1] = nn.Tanh()
        return [
            type(first).__name__,
            len(m),
            [type(c).__name__ for c in m],
            [type(c).__name__ for c in reversed(m)],
            type(m[1:]).__name__,
            bool(m),
        ]

    eager, jitted = both(scenario)
    assert jitted == eager
    listed = framejit.jit(nn.ModuleList([nn.Linear(2, 2)]), backend="eager")
    listed.append(nn.ReLU())
    listed += [nn.Identity()]
    assert isinstance(listed, framejit.JitModule) and len(listed) == 3
    assert "0" in framejit.jit(nn.ModuleDict({"0": nn.ReLU()}), backend="eager")
    assert not framejit.jit(nn.Sequential(), backend="eager")  # empty, as in eager
    single = framejit.jit(nn.Linear(2, 2), backend="eager")
    assert single and not hasattr(type(single), "__len__")
    with pytest.raises(TypeError, match="not subscriptable"):
        single[0]  # noqa: B018


# --- a jit function or module called from compiled code ----------------------------------------


@framejit.jit
def _scaled_gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x) * 2


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = framejit.jit(nn.Linear(4, 4))

    @framejit.jit
    def act(self, x: torch.Tensor) -> torch.Tensor:
        return _scaled_gelu(x) + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.inner(x))


def test_jit_functions_and_modules_inside_compiled_code_are_traced_into_one_graph() -> None:
    torch.manual_seed(0)
    block = _Block()
    x = torch.randn(2, 4)
    explained = framejit.explain(block, x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained
    fast = framejit.jit(block, backend="aot_eager")
    got = fast(x)
    got.sum().backward()
    grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    want = torch.nn.functional.gelu(block.inner._orig_mod(x)) * 2 + 1
    want.sum().backward()
    torch.testing.assert_close(got, want)
    for g, p in zip(grads, block.parameters()):
        torch.testing.assert_close(g, p.grad)
    seen = []
    block.inner.register_forward_hook(lambda m, i, o: seen.append(type(m).__name__))
    torch.testing.assert_close(fast(x), want)
    assert seen == ["Linear"]  # the wrapped module's own hook, with the original


# --- keyword and always-called hooks on modules called inside a compiled function -------------


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, scale: float = 1.0, shift: Any = None) -> torch.Tensor:
        y = self.lin(x) * scale
        return y if shift is None else y + shift


def _scale_in_place(mod: nn.Module, args: Any, kwargs: dict) -> None:
    kwargs["scale"] = 2.0


def _replace_args(mod: nn.Module, args: Any, kwargs: dict) -> Any:
    return (args[0] * 3,), {**kwargs, "shift": torch.ones(3)}


def _minus_scale(mod: nn.Module, args: Any, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
    return out - kwargs.get("scale", 0.0)


HOOKED = {
    "kwargs_in_place": lambda m: (
        m.register_forward_pre_hook(_scale_in_place, with_kwargs=True),
        m.register_forward_hook(_minus_scale, with_kwargs=True),
    ),
    "kwargs_replaced_always_called": lambda m: (
        m.register_forward_pre_hook(_replace_args, with_kwargs=True),
        m.register_forward_hook(_minus_scale, with_kwargs=True, always_call=True),
    ),
    "always_called": lambda m: (
        m.register_forward_hook(lambda mod, a, out: out * 2, always_call=True),
        m.register_forward_pre_hook(lambda mod, a: (a[0] + 1,)),
    ),
}


@pytest.mark.parametrize("name", sorted(HOOKED))
def test_keyword_and_always_called_module_hooks_are_captured(name: str) -> None:
    """Hooks registered `with_kwargs=True` (they get the call's keyword arguments, may change
    them in place or return new `(args, kwargs)`; a forward hook gets them too) and
    `always_call=True` run inside the graph, as nn.Module's call runs them: one graph, eager's
    values. Registering another hook later compiles again."""
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        inner = _Scaled()
        HOOKED[name](inner)

        def f(x: torch.Tensor) -> torch.Tensor:
            return inner(x, scale=0.5) + inner(x)  # noqa: B023

        counter = CompileCounter()
        fn = framejit.jit(f, backend=counter) if compiled else f
        x = torch.randn(2, 3)
        out = [fn(x)]
        inner.register_forward_hook(lambda mod, a, k, o: o + 10, with_kwargs=True)
        out.append(fn(x))
        results.append(out)
        if compiled:
            assert counter.frame_count == 2, counter.frame_count  # no break, one recompile
    for got, want in zip(results[1], results[0]):
        assert torch.equal(got, want)
