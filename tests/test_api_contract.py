"""The public API used the way a torch.compile user uses it (probe V): every kind of callable
torch.compile takes, modules that override `__call__` or have their forward replaced, pickling
and copying jitted functions, introspection, checked settings and options, `disable`,
`explain`, and `python -m framejit run` against plain `python`. Results are compared with eager
PyTorch, or with what plain Python does."""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from framejit.frontend import hook
from test_api import assert_same
from torch import nn

import framejit
from framejit.testing import CompileCounter

ROOT = Path(__file__).resolve().parents[1]


def python(args: list[str], cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    # the repository first, then what the tests run with (a dependency may come from there)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    environ = {**os.environ, "PYTHONPATH": path, **env}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600
    )


# --- modules whose class overrides __call__ (1) ------------------------------------------------


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return super().__call__(x * 10) + 100


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Scaled()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * 2


@pytest.mark.parametrize("make", [Scaled, Outer])
def test_a_class_call_override_runs_as_in_eager(make: Any) -> None:
    torch.manual_seed(0)
    mod, x = make(), torch.randn(3, 2)
    counter = CompileCounter()
    fast = framejit.jit(mod, backend=counter)
    for _ in range(2):
        assert_same(fast(x), mod(x))
    assert counter.frame_count == 1  # compiled, in one graph


def test_a_class_call_override_with_hooks_runs_both() -> None:
    torch.manual_seed(0)
    mod, x = Scaled(), torch.randn(3, 2)
    mod.register_forward_hook(lambda m, inputs, out: out - 1)
    assert_same(framejit.jit(mod, backend="eager")(x), mod(x))


def test_a_replaced_class_call_is_followed() -> None:
    class Twice(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return super().__call__(x) + 1

    mod, x = Twice(), torch.ones(2)
    fast = framejit.jit(mod, backend="eager")
    assert_same(fast(x), mod(x))
    Twice.__call__ = lambda self, x: nn.Module.__call__(self, x) + 50  # type: ignore[method-assign]
    assert_same(fast(x), mod(x))


@pytest.mark.skipif(not hook.available(), reason=hook.unavailable_reason())
def test_a_class_call_override_in_whole_script_mode() -> None:
    torch.manual_seed(0)
    outer, x = Outer(), torch.randn(3, 2)
    want = outer(x) - 1

    def step(model: nn.Module, t: torch.Tensor) -> torch.Tensor:
        return model(t) - 1

    with framejit.enabled(backend="eager"):
        got = [step(outer, x) for _ in range(3)]
    for g in got:
        assert_same(g, want)


# --- RNN forward (2) ---------------------------------------------------------------------------


def test_rnn_forward_runs_no_hooks() -> None:
    torch.manual_seed(0)
    rnn, x = nn.GRU(3, 4, batch_first=True), torch.randn(2, 5, 3)
    calls: list[str] = []

    def hook_fn(mod: nn.Module, inputs: Any, out: Any) -> Any:
        calls.append("hook")
        return (out[0] * 0, out[1])

    rnn.register_forward_hook(hook_fn)
    want = rnn.forward(x)
    fast = framejit.jit(rnn, backend="eager")
    got = fast.forward(x)
    assert calls == []
    assert_same(got, want)
    assert_same(fast(x), rnn(x))  # the call runs the hook, once each
    assert calls == ["hook", "hook"]


# --- callable objects and other callables (3, 5, 7) ---------------------------------------------


class Loss:
    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((x - y) ** 2).mean()


class MyLoss(Loss):  # inherits __call__
    pass


def scaled(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s


@pytest.mark.parametrize(
    "fn, args",
    [
        (Loss(), 2),
        (MyLoss(), 2),
        (functools.partial(scaled, s=2.0), 1),
        (staticmethod(scaled), None),
        (torch.sin, 1),
    ],
    ids=["object", "inherited-call", "partial", "staticmethod", "builtin"],
)
def test_jit_takes_what_torch_compile_takes(fn: Any, args: int | None) -> None:
    torch.manual_seed(0)
    x, y = torch.randn(3), torch.randn(3)
    call = (x, y) if args == 2 else (x,) if args == 1 else (x, 3.0)
    counter = CompileCounter()
    fast = framejit.jit(fn, backend=counter)
    for _ in range(2):
        assert_same(fast(*call), fn(*call))
    assert counter.frame_count == 1


def test_jit_above_staticmethod_and_classmethod_in_a_class_body() -> None:
    class K:
        factor = 3.0

        @framejit.jit(backend="eager")
        @staticmethod
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @framejit.jit(backend="eager")
        @classmethod
        def scale(cls, x: torch.Tensor) -> torch.Tensor:
            return x * cls.factor

    x = torch.randn(3)
    assert_same(K.double(x), x * 2)
    assert_same(K().double(x), x * 2)
    assert_same(K.scale(x), x * 3.0)


def test_a_replaced_call_or_class_of_a_callable_object_is_followed() -> None:
    class Scale:
        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class Other:
        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x - 7

    obj, x = Scale(), torch.zeros(2)
    fast = framejit.jit(obj, backend="eager")
    assert_same(fast(x), obj(x))
    Scale.__call__ = lambda self, x: x + 100  # type: ignore[method-assign]
    assert_same(fast(x), obj(x))
    obj.__class__ = Other
    assert_same(fast(x), obj(x))


def test_a_jitted_method_or_forward_can_be_jitted() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        @framejit.jit(backend="eager")
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).relu()

    class C:
        @framejit.jit(backend="eager")
        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x.cos()

    torch.manual_seed(0)
    m, x = M(), torch.randn(2, 3)
    want = m(x)
    assert_same(framejit.jit(m, backend="eager")(x), want)
    assert_same(framejit.jit(m.forward)(x), want)
    assert_same(framejit.jit(C(), backend="eager")(x), x.cos())


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_partial_forward_does_not_break_the_model(when: str) -> None:
    """accelerate's add_hook_to_module: `m.forward = update_wrapper(partial(new, m), old)`."""
    torch.manual_seed(0)
    m, x = nn.Linear(3, 3), torch.randn(2, 3)
    old = m.forward

    def new_forward(module: nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
        return old(*args, **kwargs) * 2

    patched = functools.update_wrapper(functools.partial(new_forward, m), old)
    if when == "before":
        m.forward = patched
    fast = framejit.jit(m, backend="eager")
    if when == "after":
        assert_same(fast(x), m(x))
        m.forward = patched
    want = m(x)
    assert_same(fast(x), want)
    assert_same(fast(x), old(x) * 2)


# --- pickle and copy (6) ------------------------------------------------------------------------


@framejit.jit(backend="eager")
def act(x: torch.Tensor) -> torch.Tensor:
    return x.sigmoid() * x


def plain_act(x: torch.Tensor) -> torch.Tensor:
    return x.tanh()


class HoldsAct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x))


