"""The public face: jit on every kind of callable, its option checks, backends, fullgraph,
FRAMEJIT_DISABLE, explain and disable. Results are compared with eager PyTorch."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import types
from typing import Any

import pytest
import torch
from framejit.backend import registry
from framejit.frontend.errors import FullGraphError
from torch import nn

import framejit
from framejit.testing import CompileCounter


def assert_same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.requires_grad == want.requires_grad
        torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=0)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want


def line_of(fn: Any, text: str) -> int:
    """The line number of the first line of `fn`'s source containing `text`."""
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in {fn.__name__}")


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """register_backend in a test must not leak into the others."""
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))


def mul_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y).relu() + 1


def prints(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    print("inside prints")
    return y + 1


# --- jit on each kind of callable ------------------------------------------------------------


def test_jit_bare_decorator() -> None:
    @framejit.jit
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.cos() * 2

    assert isinstance(fn, framejit.JitFunction)
    assert fn.__name__ == "fn" and fn.__wrapped__ is not None
    x = torch.randn(3)
    assert_same(fn(x), x.cos() * 2)
    assert_same(fn(x), x.cos() * 2)
    assert len(fn.cache.entries) == 1


def test_jit_decorator_with_options() -> None:
    counter = CompileCounter()

    @framejit.jit(backend=counter, fullgraph=True, mode=None, dynamic=False)
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.cos() * 2

    x = torch.randn(3)
    assert_same(fn(x), x.cos() * 2)
    assert_same(fn(x), x.cos() * 2)
    assert counter.frame_count == 1
    assert counter.op_count == 2


@pytest.mark.parametrize("backend", ["eager", "auto", None])
def test_jit_named_backends(backend: str | None) -> None:
    jitted = framejit.jit(mul_add, backend=backend)
    x, y = torch.randn(3), torch.randn(3)
    assert_same(jitted(x, y), mul_add(x, y))
    assert len(jitted.cache.entries) == 1


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead", "max-autotune"])
def test_jit_accepts_every_mode(mode: str | None) -> None:
    jitted = framejit.jit(mul_add, backend="eager", mode=mode)
    x, y = torch.randn(3), torch.randn(3)
    assert_same(jitted(x, y), mul_add(x, y))


def test_jit_function_with_every_kind_of_parameter() -> None:
    def fn(x: torch.Tensor, /, y: Any, *args: Any, k: int = 1, **kw: Any) -> torch.Tensor:
        return x * y + k + sum(args) + sum(kw.values())

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    x = torch.randn(3)
    for args, kwargs in [
        ((x, 2), {}),
        ((x, 2, 3, 4), {"k": 5}),
        ((x,), {"y": 3, "z": 7}),
        ((x, 2), {}),
    ]:
        assert_same(jitted(*args, **kwargs), fn(*args, **kwargs))
    assert counter.frame_count == 3


def test_jit_lambda() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(lambda x: x * 2 + 1, backend=counter)
    x = torch.randn(3)
    assert_same(jitted(x), x * 2 + 1)
    assert counter.frame_count == 1


def test_jit_lambda_never_fails_the_program() -> None:
    framejit.config.raise_internal_errors = False
    jitted = framejit.jit(lambda x: x * 2 + 1, backend="eager")
    x = torch.randn(3)
    assert_same(jitted(x), x * 2 + 1)


class Affine:
    def __init__(self) -> None:
        self.scale = 3.0

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.scale


def test_jit_bound_method() -> None:
    obj = Affine()
    counter = CompileCounter()
    jitted = framejit.jit(obj.apply, backend=counter)
    assert isinstance(jitted, types.MethodType) and jitted.__self__ is obj
    x = torch.randn(3)
    assert_same(jitted(x), obj.apply(x))
    assert_same(jitted(x), obj.apply(x))
    assert counter.frame_count == 1
    obj.scale = 5.0  # an attribute of the bound object is guarded
    assert_same(jitted(x), obj.apply(x))
    assert counter.frame_count == 2


def test_jit_callable_object() -> None:
    obj = Affine()
    counter = CompileCounter()
    jitted = framejit.jit(obj, backend=counter)
    x = torch.randn(3)
    assert_same(jitted(x), obj(x))
    assert_same(jitted(x), obj(x))
    assert counter.frame_count == 1


def test_jit_as_method_decorator() -> None:
    class Model:
        def __init__(self, k: float) -> None:
            self.k = k

        @framejit.jit
        def run(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

    x = torch.randn(3)
    assert_same(Model(2.0).run(x), x * 2.0)
    assert_same(Model(4.0).run(x), x * 4.0)


def test_jit_of_a_jit_function_is_itself() -> None:
    jitted = framejit.jit(mul_add, backend="eager")
    assert framejit.jit(jitted) is jitted


# --- nn.Module --------------------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(8, 2)
        self.register_buffer("offset", torch.zeros(2))
        self.tag = "net"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.fc1(x).relu())) + self.offset

    def describe(self) -> str:
        return f"{self.tag}:{self.fc1.in_features}"


