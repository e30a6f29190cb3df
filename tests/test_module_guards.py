"""A module's guards checked as one group: `module_check` (guards/_tensor_check.cpp).

With the C++ accelerator, a module's MODULE_MATCH guard and its own facts (no hooks, `forward`
not shadowed in its __dict__, its parameters' and buffers' TENSOR_MATCH) compile to one call,
which after a passing check remembers the dicts it read and their versions and, while those are
unchanged, re-checks only the hook dicts and the tensors. These tests prime that fast path (the
guard of an entry first runs on its second call), change one thing, and check that the next call
behaves as eager does; and that the grouped check agrees with the one-guard-at-a-time check
`why_failed` runs, after each change.

Every test runs with guards in Python (no groups) and, where it was built, with the C++ check.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
import torch
from framejit.guards import guard as guard_module
from torch import nn

import framejit
from framejit.testing import CompileCounter

CPP_BUILT = guard_module._tensor_check is not None and hasattr(
    guard_module._tensor_check, "module_check"
)


@pytest.fixture(autouse=True, params=["python", "cpp"] if CPP_BUILT else ["python"])
def guard_language(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(framejit.config, "cpp_guards", request.param == "cpp")
    return request.param


class Lin(nn.Linear):
    """A class of its own per test (`fresh_class`): a test may change the class."""


class Net(nn.Module):
    def __init__(self, cls: type[nn.Linear] = nn.Linear) -> None:
        super().__init__()
        self.lin = cls(3, 4)
        self.register_buffer("scale", torch.full((1,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


def fresh_class() -> type[nn.Linear]:
    return type("Lin", (Lin,), {})


def assert_same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert type(got) is type(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.requires_grad == want.requires_grad
    torch.testing.assert_close(got, want)


def primed(net: Net, x: torch.Tensor) -> tuple[Any, CompileCounter]:
    """The net compiled and called three times: the entry's guard has passed twice."""
    counter = CompileCounter()
    jitted = framejit.jit(net, backend=counter, dynamic=False)
    for _ in range(3):
        assert_same(jitted(x), net(x))
    assert counter.frame_count == 1
    return jitted, counter