def test_a_jitted_function_pickles_by_reference_and_copies_as_itself() -> None:
    x = torch.randn(2, 3)
    act(x)  # compiled: its cache holds guards that cannot be pickled
    assert pickle.loads(pickle.dumps(act)) is act
    assert copy.deepcopy(act) is act and copy.copy(act) is act
    model = HoldsAct()
    model(x)
    twin = copy.deepcopy(model)
    assert twin.act is act
    assert_same(twin(x), model(x))


def test_a_jit_of_a_function_under_another_name_pickles_to_a_working_jit() -> None:
    fast = framejit.jit(plain_act, backend="eager")
    x = torch.randn(3)
    fast(x)
    again = pickle.loads(pickle.dumps(fast))
    assert isinstance(again, framejit.JitFunction)
    assert_same(again(x), plain_act(x))


# --- introspection (12, 13) ---------------------------------------------------------------------


def test_jit_module_forward_introspects_as_the_original() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(
            self, input_ids: torch.Tensor, attention_mask: Any = None, *, labels: Any = None
        ) -> torch.Tensor:
            "model forward"
            return self.lin(input_ids)

    m = M()
    fast = framejit.jit(m, backend="eager")
    assert inspect.signature(fast.forward) == inspect.signature(m.forward)
    assert fast.forward.__doc__ == "model forward" and fast.forward.__name__ == "forward"
    x = torch.randn(2, 4)
    assert_same(fast.forward(x), m.forward(x))

    def other(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x * scale

    m.forward = other
    assert inspect.signature(fast.forward) == inspect.signature(other)
    assert_same(fast.forward(x), other(x))


async def coro(x: torch.Tensor) -> torch.Tensor:
    await asyncio.sleep(0)
    return x * 2


def gen(x: torch.Tensor) -> Any:
    yield x + 1


def test_jitted_async_and_generator_functions_introspect_as_such() -> None:
    fast_coro, fast_gen = framejit.jit(coro), framejit.jit(gen)
    assert inspect.iscoroutinefunction(fast_coro)
    assert asyncio.iscoroutinefunction(fast_coro)
    assert inspect.isgeneratorfunction(fast_gen)
    assert not inspect.iscoroutinefunction(fast_gen)
    assert not inspect.isgeneratorfunction(act)

    async def dispatch(cb: Any, x: torch.Tensor) -> Any:
        if asyncio.iscoroutinefunction(cb):
            return await cb(x)
        return cb(x)

    x = torch.ones(2)
    assert_same(asyncio.run(dispatch(fast_coro, x)), asyncio.run(dispatch(coro, x)))
    assert_same(list(fast_gen(x)), list(gen(x)))


# --- checked settings and options (9, 10, 15) ---------------------------------------------------


@pytest.mark.parametrize(
    "name, value, error",
    [
        ("recompile_limt", 100, AttributeError),
        ("recompile_limit", "16", TypeError),
        ("recompile_limit", None, TypeError),
        ("recompile_limit", -1, ValueError),
        ("inline_depth_limit", 2.5, TypeError),
        ("cpp_guards", "no", TypeError),
        ("dynamic", "auto", TypeError),
        ("mode", "fast", ValueError),
        ("backend", 3, TypeError),
        ("index_checks", "bogus", ValueError),
    ],
)
def test_config_refuses_unknown_names_and_bad_values(name: str, value: Any, error: type) -> None:
    config = framejit.config
    before = {k: v for k, v in vars(config).items() if not k.startswith("_")}
    with pytest.raises(error, match="recompile_limit" if error is AttributeError else name):
        setattr(config, name, value)
    assert {k: v for k, v in vars(config).items() if not k.startswith("_")} == before

    @framejit.jit(dynamic=False, backend="eager")
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    for n in range(1, 4):  # the user's calls still work
        assert_same(f(torch.ones(n)), torch.full((n,), 2.0))


def test_config_takes_good_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = framejit.config
    monkeypatch.setattr(config, "recompile_limit", 3)
    monkeypatch.setattr(config, "mode", "default")
    monkeypatch.setattr(config, "index_checks", "sync")
    monkeypatch.setattr(config, "cache_dir", tmp_path)
    assert config.cache_dir == str(tmp_path)
    monkeypatch.setattr(config, "backend", CompileCounter())
    assert config.recompile_limit == 3 and config.mode == "default"


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"options": {"nope": 1}}, ValueError),
        ({"options": {"max_autotune": "yes"}}, TypeError),
        ({"options": {"max_autotune": True}, "mode": "default"}, ValueError),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], error: type) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    with pytest.raises(error):
        framejit.jit(f, **kwargs)