def test_jit_module_shares_the_original_state() -> None:
    torch.manual_seed(0)
    net = Net()
    jitted = framejit.jit(net, backend="eager")
    assert isinstance(jitted, nn.Module) and isinstance(jitted, framejit.JitModule)
    assert list(jitted.state_dict()) == list(net.state_dict())
    assert all(a is b for a, b in zip(jitted.parameters(), net.parameters()))
    assert [n for n, _ in jitted.named_parameters()] == [n for n, _ in net.named_parameters()]
    assert all(a is b for a, b in zip(jitted.buffers(), net.buffers()))
    assert jitted.fc1 is net.fc1 and jitted.offset is net.offset
    net.eval()
    jitted.eval()
    x = torch.randn(3, 4)
    assert_same(jitted(x), net(x))


def test_jit_module_train_and_eval_reach_the_original() -> None:
    net = Net()
    jitted = framejit.jit(net, backend="eager")
    assert jitted.eval() is jitted
    assert not net.training and not net.drop.training and not jitted.training
    assert jitted.train() is jitted
    assert net.training and net.drop.training and jitted.training
    jitted.train(False)
    assert not net.training and not net.fc2.training


def test_jit_module_attributes_delegate() -> None:
    net = Net()
    jitted = framejit.jit(net, backend="eager")
    assert jitted.tag == "net"
    assert jitted.describe() == "net:4"
    net.tag = "renamed"
    assert jitted.tag == "renamed"
    with pytest.raises(AttributeError):
        jitted.no_such_attribute  # noqa: B018


def test_jit_module_to_and_load_state_dict_reach_the_original() -> None:
    torch.manual_seed(0)
    net = Net().eval()
    jitted = framejit.jit(net, backend="eager")
    jitted.to(torch.float64)
    assert net.fc1.weight.dtype == torch.float64
    x = torch.randn(2, 4, dtype=torch.float64)
    assert_same(jitted(x), net(x))
    zeros = {k: torch.zeros_like(v) for k, v in jitted.state_dict().items()}
    jitted.load_state_dict(zeros)
    assert float(net.fc1.weight.detach().abs().sum()) == 0.0
    assert_same(jitted(x), net(x))