def _hook(m: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
    return out * 10


def _pre_hook(m: nn.Module, args: Any) -> Any:
    return (args[0] + 1,)


# (what changes, the input to call with afterwards, whether a new graph must be compiled)
CHANGES: dict[str, tuple[Callable[[Net], Any], Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "parameter replaced, same shape": (
        lambda n: setattr(n.lin, "weight", nn.Parameter(torch.randn(4, 3))),
        lambda x: x,
        False,
    ),
    # (the old parameters are returned, and so kept alive by the test: the fast path must not
    # find them through a parameter dict it did not check again)
    "parameter replaced, other shape": (
        lambda n: (
            n.lin.weight,
            n.lin.bias,
            setattr(n.lin, "weight", nn.Parameter(torch.randn(5, 3))),
            setattr(n.lin, "bias", nn.Parameter(torch.randn(5))),
        ),
        lambda x: x,
        True,
    ),
    # the same Parameter objects, other metadata: no dict changes, only the tensors' own
    ".data replaced, other shape": (
        lambda n: (
            setattr(n.lin.weight, "data", torch.randn(5, 3)),
            setattr(n.lin.bias, "data", torch.randn(5)),
        ),
        lambda x: x,
        True,
    ),
    "module converted to double": (lambda n: n.double(), lambda x: x.double(), True),
    "parameter frozen": (lambda n: n.lin.weight.requires_grad_(False), lambda x: x, True),
    "weight transposed in place": (
        lambda n: setattr(n.lin.weight, "data", torch.randn(3, 4).t()),
        lambda x: x,
        True,
    ),
    "forward hook registered": (lambda n: n.lin.register_forward_hook(_hook), lambda x: x, True),
    "forward pre-hook registered": (
        lambda n: n.lin.register_forward_pre_hook(_pre_hook),
        lambda x: x,
        True,
    ),
    "forward shadowed by an instance attribute": (
        lambda n: setattr(n.lin, "forward", lambda x: x.sum(-1, keepdim=True) * 3),
        lambda x: x,
        True,
    ),
    "buffer replaced, same metadata": (
        lambda n: setattr(n, "scale", torch.full((1,), 7.0)),
        lambda x: x,
        False,
    ),
    "buffer replaced, other shape": (
        lambda n: (n.scale, setattr(n, "scale", torch.ones(4))),
        lambda x: x,
        True,
    ),
    "_parameters dict replaced": (
        lambda n: setattr(
            n.lin,
            "_parameters",
            {"weight": nn.Parameter(torch.randn(5, 3)), "bias": nn.Parameter(torch.randn(5))},
        ),
        lambda x: x,
        True,
    ),
    "submodule switched to eval": (lambda n: n.lin.eval(), lambda x: x, True),
    "submodule's class replaced": (
        lambda n: setattr(n.lin, "__class__", fresh_class()),
        lambda x: x,
        True,
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_after_the_guard_passed_twice_is_seen(change: str) -> None:
    torch.manual_seed(0)
    net = Net(fresh_class())
    x = torch.randn(2, 3)
    jitted, counter = primed(net, x)
    apply, new_input, recompiles = CHANGES[change]
    kept = apply(net)
    x2 = new_input(x)
    for _ in range(2):
        assert_same(jitted(x2), net(x2))
    assert (counter.frame_count > 1) is recompiles
    del kept


def test_a_hook_removed_again_reuses_the_entry() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 3)
    jitted, counter = primed(net, x)
    handle = net.lin.register_forward_hook(_hook)
    assert_same(jitted(x), net(x))
    handle.remove()
    for _ in range(2):
        assert_same(jitted(x), net(x))
    assert counter.frame_count == 2  # the first entry holds again


def _entry_guards(net: Net, x: torch.Tensor) -> Any:
    jitted, _ = primed(net, x)
    entry = jitted.__dict__["_jit_forward"].__func__._cache.entries[0]
    return entry.guards, entry.guards.argnames


def _class_shadows_training(net: Net) -> None:
    # a property on the class wins over the instance's `training`: the class's version changed
    type(net.lin).training = property(lambda self: False, lambda self, value: None)


def _class_adds_hooks(net: Net) -> None:
    type(net.lin)._forward_hooks = property(lambda self: OrderedDict({0: _hook}))


# changes the guards must see that are not a program eager can run the same way afterwards
MORE_CHANGES: dict[str, Callable[[Net], Any]] = {
    **{name: apply for name, (apply, _, recompiles) in CHANGES.items() if recompiles},
    "class property shadows training": _class_shadows_training,
    "class property shadows the forward hooks": _class_adds_hooks,
    "instance dict replaced": lambda n: setattr(
        n.lin, "__dict__", dict(n.lin.__dict__, training=False)
    ),
    "hook dict replaced by a non-empty one": lambda n: setattr(
        n.lin, "_forward_pre_hooks", OrderedDict({0: _pre_hook})
    ),
    "backward hook registered": lambda n: n.lin.register_full_backward_hook(lambda *a: None),
    "buffer dict entry deleted": lambda n: n._buffers.pop("scale"),
    "parameter dict entry replaced directly": lambda n: (
        n.lin.weight,
        n.lin._parameters.__setitem__("weight", nn.Parameter(torch.randn(5, 3))),
    ),
    "parameter set to None": lambda n: setattr(n.lin, "bias", None),
}


@pytest.mark.parametrize("change", list(MORE_CHANGES))
def test_the_grouped_check_agrees_with_the_guards_one_by_one(change: str) -> None:
    """check() passes exactly when every guard holds on its own (why_failed's one-line-per-guard
    function), before and after the change, with the fast path primed."""
    torch.manual_seed(0)
    net = Net(fresh_class())
    x = torch.randn(2, 3)
    guards, argnames = _entry_guards(net, x)
    forward = type(net).forward
    assert argnames[0] == "self"
    assert guards.check(forward, net, x) and guards.why_failed(forward, net, x) is None
    kept = MORE_CHANGES[change](net)
    for _ in range(2):
        assert guards.check(forward, net, x) is False
        assert guards.why_failed(forward, net, x) is not None
    del kept


def test_an_equal_copy_of_the_instance_dict_still_passes() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 3)
    guards, _ = _entry_guards(net, x)
    net.lin.__dict__ = dict(net.lin.__dict__)  # the fast path's dict is gone: checked in full
    forward = type(net).forward
    assert guards.check(forward, net, x) and guards.check(forward, net, x)
    net.lin.__dict__["training"] = False
    assert guards.check(forward, net, x) is False


def test_a_dead_module_fails_its_group() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 3)
    guards, _ = _entry_guards(net, x)
    other = Net()
    other.load_state_dict(net.state_dict())
    forward = type(net).forward
    assert guards.check(forward, other, x) is False  # another module: the weak reference differs
    del net
    assert guards.check(forward, other, x) is False


def test_grouped_lines_in_the_guard_source(guard_language: str) -> None:
    torch.manual_seed(0)
    net = Net()
    guards, _ = _entry_guards(net, torch.randn(2, 3))
    if guard_language == "python":
        assert "module_check" not in guards.source
        assert "['weight'], ___" in guards.source or "['weight'].shape" in guards.source
    else:  # one check for the net; under it, the Linear folded into it: is it, no hooks,
        # forward not shadowed, weight and bias
        lines = guards.source.splitlines()
        at = next(i for i, ln in enumerate(lines) if "_parameters['weight']" in ln)
        line = lines[at]
        assert line.lstrip().startswith("# ") and "m._modules['lin']: is the module" in line
        assert "no hooks" in line and "'forward'" in line and "_parameters['bias']" in line
        call = next(ln for ln in reversed(lines[:at]) if not ln.lstrip().startswith("#"))
        assert "___module_check(L_self, " in call


# Guards on values read from a module (its plain attributes, a tuple's length and items, its
# class's forward and that function's code) and the guards of its submodules fold into the
# module's one module_check call. The fast path skips a fact whose outcome the unchanged
# instance dict and class fix, and reads the others again.


def _tagged_linear() -> type[nn.Linear]:
    """A Linear class of its own with a forward function of its own (a test may change both)."""

    def forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias) * self.gain

    return type("Tagged", (nn.Linear,), {"forward": forward, "gain": 1.0})