def test_max_autotune_option_reaches_the_triton_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    import framejit.backend.triton as triton_backend

    seen: list[Any] = []

    def compile_graph(gm: Any, example_inputs: Any, options: Any = None) -> Any:
        seen.append(options)
        return gm.forward

    monkeypatch.setattr(triton_backend, "compile_graph", compile_graph)

    @framejit.jit(backend="triton", options={"max_autotune": True})
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x + 1).relu()

    x = torch.randn(4)
    assert_same(f(x), (x + 1).relu())
    assert seen and all(o == {"max_autotune": True} for o in seen)


def test_jit_of_a_jitted_function_with_new_settings_uses_them() -> None:
    @framejit.jit(backend="eager")
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        print("break")
        return y * 2

    assert framejit.jit(f) is f
    counter = CompileCounter()
    g = framejit.jit(f, backend=counter)
    assert g is not f
    x = torch.ones(2)
    assert_same(g(x), (x + 1) * 2)
    assert counter.frame_count >= 1
    with pytest.raises(framejit.FullGraphError):
        framejit.jit(f, fullgraph=True)(x)


# --- environment variables (16) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "env, printed, warned",
    [
        ({"FRAMEJIT_CPP_GUARDS": "false"}, "False None auto", False),
        ({"FRAMEJIT_CPP_GUARDS": "OFF"}, "False None auto", False),
        ({"FRAMEJIT_DYNAMIC": "maybe"}, "True None auto", True),
        ({"FRAMEJIT_INDEX_CHECKS": "bogus"}, "True None auto", True),
        ({"FRAMEJIT_INDEX_CHECKS": "Sync"}, "True None sync", False),
    ],
)
def test_environment_values_are_read_or_reported(
    env: dict[str, str], printed: str, warned: bool
) -> None:
    code = "import framejit; c = framejit.config; print(c.cpp_guards, c.dynamic, c.index_checks)"
    clean = {k: "" for k in ("FRAMEJIT_CPP_GUARDS", "FRAMEJIT_DYNAMIC", "FRAMEJIT_INDEX_CHECKS")}
    result = python(["-c", code], **{**clean, **env})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == printed
    name = next(iter(env))
    assert (name in result.stderr) == warned, result.stderr