def test_jit_module_weights_are_trained_through_it() -> None:
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    reference = nn.Linear(3, 1)
    reference.load_state_dict(net.state_dict())
    jitted = framejit.jit(net, backend="eager")
    opt = torch.optim.SGD(jitted.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    for _ in range(3):
        for model, optimizer in ((jitted, opt), (reference, ref_opt)):
            optimizer.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            optimizer.step()
    torch.testing.assert_close(net.weight, reference.weight)
    torch.testing.assert_close(net.bias, reference.bias)


def test_jit_module_runs_hooks_of_the_original() -> None:
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    jitted = framejit.jit(net, backend="eager")
    x = torch.randn(2, 3)
    jitted(x)
    seen: list[int] = []
    net.register_forward_hook(lambda m, args, out: seen.append(1) or out * 0)
    assert_same(jitted(x), net(x))
    assert seen == [1, 1]


def test_jit_module_training_flag_follows_the_original() -> None:
    net = Net()
    jitted = framejit.jit(net, backend="eager")
    net.eval()
    assert jitted.training is net.training


def test_jit_module_attribute_set_through_the_wrapper() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = 2.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.scale

    mod = Scaled()
    jitted = framejit.jit(mod, backend="eager")
    x = torch.ones(2)
    jitted(x)
    jitted.scale = 4.0
    assert mod.scale == 4.0
    assert_same(jitted(x), x * 4.0)


# --- option checking --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [3, "text", torch.nn.functional, object()])
def test_jit_rejects_what_it_cannot_compile(bad: Any) -> None:
    expected = r"function, lambda, bound method, torch\.nn\.Module or a torch builtin"
    with pytest.raises(TypeError, match=expected) as info:
        framejit.jit(bad)
    assert type(bad).__name__ in str(info.value)
    with pytest.raises(TypeError, match=expected):
        framejit.jit(backend="eager")(bad)


@pytest.mark.parametrize("op", [torch.sin, torch.atan2, torch.nn.functional.relu])
def test_jit_of_a_torch_builtin_is_its_one_op(op: Any) -> None:
    """torch.sin has no bytecode: framejit compiles a function that calls it, as one graph."""
    args = (torch.randn(5),) if op is not torch.atan2 else (torch.randn(5), torch.randn(5))
    jitted = framejit.jit(op, backend="aot_eager")
    for _ in range(2):
        assert_same(jitted(*args), op(*args))
    explained = framejit.explain(op, *args)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_unknown_backend_lists_the_registered_ones() -> None:
    with pytest.raises(ValueError, match="nope") as info:
        framejit.jit(mul_add, backend="nope")
    for name in framejit.list_backends():
        assert name in str(info.value)
    assert {"eager", "auto"} <= set(framejit.list_backends())


def test_backend_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="backend"):
        framejit.jit(mul_add, backend=3)


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="fast") as info:
        framejit.jit(mul_add, mode="fast")
    assert "reduce-overhead" in str(info.value) and "max-autotune" in str(info.value)


@pytest.mark.parametrize("fullgraph", [1, "yes", None, 0.0])
def test_fullgraph_must_be_a_bool(fullgraph: Any) -> None:
    with pytest.raises(TypeError, match="fullgraph"):
        framejit.jit(mul_add, fullgraph=fullgraph)


@pytest.mark.parametrize("dynamic", ["yes", 2, [], 0.5])
def test_dynamic_must_be_none_or_a_bool(dynamic: Any) -> None:
    with pytest.raises(TypeError, match="dynamic"):
        framejit.jit(mul_add, dynamic=dynamic)


@pytest.mark.parametrize("dynamic", [1, 0, 1.0])
def test_dynamic_rejects_numbers_equal_to_a_bool(dynamic: Any) -> None:
    with pytest.raises(TypeError, match="dynamic"):
        framejit.jit(mul_add, dynamic=dynamic)


def test_options_must_be_a_dict() -> None:
    with pytest.raises(TypeError, match="options"):
        framejit.jit(mul_add, options=3)


def test_options_are_checked_before_decorating() -> None:
    with pytest.raises(ValueError, match="nope"):
        framejit.jit(backend="nope")