class Attrs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(_tagged_linear()(3, 4))
        self.alpha = 0.5
        self.mode = "scale"
        self.shape = (2, 2)
        self.flag = True
        self.count = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        if self.mode == "scale":
            y = y * self.alpha
        if self.flag:
            y = y + self.count
        return y.reshape(-1, *self.shape)


def _triple(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return nn.functional.linear(x, self.weight, self.bias) * 3


ATTR_CHANGES: dict[str, tuple[Callable[[Attrs], Any], bool]] = {
    "float attribute changed": (lambda n: setattr(n, "alpha", 0.25), True),
    "float attribute, an equal new object": (lambda n: setattr(n, "alpha", 0.1 + 0.4), False),
    "str attribute changed": (lambda n: setattr(n, "mode", "none"), True),
    "bool attribute changed": (lambda n: setattr(n, "flag", False), True),
    "int attribute changed": (lambda n: setattr(n, "count", 5), True),
    "tuple attribute, an equal new tuple": (lambda n: setattr(n, "shape", (1 + 1, 2)), False),
    "tuple attribute changed": (lambda n: setattr(n, "shape", (4, 1)), True),
    "tuple attribute became a list": (lambda n: setattr(n, "shape", [2, 2]), True),
    "class attribute shadowed on the instance": (
        lambda n: setattr(n.inner[0], "gain", 2.0),
        True,
    ),
    "class attribute changed": (lambda n: setattr(type(n.inner[0]), "gain", 2.0), True),
    "class forward replaced": (lambda n: setattr(type(n.inner[0]), "forward", _triple), True),
    "class forward's code replaced": (
        lambda n: setattr(type(n.inner[0]).forward, "__code__", _triple.__code__),
        True,
    ),
    "property on the class shadows an attribute": (
        lambda n: setattr(type(n), "alpha", property(lambda self: 4.0)),
        True,
    ),
    "submodule replaced by another of its class": (
        lambda n: n.inner.__setitem__(0, type(n.inner[0])(3, 4)),
        True,
    ),
    "submodule's submodule switched to eval": (lambda n: n.inner[0].eval(), True),
    "a layer appended to a Sequential": (lambda n: n.inner.append(nn.Identity()), True),
    "a Sequential's layers dict replaced by an equal one": (
        lambda n: setattr(n.inner, "_modules", dict(n.inner._modules)),
        False,
    ),
}


@pytest.mark.parametrize("change", list(ATTR_CHANGES))
def test_a_change_to_a_value_read_from_a_module_is_seen(change: str) -> None:
    torch.manual_seed(0)
    net = type("Net", (Attrs,), {})()  # a class of its own: a change may set a class property
    x = torch.randn(2, 3)
    counter = CompileCounter()
    jitted = framejit.jit(net, backend=counter, dynamic=False)
    for _ in range(3):
        assert_same(jitted(x), net(x))
    assert counter.frame_count == 1
    guards = jitted.__dict__["_jit_forward"].__func__._cache.entries[0].guards
    apply, recompiles = ATTR_CHANGES[change]
    apply(net)
    forward = type(net).forward
    assert guards.check(forward, net, x) is not recompiles
    assert (guards.why_failed(forward, net, x) is None) is not recompiles
    for _ in range(2):
        assert_same(jitted(x), net(x))
    assert (counter.frame_count > 1) is recompiles


def test_values_read_from_modules_fold_into_one_check(guard_language: str) -> None:
    torch.manual_seed(0)
    net = Attrs()
    jitted = framejit.jit(net, backend=CompileCounter(), dynamic=False)
    jitted(torch.randn(2, 3))
    guards = jitted.__dict__["_jit_forward"].__func__._cache.entries[0].guards
    checks = [ln for ln in guards.source.splitlines() if ln.lstrip().startswith("if not")]
    if guard_language == "python":
        assert any("L_self.alpha" in ln for ln in checks)
        return
    assert not any(
        ".alpha" in ln or "__code__" in ln or "module_check(L_self._" in ln for ln in checks
    )
    lines = guards.source.splitlines()
    notes = [ln.strip().lstrip("#").strip() for ln in lines if ln.lstrip().startswith("#")]
    assert any(ln.startswith("type(m.alpha) is float and m.alpha == 0.5") for ln in notes)
    assert any(ln.startswith("len(m.shape) == 2") for ln in notes)
    assert any(ln.startswith("type(m).forward.__code__ is code_") for ln in notes)
    assert any(ln.startswith("m._modules['inner']: is the module") for ln in notes)
    assert any(ln.startswith("list(m._modules) == ['0']") for ln in notes)


class Counted(nn.Module):
    """Reads how many blocks it has, never a block: only the keys guard sees an append."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Identity(), nn.Identity()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * len(self.blocks)


def test_a_container_that_grows_after_the_guard_passed_twice_is_seen() -> None:
    net = Counted()
    x = torch.randn(3)
    counter = CompileCounter()
    jitted = framejit.jit(net, backend=counter, dynamic=False)
    for _ in range(3):
        assert_same(jitted(x), net(x))
    net.blocks.append(nn.Identity())
    for _ in range(2):
        assert_same(jitted(x), net(x))
    assert counter.frame_count == 2