# --- disable and explain (14, 17, 18) -----------------------------------------------------------


def test_disable_of_a_jitted_function_stops_compiling() -> None:
    counter = CompileCounter()

    @framejit.jit(backend=counter)
    def g(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    g(torch.ones(2))
    assert framejit.disable(g) is g
    for shape in ((2,), (3, 3)):
        assert_same(g(torch.ones(shape)), torch.full(shape, 2.0))
    assert counter.frame_count == 1 and not g.cache.entries


def test_disable_of_a_bound_method_leaves_other_instances_alone() -> None:
    class A:
        def m(self, x: torch.Tensor) -> torch.Tensor:
            return x * 3

    a1, a2 = A(), A()
    quiet = framejit.disable(a1.m)

    def h(f: Any, x: torch.Tensor) -> torch.Tensor:
        return f(x) + 1

    x = torch.ones(2)
    assert framejit.explain(h, a2.m, x).graph_break_count == 0
    assert framejit.explain(h, quiet, x).graph_break_count == 1
    assert_same(quiet(x), a1.m(x))


def test_disable_of_a_builtin_gives_a_wrapper_compiled_callers_break_around() -> None:
    quiet_sin = framejit.disable(torch.sin)
    assert quiet_sin is not torch.sin

    def f(x: torch.Tensor) -> torch.Tensor:
        return quiet_sin(x) + 1

    x = torch.randn(3)
    explained = framejit.explain(f, x)
    assert explained.graph_break_count == 1
    assert_same(framejit.jit(f, backend="eager")(x), torch.sin(x) + 1)


def test_explain_of_a_module_explains_its_call() -> None:
    calls: list[str] = []
    m = nn.Linear(2, 2)

    def patched(x: torch.Tensor) -> torch.Tensor:
        calls.append("forward")
        return x * 0

    m.forward = patched
    m.register_forward_hook(lambda mod, i, o: calls.append("hook"))
    x = torch.ones(1, 2)
    m(x)
    want = list(calls)
    calls.clear()
    explained = framejit.explain(m, x)
    assert calls == want == ["forward", "hook"]
    assert explained.graph_count == 1


def test_explain_of_a_callable_object() -> None:
    explained = framejit.explain(Loss(), torch.ones(2), torch.zeros(2))
    assert explained.graph_count == 1 and explained.graph_break_count == 0


# --- the command line (8, 11) -------------------------------------------------------------------


@pytest.mark.parametrize("option", [["--backend", "nope"], ["--mode", "nope"]])
def test_run_with_a_bad_backend_or_mode_is_a_usage_error(tmp_path: Path, option: list[str]) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    result = python(["-m", "framejit", "run", *option, str(script)])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "nope" in result.stderr
    assert "hi" not in result.stdout


def test_run_runs_a_script_as_python_does(tmp_path: Path) -> None:
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "script.py").write_text(
        textwrap.dedent(
            """\
            import os, sys
            print("__file__", __file__)
            print("argv", sys.argv)
            print("path0", sys.path[0])
            print("cwd on path", os.getcwd() in sys.path)
            print("builtins", type(__builtins__).__name__)
            print("package", repr(__package__), "spec", __spec__)
            raise ValueError("boom")
            """
        )
    )
    args = ["scripts/script.py", "--", "x", "--backend", "-h"]
    plain = python(args, cwd=tmp_path)
    run = python(["-m", "framejit", "run", *args], cwd=tmp_path)
    assert plain.returncode == 1 and "boom" in plain.stderr
    assert (run.returncode, run.stdout, run.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )


def test_a_compiled_caller_breaks_around_a_disabled_jit_function() -> None:
    @framejit.jit(backend="eager")
    def inner(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    def outer(x: torch.Tensor) -> torch.Tensor:
        return inner(x) + 1

    x = torch.ones(2)
    assert framejit.explain(outer, x).graph_break_count == 0
    framejit.disable(inner)
    assert framejit.explain(outer, x).graph_break_count == 1
    assert_same(framejit.jit(outer, backend="eager")(x), x * 3 + 1)