# --- backends ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("isolated_registry")
def test_registered_backend_is_called_and_its_callable_used() -> None:
    calls: list[tuple[Any, list[Any]]] = []
    runs: list[int] = []

    def mine(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        calls.append((gm, example_inputs))

        def run(*args: Any) -> Any:
            runs.append(len(args))
            return gm(*args)

        return run

    framejit.register_backend("mine", mine)
    assert "mine" in framejit.list_backends()
    jitted = framejit.jit(mul_add, backend="mine")
    x, y = torch.randn(3), torch.randn(3)
    assert_same(jitted(x, y), mul_add(x, y))
    assert_same(jitted(x, y), mul_add(x, y))
    assert len(calls) == 1
    gm, example_inputs = calls[0]
    assert isinstance(gm, torch.fx.GraphModule)
    assert isinstance(example_inputs, list) and len(example_inputs) == 2
    assert all(e is a for e, a in zip(example_inputs, (x, y)))  # the real tensors
    targets = [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert len(targets) == 3 and "relu" in targets
    assert runs == [2, 2]


@pytest.mark.usefixtures("isolated_registry")
def test_register_backend_as_decorator_and_errors() -> None:
    @framejit.register_backend("decorated")
    def decorated(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return gm.forward

    assert "decorated" in framejit.list_backends()
    x, y = torch.randn(3), torch.randn(3)
    assert_same(framejit.jit(mul_add, backend="decorated")(x, y), mul_add(x, y))
    with pytest.raises(TypeError, match="non-empty str"):
        framejit.register_backend("", decorated)
    with pytest.raises(TypeError, match="callable"):
        framejit.register_backend("broken", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        framejit.register_backend("eager", decorated)  # a built-in is not replaced silently
    framejit.register_backend("decorated", decorated)  # the same one again: no change


def test_backend_returning_a_non_callable() -> None:
    def broken(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return 3

    x, y = torch.randn(3), torch.randn(3)
    with pytest.raises(TypeError, match="returned int"):
        framejit.jit(mul_add, backend=broken)(x, y)
    framejit.reset()
    framejit.config.raise_internal_errors = False  # the user's program must still run
    assert_same(framejit.jit(mul_add, backend=broken)(x, y), mul_add(x, y))


# --- fullgraph --------------------------------------------------------------------------------


def test_fullgraph_break_names_the_line_and_the_construct(
    capsys: pytest.CaptureFixture[str],
) -> None:
    jitted = framejit.jit(prints, backend="eager", fullgraph=True)
    with pytest.raises(FullGraphError) as info:
        jitted(torch.randn(3))
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert "print" in message
    assert f"{__file__}:{line_of(prints, 'print(')}" in message
    assert "inside prints" not in capsys.readouterr().out  # nothing ran


def test_fullgraph_on_a_capturable_function() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(mul_add, backend=counter, fullgraph=True)
    x, y = torch.randn(3), torch.randn(3)
    assert_same(jitted(x, y), mul_add(x, y))
    assert counter.frame_count == 1


def test_without_fullgraph_the_function_breaks_its_graph(
    capsys: pytest.CaptureFixture[str],
) -> None:
    counter = CompileCounter()
    jitted = framejit.jit(prints, backend=counter)
    x = torch.randn(3)
    assert_same(jitted(x), x.sin() + 1)
    assert_same(jitted(x), x.sin() + 1)
    assert capsys.readouterr().out == "inside prints\n" * 2
    assert counter.frame_count == 2  # x.sin() before the print, y + 1 after it


# --- FRAMEJIT_DISABLE ---------------------------------------------------------------------------


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEJIT")}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_framejit_disable_returns_the_function_unchanged() -> None:
    code = """
        import torch, framejit

        def fn(x):
            return x + 1

        class Obj:
            def meth(self, x):
                return x * 2

        mod = torch.nn.Linear(2, 2)
        obj = Obj()
        assert framejit.config.disable is True
        assert framejit.jit(fn) is fn
        assert framejit.jit(backend="eager")(fn) is fn
        assert framejit.jit(mod) is mod
        assert framejit.jit(obj.meth) == obj.meth
        assert framejit.jit(fn)(torch.ones(2)).tolist() == [2.0, 2.0]
        print("ok")
    """
    result = _run_python(code, FRAMEJIT_DISABLE="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    result = _run_python("import framejit\nprint(framejit.config.disable)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# --- explain ----------------------------------------------------------------------------------


def test_explain_a_simple_function() -> None:
    x, y = torch.randn(3), torch.randn(3)
    out = framejit.explain(mul_add, x, y)
    assert isinstance(out, framejit.ExplainOutput)
    assert out.graph_count == 1
    assert out.graph_break_count == 0
    assert out.break_reasons == []
    assert len(out.graphs) == 1 and isinstance(out.graphs[0], torch.fx.GraphModule)
    assert out.ops_per_graph == [3]
    assert_same(out.graphs[0](x, y), (mul_add(x, y),))
    assert any(g.startswith("global_state(") for g in out.guards)
    assert any("check_tensor(L['x']" in g and "size=(3,)" in g for g in out.guards)
    assert any("check_tensor(L['y']" in g for g in out.guards)
    line = line_of(mul_add, "return")
    assert any(f"{__file__}:{line}" in g for g in out.guards)
    text = str(out)
    assert "graphs: 1, graph breaks: 0" in text and "relu" in text


def test_explain_a_function_that_prints(capsys: pytest.CaptureFixture[str]) -> None:
    out = framejit.explain(prints, torch.randn(3))
    assert out.graph_break_count == 1
    assert out.graph_count == 2 and out.ops_per_graph == [1, 1]
    (reason,) = out.break_reasons
    assert "print" in reason
    assert f"{__file__}:{line_of(prints, 'print(')}" in reason
    assert capsys.readouterr().out == "inside prints\n"  # explain runs the function once
    assert "print" in str(out)


def test_explain_touches_no_cache() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(mul_add, backend=counter)
    out = framejit.explain(jitted, torch.randn(3), torch.randn(3))
    assert out.graph_count == 1
    assert counter.frame_count == 0 and jitted.cache.entries == []


def test_explain_a_module_with_keyword_arguments() -> None:
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 4)
    for target in (net, framejit.jit(net, backend="eager")):
        out = framejit.explain(target, x=x)
        assert out.graph_count == 1 and out.graph_break_count == 0
        assert out.ops_per_graph[0] >= 4
        assert any("L['self']" in g and "training is False" in g for g in out.guards)


def test_explain_rejects_non_functions() -> None:
    with pytest.raises(TypeError, match="explain"):
        framejit.explain(3)


# --- disable ------------------------------------------------------------------------------------


def test_disable_as_decorator_returns_the_function() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    assert framejit.disable(fn) is fn
    assert framejit.disable()(fn) is fn
    with pytest.raises(TypeError, match="callable"):
        framejit.disable(3)


def test_disabled_function_called_from_a_jitted_one() -> None:
    @framejit.disable
    def helper(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def fn(x: torch.Tensor) -> torch.Tensor:
        return helper(x) * 2

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    x = torch.randn(3)
    assert_same(jitted(x), fn(x))
    assert counter.frame_count == 1  # the call breaks the graph: `* 2` is compiled after it
    (reason,) = framejit.explain(fn, x).break_reasons
    assert "helper" in reason and "framejit.disable" in reason
    assert f"{__file__}:{line_of(fn, 'helper(x)')}" in reason


def test_jit_of_a_disabled_function_compiles_nothing() -> None:
    @framejit.disable
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    x = torch.randn(3)
    assert_same(jitted(x), fn(x))
    assert counter.frame_count == 0


def test_bad_arguments_raise_eagers_type_error_naming_the_function() -> None:
    def takes(x: torch.Tensor, *args: Any, scale: int = 2, **kw: Any) -> torch.Tensor:
        return x * scale

    def keyword_only(x: torch.Tensor, *, k: int) -> torch.Tensor:
        return x * k

    for fn, args, kwargs in ((takes, (), {"scale": 3}), (keyword_only, (torch.ones(1), 2), {})):
        with pytest.raises(TypeError) as eager:
            fn(*args, **kwargs)
        with pytest.raises(TypeError) as compiled:
            framejit.jit(fn, backend="eager")(*args, **kwargs)
        assert str(compiled.value) == str(eager.value)
        assert fn.__name__ in str(compiled.value)


def _breaks_in_a_helper(x):
    acc = x
    for i in range(20):
        acc = acc + i
    float(acc.sum())  # a graph break inside an inlined call: the trace rewinds
    return acc


def _loops(x):
    acc = x
    for i in range(20):
        acc = acc * 1.01 + i
    return acc


def _first(x):
    return _breaks_in_a_helper(x.sin()) + 1


def _second(x):
    return _loops(x.cos()) + 1


def test_threads_compiling_at_once_get_eagers_results() -> None:
    # the translator's rewind log is process-wide: two traces at once rewound each other's
    # loop iterators, and the wrong graph stayed cached
    import sys
    import threading

    wrong: list[str] = []

    def worker(fn) -> None:
        for _ in range(6):
            jitted = framejit.jit(fn, backend="eager")  # a fresh cache: each round compiles
            x = torch.randn(3)
            for _ in range(2):
                if not torch.allclose(jitted(x), fn(x)):
                    wrong.append(fn.__name__)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(f,)) for f in (_first, _second) * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []


def test_defaults_set_on_a_jit_function_are_its_functions() -> None:
    """`jitted.__defaults__ = ...` raised AttributeError (a read-only property); it sets the
    defaults of the function it compiles, which the next call follows."""

    def scaled(x: torch.Tensor, a: int = 1, *, b: int = 2) -> torch.Tensor:
        return x * a + b

    jitted = framejit.jit(scaled, backend="eager")
    x = torch.ones(2)
    torch.testing.assert_close(jitted(x), x + 2)
    jitted.__defaults__ = (3,)
    jitted.__kwdefaults__ = {"b": 10}
    assert jitted.__defaults__ == scaled.__defaults__ == (3,)
    torch.testing.assert_close(jitted(x), x * 3 + 10)
